"""The projection family: which module maps d_in -> d_out for q, k, v, o (and the FFN).

The baseline uses nn.Linear. Nexusformer's Nexus-Rank and TokenFormer's Pattention register
themselves here so attention code never changes when the projection does; `nexus.models` imports
them (package __init__), so they are registered before any model is built.
"""
from __future__ import annotations

from typing import Callable

import torch.nn as nn

from ..config import ModelConfig

# kind -> factory(cfg, target, d_in, d_out, bias) -> nn.Module
PROJECTION_FACTORIES: dict[str, Callable[..., nn.Module]] = {}


def register_projection(kind: str):
    def deco(fn):
        PROJECTION_FACTORIES[kind] = fn
        return fn
    return deco


def make_projection(cfg: ModelConfig, target: str, d_in: int, d_out: int, bias: bool = False) -> nn.Module:
    """Build the projection for `target` (q/k/v/o/ffn) according to cfg.projection."""
    if cfg.projection.uses(target):
        return PROJECTION_FACTORIES[cfg.projection.kind](cfg, target, d_in, d_out, bias)
    return nn.Linear(d_in, d_out, bias=bias)

