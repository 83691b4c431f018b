"""Registries of layer kinds: which attention and which MLP a transformer layer is built with.

A variant module registers itself with one line,

    ATTENTION_KINDS.register("higher_order")(LayerKind(lambda cfg: cfg.attention.order > 1, build))

where `selected(cfg)` says from the ModelConfig whether a layer uses the kind and `build(cfg, **common)`
makes the module (`common`: the plain arguments every kind takes, see models/transformer.py). A
layer with no selected kind gets the baseline (Attention, SwiGLU). The modules of nexus.models are
imported on the first lookup, so a new kind is a new file plus its registration line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.nn as nn

from ..config import ModelConfig
from ..plugins import Registry


@dataclass(frozen=True)
class LayerKind:
    selected: Callable[[ModelConfig], bool]  # does this config's layer use the kind?
    build: Callable[..., nn.Module]  # build(cfg, **common) -> the module


ATTENTION_KINDS: Registry[LayerKind] = Registry("attention kind", "nexus.models")
MLP_KINDS: Registry[LayerKind] = Registry("MLP kind", "nexus.models")


def selected_kind(registry: Registry[LayerKind], cfg: ModelConfig) -> LayerKind | None:
    """The one registered kind the config selects, or None for the baseline."""
    chosen = [(name, kind) for name, kind in registry.items() if kind.selected(cfg)]
    if len(chosen) > 1:
        raise RuntimeError(f"{registry.what}s {', '.join(n for n, _ in chosen)} all claim this model config")
    return chosen[0][1] if chosen else None
