"""Slow, obviously-correct references for Nexus-Rank and Pattention, one token at a time, written
from the equations (GELU as x * Phi(x) with the erf form). Used only by tests."""
from __future__ import annotations

import math

import torch


def gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def nexus_rank_ref(x: torch.Tensor, w_m: torch.Tensor, w_a: torch.Tensor, w_d: torch.Tensor, b_d=None,
                   form: str = "paper", scale_m: float | None = None, scale_a: float | None = None) -> torch.Tensor:
    """x (..., D); w_m (D, M), w_a (M, A), w_d (A, D_out) in the paper's (in, out) orientation."""
    flat = x.reshape(-1, x.shape[-1])
    rows = []
    for tok in flat:
        h = tok @ w_m
        if form == "l2norm":
            h = h / (torch.sqrt((h * h).sum()) + 1e-6) * (scale_m if scale_m is not None else math.sqrt(w_m.shape[1]))
        z = gelu_exact(h) @ w_a
        if form == "l2norm":
            z = z / (torch.sqrt((z * z).sum()) + 1e-6) * (scale_a if scale_a is not None else math.sqrt(w_a.shape[1]))
        y = gelu_exact(z) @ w_d
        rows.append(y + b_d if b_d is not None else y)
    return torch.stack(rows).reshape(*x.shape[:-1], w_d.shape[1])


def pattention_ref(x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, act: str = "gelu_l2",
                   n_for_scale: int | None = None) -> torch.Tensor:
    """TokenFormer eq.: O = Theta(x K^T) V, Theta = GELU(s / ||s|| * sqrt(n)) or softmax(s / sqrt(d))."""
    flat = x.reshape(-1, x.shape[-1])
    n = n_for_scale or keys.shape[0]
    rows = []
    for tok in flat:
        s = torch.stack([(tok * k).sum() for k in keys])
        if act == "softmax":
            e = torch.exp(s / math.sqrt(x.shape[-1]) - (s / math.sqrt(x.shape[-1])).max())
            w = e / e.sum()
        else:
            w = gelu_exact(s / (torch.sqrt((s * s).sum()) + 1e-6) * math.sqrt(n))
        rows.append((w[:, None] * values).sum(0))
    return torch.stack(rows).reshape(*x.shape[:-1], values.shape[1])
