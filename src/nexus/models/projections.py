"""The projection family: which module maps d_in -> d_out for q, k, v, o (and the FFN).

The baseline uses nn.Linear. Nexusformer's Nexus-Rank and TokenFormer's Pattention register a
builder `(cfg, target, d_in, d_out, bias) -> nn.Module` here with `@PROJECTIONS.register(kind)`;
layers never see the config: they get a `ProjectionFactory` (target, d_in, d_out, bias) -> module
made once per model by `projection_factory(cfg)`.
"""
from __future__ import annotations

from typing import Callable

import torch.nn as nn

from ..config import ModelConfig
from ..plugins import Registry

# target ("q", "k", "v", "o", "ffn"), d_in, d_out, bias -> the module
ProjectionFactory = Callable[[str, int, int, bool], nn.Module]

# kind -> builder(cfg, target, d_in, d_out, bias); the modules of nexus.models register themselves
PROJECTIONS: Registry[Callable[..., nn.Module]] = Registry("model.projection.kind", "nexus.models")


def linear_projection(target: str, d_in: int, d_out: int, bias: bool = False) -> nn.Module:
    return nn.Linear(d_in, d_out, bias=bias)


def projection_factory(cfg: ModelConfig) -> ProjectionFactory:
    """The factory a model's layers get: cfg.projection's kind for the targets it names, else nn.Linear."""
    p = cfg.projection
    if p.kind == "linear" or not p.targets:
        return linear_projection
    build = PROJECTIONS.get(p.kind)

    def make(target: str, d_in: int, d_out: int, bias: bool = False) -> nn.Module:
        if p.uses(target):
            return build(cfg, target, d_in, d_out, bias)
        return nn.Linear(d_in, d_out, bias=bias)
    return make
