"""Slow, obviously-correct references for Nexus-Rank and Pattention, one token at a time, written
from the equations (GELU as x * Phi(x) with the erf form). Used only by tests."""

from __future__ import annotations

import math

import torch


def gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def nexus_rank_ref(
    x: torch.Tensor,
    w_m: torch.Tensor,
    w_a: torch.Tensor,
    w_d: torch.Tensor,
    b_d=None,
    form: str = "paper",
    scale_m: float | None = None,
    scale_a: float | None = None,
) -> torch.Tensor:
    """x (..., D); w_m (D, M), w_a (M, A), w_d (A, D_out) in the paper's (in, out) orientation.
    form l2norm: the public code's current EquivalentMLP.l2_norm, v / (||v|| + 1e-5) * sqrt(D_out);
    l2norm_width: its earlier form, v / ||v|| * sqrt(len(v)) (with 1e-6 added to the norm)."""
    flat = x.reshape(-1, x.shape[-1])
    d_out = w_d.shape[1]

    def l2(v, width_scale):
        if form == "l2norm":
            return v / (torch.sqrt((v * v).sum()) + 1e-5) * math.sqrt(d_out)
        if form == "l2norm_width":
            return (
                v
                / (torch.sqrt((v * v).sum()) + 1e-6)
                * (width_scale if width_scale is not None else math.sqrt(v.numel()))
            )
        return v

    rows = []
    for tok in flat:
        h = l2(tok @ w_m, scale_m)
        z = l2(gelu_exact(h) @ w_a, scale_a)
        y = gelu_exact(z) @ w_d
        rows.append(y + b_d if b_d is not None else y)
    return torch.stack(rows).reshape(*x.shape[:-1], w_d.shape[1])


def pattention_ref(
    x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, act: str = "gelu_l2", n_for_scale: int | None = None
) -> torch.Tensor:
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
