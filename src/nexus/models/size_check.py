"""The size check `build_model` runs before allocating: parameters by arithmetic, against free memory.

Kept apart from models/accounting.py, which builds models on the meta device (and so imports build_model):
this module imports neither, so the builder can call it without an import circle."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..config import ConfigError, ModelConfig


def formula_count(cfg: ModelConfig) -> int | None:
    """Total parameters of `cfg` by arithmetic (kind_options/param_formula.py, held to real builds of every
    preset by its test), so an absurd config costs nothing to count; None for a registered kind that
    declares no count of its own (the caller counts it on the meta device)."""
    from ..kind_options.param_formula import count

    try:
        return int(count(cfg)["total"])
    except (AttributeError, NotImplementedError):  # a plugin kind without a `params` count
        return None


def available_bytes(device: torch.device) -> int | None:
    """Free memory where the run would live (GPU memory on CUDA; RAM within any cgroup limit on CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    free = []
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        free.append(int(info["MemAvailable"].split()[0]) * 1024)
    except (OSError, KeyError, ValueError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            free.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    if not free and hasattr(os, "sysconf"):
        try:
            free.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            pass
    return min(free) if free else None


def check_model_size(cfg: ModelConfig, n: int) -> None:
    """Refuse, before any allocation, a model of `n` parameters whose weights alone cannot fit in the free
    memory of the device it would be built on (a 1,000,000-layer or d_model 1e9 config is one line at once,
    not minutes of allocation and an out-of-memory kill). Building on the meta device (accounting) allocates
    nothing: no check."""
    device = torch.get_default_device()
    if device.type == "meta":
        return
    need = n * torch.get_default_dtype().itemsize
    free = available_bytes(device)
    if free is not None and need > free:
        raise ConfigError(
            f"model.d_model={cfg.d_model}, model.n_layers={cfg.n_layers}, model.vocab_size="
            f"{cfg.vocab_size}: {n:,} parameters need {need / 1e9:,.1f} GB as "
            f"{str(torch.get_default_dtype()).removeprefix('torch.')} but {free / 1e9:,.1f} GB is free on "
            f"{device.type} (valid: a smaller model)"
        )
