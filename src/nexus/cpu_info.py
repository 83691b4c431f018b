"""Which CPU a figure came from: model name, torch's CPU capability and the instruction-set flags that
decide the fast kernels (AVX2, AVX-512, AVX-512 BF16, AMX), in one line.

CPUs differ from session to session (one had AVX-512 BF16, the next only AVX2), and a speed figure
without its CPU cannot be compared with anything, so every CPU benchmark and the ternary kernel
choice print this line beside their numbers. Environment variables that restrict code generation
below what the hardware has (torch's ATEN_CPU_CAPABILITY, numba's NUMBA_CPU_NAME/NUMBA_CPU_FEATURES,
MKL's and oneDNN's) are named in the line too: a figure measured under them is an emulation of a
smaller CPU, not a measurement on one.
"""

from __future__ import annotations

import functools
import os
import platform

_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")  # the ones our kernel choice depends on
_RESTRICTING_ENV = ("ATEN_CPU_CAPABILITY", "NUMBA_CPU_NAME", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """First processor's fields from /proc/cpuinfo (Linux); empty elsewhere."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", "Intel(R) Xeon(R) ..."), or the platform's best guess."""
    info = _cpuinfo()
    return info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> list[str]:
    """Of the instruction-set flags that matter to our kernels, those the CPU reports (Linux only)."""
    have = set(_cpuinfo().get("flags", "").split())
    return [f for f in _FLAGS if f in have]


def cpu_capability() -> str:
    """torch's dispatch level for its vectorized CPU kernels (DEFAULT, AVX2, AVX512, ...)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def restricted_by() -> list[str]:
    """`NAME=value` for each set environment variable that limits code generation below the hardware."""
    return [f"{k}={os.environ[k]}" for k in _RESTRICTING_ENV if os.environ.get(k)]


def describe_cpu() -> str:
    """One line: model, torch capability, flags, logical CPUs, and any restriction in force."""
    flags = cpu_flags()
    line = (
        f"CPU {cpu_model()}, torch capability {cpu_capability()}"
        f"{' (flags ' + ' '.join(flags) + ')' if flags else ''}, {os.cpu_count()} logical CPUs"
    )
    limits = restricted_by()
    if limits:
        line += f"; code generation restricted by {' '.join(limits)} (an emulation of a smaller CPU)"
    return line
