"""Refuse a run that cannot fit before allocating it: a lower bound on training memory against what
the machine has free.

The bound counts fp32 weights, gradients and AdamW's two moments (16 bytes a parameter) and a floor
on activations: per token, 8 values of d_model per layer plus the logits and their gradient. Real
runs need more (attention scores, the FFN's hidden layer, allocator slack), so a refusal is always
right; a run that passes may still be tight. Parameters are counted on the meta device (no memory).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ..config import ConfigError, RunConfig

GB = 1e9


def training_bytes(cfg: RunConfig) -> dict:
    """Lower bounds in bytes: {"params", "weights", "grads", "optimizer", "activations", "total"}."""
    from ..models.accounting import param_count_for_config

    m, t = cfg.model, cfg.train
    n = int(param_count_for_config(m)["total"])
    tokens = t.batch_size * cfg.data.seq_len
    acts = tokens * (8 * m.d_model * m.n_layers + 2 * m.vocab_size) * 4
    out = {"params": n, "weights": 4 * n, "grads": 4 * n, "optimizer": 8 * n, "activations": acts}
    out["total"] = out["weights"] + out["grads"] + out["optimizer"] + acts
    return out


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


def check_training_memory(cfg: RunConfig, device: torch.device) -> dict:
    """Raise ConfigError when the lower bound exceeds the free memory; returns the estimate."""
    est = training_bytes(cfg)
    free = available_bytes(device)
    if free is not None and est["total"] > free:
        m, t = cfg.model, cfg.train
        raise ConfigError(
            f"model.d_model={m.d_model}, model.n_layers={m.n_layers}, train.batch_size={t.batch_size}, "
            f"data.seq_len={cfg.data.seq_len}: training needs at least {est['total'] / GB:,.1f} GB "
            f"({est['params'] / 1e6:,.1f}M params: weights+grads+AdamW {(est['total'] - est['activations']) / GB:,.1f} GB, "
            f"activations {est['activations'] / GB:,.1f} GB) but {free / GB:,.1f} GB is free on {device.type} "
            "(valid: a smaller model or batch)")
    return est
