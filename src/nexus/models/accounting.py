"""Parameter accounting for any config without allocating weights (arithmetic, or the meta device), and
the size check every build passes first."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ..config import ConfigError, ModelConfig


def build_on_meta(cfg: ModelConfig):
    from . import build_model

    with torch.device("meta"):
        return build_model(cfg)


def param_count_for_config(cfg: ModelConfig) -> dict:
    """{'total', 'embedding', 'non_embedding', 'fp16_mb', 'ternary_mb' (None unless ternary layers)}."""
    model = build_on_meta(cfg)
    total = sum(p.numel() for p in model.parameters())
    emb = sum(p.numel() for n, p in model.named_parameters() if n.endswith("embed.weight") or "lm_head" in n)
    ternary = sum(p.numel() for m in model.modules() if getattr(m, "is_ternary", False) for p in [m.weight])
    out = {"total": total, "embedding": emb, "non_embedding": total - emb, "fp16_mb": total * 2 / 1e6,
           "ternary_mb": None}
    if ternary:
        # ternary weights at 2 bits + one fp32 scale per tensor; everything else fp16
        out["ternary_mb"] = (ternary * 2 / 8 + (total - ternary) * 2) / 1e6
    return out


def param_count(cfg: ModelConfig) -> int:
    """Total parameters of `cfg`: by arithmetic (analysis/param_formula.py, held to real builds of every
    preset by its test), so an absurd config costs nothing to count; a registered kind that declares no
    count of its own is counted on the meta device instead."""
    from ..analysis.param_formula import count

    try:
        return int(count(cfg)["total"])
    except (AttributeError, NotImplementedError):  # a plugin kind without a `params` count
        return int(param_count_for_config(cfg)["total"])


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


def check_model_size(cfg: ModelConfig) -> None:
    """Refuse, before any allocation, a model whose weights alone cannot fit in the free memory of the
    device it would be built on (a 1,000,000-layer or d_model 1e9 config is one line at once, not minutes of
    allocation and an out-of-memory kill). Building on the meta device (accounting) allocates nothing:
    no check."""
    device = torch.get_default_device()
    if device.type == "meta":
        return
    n = param_count(cfg)
    need = n * torch.get_default_dtype().itemsize
    free = available_bytes(device)
    if free is not None and need > free:
        raise ConfigError(f"model.d_model={cfg.d_model}, model.n_layers={cfg.n_layers}, model.vocab_size="
                          f"{cfg.vocab_size}: {n:,} parameters need {need / 1e9:,.1f} GB as "
                          f"{str(torch.get_default_dtype()).removeprefix('torch.')} but {free / 1e9:,.1f} GB is free on "
                          f"{device.type} (valid: a smaller model)")
