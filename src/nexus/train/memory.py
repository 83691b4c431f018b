"""Refuse a run that cannot fit before allocating it: a lower bound on training memory against what
the machine has free.

The bound counts fp32 weights, gradients and AdamW's two moments (16 bytes a parameter) and a floor
on activations: per token, 8 values of d_model per layer plus the logits and their gradient. Real
runs need more (attention scores, the FFN's hidden layer, allocator slack), so a refusal is always
right; a run that passes may still be tight. Parameters are counted by arithmetic on the config
(models/accounting.py: param_count), so a million-layer config is refused at once, before anything is built.
"""

from __future__ import annotations

import torch

from ..config import ConfigError, RunConfig
from ..models.accounting import param_count
from ..models.size_check import available_bytes

GB = 1e9


def training_bytes(cfg: RunConfig) -> dict:
    """Lower bounds in bytes: {"params", "weights", "grads", "optimizer", "activations", "total"}."""
    m, t = cfg.model, cfg.train
    n = param_count(m)
    tokens = t.batch_size * cfg.data.seq_len
    acts = tokens * (8 * m.d_model * m.n_layers + 2 * m.vocab_size) * 4
    out = {"params": n, "weights": 4 * n, "grads": 4 * n, "optimizer": 8 * n, "activations": acts}
    out["total"] = out["weights"] + out["grads"] + out["optimizer"] + acts
    return out


def check_training_memory(cfg: RunConfig, device: torch.device) -> dict:
    """Raise ConfigError when the lower bound exceeds the free memory; returns the estimate."""
    est = training_bytes(cfg)
    free = available_bytes(device)
    if free is not None and est["total"] > free:
        m, t = cfg.model, cfg.train
        raise ConfigError(
            f"model.d_model={m.d_model}, model.n_layers={m.n_layers}, train.batch_size={t.batch_size}, "
            f"data.seq_len={cfg.data.seq_len}: training needs at least {est['total'] / GB:,.1f} GB "
            f"({est['params'] / 1e6:,.1f}M params: "
            f"weights+grads+AdamW {(est['total'] - est['activations']) / GB:,.1f} GB, "
            f"activations {est['activations'] / GB:,.1f} GB) but {free / GB:,.1f} GB is free on {device.type} "
            "(valid: a smaller model or batch)"
        )
    return est
