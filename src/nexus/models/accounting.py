"""Parameter accounting for any config without allocating weights (arithmetic, or the meta device); the size
check every build passes first is models/size_check.py."""

from __future__ import annotations

import torch

from ..config import ModelConfig


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
    out = {
        "total": total,
        "embedding": emb,
        "non_embedding": total - emb,
        "fp16_mb": total * 2 / 1e6,
        "ternary_mb": None,
    }
    if ternary:
        # ternary weights at 2 bits + one fp32 scale per tensor; everything else fp16
        out["ternary_mb"] = (ternary * 2 / 8 + (total - ternary) * 2) / 1e6
    return out


def param_count(cfg: ModelConfig) -> int:
    """Total parameters of `cfg`: by arithmetic (kind_options/param_formula.py, held to real builds of every
    preset by its test), so an absurd config costs nothing to count; a registered kind that declares no
    count of its own is counted on the meta device instead."""
    from .size_check import formula_count

    n = formula_count(cfg)
    return n if n is not None else int(param_count_for_config(cfg)["total"])
