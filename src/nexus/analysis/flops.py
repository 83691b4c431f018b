"""Analytic forward FLOPs per token for every architecture in nexus (the FLOPs protocol).

The walker visits the module tree once:
  * nn.Linear counts 2 * in * out per token (a multiply and an add per weight);
  * nn.Embedding is a lookup (0);
  * any module may define `flops_per_token(seq_len) -> float`: the forward FLOPs per token of its
    OWN work that is not a child nn.Linear (attention score/value products, Pattention's token
    matmuls, a tied LM head, MoE routing, extra recurrent applications, ...);
  * a module with `flops_include_children = True` reports its whole subtree itself (MoE: only the
    routed experts run, so summing every expert's Linear would over-count).
Attention products are counted as the full T x T square that dense kernels compute (causal masking
does not skip work in SDPA), so the analytic count matches `torch.utils.flop_counter` (tests).
Training FLOPs per token ~ 3 x forward (backward = 2 x forward).
"""
from __future__ import annotations

import torch.nn as nn

from ..config import ModelConfig


def module_flops(module: nn.Module, seq_len: int) -> float:
    """Forward FLOPs per token of `module` and its subtree."""
    own = 0.0
    if isinstance(module, nn.Linear):
        own = 2.0 * module.in_features * module.out_features
    fn = getattr(module, "flops_per_token", None)
    if callable(fn):
        own += float(fn(seq_len))
    if getattr(module, "flops_include_children", False):
        return own
    return own + sum(module_flops(c, seq_len) for c in module.children())


def flops_breakdown(model: nn.Module, seq_len: int) -> dict[str, float]:
    """Top-level children -> FLOPs per token, plus the model's own work ("(model)") and "total"."""
    out: dict[str, float] = {}
    fn = getattr(model, "flops_per_token", None)
    if callable(fn):
        out["(model)"] = float(fn(seq_len))
    for name, child in model.named_children():
        out[name] = module_flops(child, seq_len)
    out["total"] = sum(out.values())
    return out


def forward_flops_per_token(model_or_cfg, seq_len: int) -> float:
    """Forward FLOPs per token of a model (or a ModelConfig, built on the meta device: no memory)."""
    model = model_or_cfg
    if isinstance(model_or_cfg, ModelConfig):
        from .accounting import build_on_meta

        model = build_on_meta(model_or_cfg)
    return module_flops(model, seq_len)


def train_flops_per_token(model_or_cfg, seq_len: int) -> float:
    """Training FLOPs per token: forward + backward (2 x forward)."""
    return 3.0 * forward_flops_per_token(model_or_cfg, seq_len)


def linear_layer_flops(model_or_cfg, seq_len: int) -> float:
    """Only the nn.Linear FLOPs (the paper's "linear-layer FLOPs per token" comparison, section 4.3)."""
    model = model_or_cfg
    if isinstance(model_or_cfg, ModelConfig):
        from .accounting import build_on_meta

        model = build_on_meta(model_or_cfg)
    return sum(2.0 * m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear))
