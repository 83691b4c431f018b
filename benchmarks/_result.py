"""The one machine-readable line each speed benchmark ends with, so `speed_suite.py` can gather every
headline figure from one invocation without scraping prose.

    RESULT {"name": "ternary decode vs fp32", "value": 2.93, "range": [2.73, 2.96], "unit": "x", ...,
            "cpu": "CPU AMD EPYC, torch capability AVX512 (flags avx2 avx512f ...), 2 logical CPUs"}

A CPU figure means nothing without its CPU (sessions have run on AVX2-only and on AVX-512 BF16
machines), so every record carries `describe_cpu()` and the first one a script prints is preceded by
the `machine:` line; scripts that print figures without a RESULT line call `print_machine()` first.
"""

from __future__ import annotations

import json
import statistics

PREFIX = "RESULT "
_machine_printed = False


def machine() -> str:
    """CPU model, torch CPU capability and flags (nexus/cpu_info.py), torch and Python versions."""
    import platform

    import torch

    from nexus.cpu_info import describe_cpu

    return f"{describe_cpu()}; torch {torch.__version__}, Python {platform.python_version()}"


def print_machine() -> str:
    """Print the `machine:` line once per process and return it."""
    global _machine_printed
    line = machine()
    if not _machine_printed:
        print(f"machine: {line}", flush=True)
        _machine_printed = True
    return line


def emit(name: str, values: list[float], target: str, unit: str = "x", met: bool | None = None, **raw) -> dict:
    """Print the median of `values` (per-round ratios or measurements) with their range, the target as
    text, whether it is met (None: a figure to report, no target) and any raw numbers worth keeping."""
    rec = {
        "name": name,
        "value": round(statistics.median(values), 4),
        "range": [round(min(values), 4), round(max(values), 4)],
        "rounds": len(values),
        "unit": unit,
        "target": target,
        "met": met,
        **raw,
        "cpu": print_machine(),
    }
    print(PREFIX + json.dumps(rec), flush=True)
    return rec


def parse(text: str) -> list[dict]:
    return [json.loads(line[len(PREFIX) :]) for line in text.splitlines() if line.startswith(PREFIX)]
