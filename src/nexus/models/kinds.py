"""Registries of layer kinds: which attention and which MLP a transformer layer is built with.

An attention kind is two files. `nexus/kind_options/<kind>.py` holds what needs no torch: its options (a
subclass of `config.AttentionOptions` registered under its name, `class XOptions(AttentionOptions,
kind="x")`) and its parameter count, `XOptions.params(model_cfg, base)`: one layer's parameters given
`base`, the count of standard attention with the same projections (analysis/param_formula.py adds the
model up without building it, or importing torch). `nexus/models/<kind>.py` holds its module and its
registration line,

    ATTENTION_KINDS.register("higher_order")(LayerKind(build))

where `build(cfg, **common)` makes the module (`common`: the plain arguments every kind takes, see
models/transformer.py). `model.attention.kind` selects the kind; `standard` is models/attention.py's
Attention. MLP kinds are selected by their `selected(cfg)` predicate and count themselves with
`params(cfg, base)`; a layer with none gets SwiGLU. Width growth reads the roles the built modules declare
(models/width_roles.py). The modules of nexus.models are imported on the first lookup, so a new kind
needs no central list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.nn as nn

from ..config import ModelConfig
from ..plugins import Registry


@dataclass(frozen=True)
class LayerKind:
    build: Callable[..., nn.Module]  # build(cfg, **common) -> the module
    # MLP kinds only (an attention kind counts itself in its options: cfg.attention.params):
    params: Callable[[ModelConfig, int], int] | None = None  # (cfg, the baseline layer's count) -> one layer's count
    selected: Callable[[ModelConfig], bool] | None = None  # does this config's layer use the kind?


ATTENTION_KINDS: Registry[LayerKind] = Registry("model.attention.kind", "nexus.models")
MLP_KINDS: Registry[LayerKind] = Registry("MLP kind", "nexus.models")


def attention_kind(cfg: ModelConfig) -> LayerKind | None:
    """The registered kind `model.attention.kind` names, or None for standard attention."""
    return None if cfg.attention.kind == "standard" else ATTENTION_KINDS.get(cfg.attention.kind)


def selected_kind(registry: Registry[LayerKind], cfg: ModelConfig) -> LayerKind | None:
    """The one registered kind the config selects, or None for the baseline."""
    chosen = [(name, kind) for name, kind in registry.items() if kind.selected(cfg)]
    if len(chosen) > 1:
        raise RuntimeError(f"{registry.what}s {', '.join(n for n, _ in chosen)} all claim this model config")
    return chosen[0][1] if chosen else None
