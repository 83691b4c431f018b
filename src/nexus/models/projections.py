"""The projection family: which module maps d_in -> d_out for q, k, v, o (and the FFN).

The baseline uses nn.Linear. Nexusformer's Nexus-Rank and TokenFormer's Pattention each declare their
options, with the targets they replace, and the parameter count of one projection in
`nexus.kind_options.<kind>` (a `config.ProjectionOptions` subclass registered under the kind's name: no
torch, so configs are parsed and counted without it), and register here, in their own file, a
`ProjectionKind`: the builder `(cfg, target, d_in, d_out, bias) -> nn.Module`.
Layers never see the config: they get a `ProjectionFactory` (target, d_in, d_out, bias) -> module
made once per model by `projection_factory(cfg)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn as nn

from ..config import ModelConfig
from ..plugins import Registry

# target ("q", "k", "v", "o", "ffn"), d_in, d_out, bias -> the module
ProjectionFactory = Callable[[str, int, int, bool], nn.Module]


@dataclass(frozen=True)
class ProjectionKind:
    build: Callable[..., nn.Module]  # (cfg, target, d_in, d_out, bias) -> the module (its count: cfg.projection.params)


# kind -> ProjectionKind; the modules of nexus.models register themselves
PROJECTIONS: Registry[ProjectionKind] = Registry("model.projection.kind", "nexus.models")


def linear_projection(target: str, d_in: int, d_out: int, bias: bool = False) -> nn.Module:
    return nn.Linear(d_in, d_out, bias=bias)


def projection_factory(cfg: ModelConfig) -> ProjectionFactory:
    """The factory a model's layers get: cfg.projection's kind for the targets it names, else nn.Linear."""
    p = cfg.projection
    if p.kind == "linear" or not p.targets:
        return linear_projection
    build = PROJECTIONS.get(p.kind).build

    def make(target: str, d_in: int, d_out: int, bias: bool = False) -> nn.Module:
        if p.uses(target):
            return build(cfg, target, d_in, d_out, bias)
        return nn.Linear(d_in, d_out, bias=bias)

    return make
