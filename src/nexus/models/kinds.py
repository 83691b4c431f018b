"""Registries of layer kinds: which attention and which MLP a transformer layer is built with.

An attention kind is two files. `nexus/kind_options/<kind>.py` holds what needs no torch: its options (a
subclass of `config.AttentionOptions` registered under its name, `class XOptions(AttentionOptions,
kind="x")`) and its parameter count, `XOptions.params(model_cfg, base)`: one layer's parameters given
`base`, the count of standard attention with the same projections (kind_options/param_formula.py adds the
model up without building it, or importing torch). `nexus/models/<kind>.py` holds its module and its
registration line,

    ATTENTION_KINDS.register("higher_order")(LayerKind(build))

where `build(cfg, **common)` makes the module (`common`: the plain arguments every kind takes, see
models/transformer.py). `model.attention.kind` selects the kind; `standard` is models/attention.py's
Attention. An MLP kind works the same way (`class XOptions(MLPOptions, kind="x")` with its `params` in
kind_options/, `MLP_KINDS.register("x")(LayerKind(build))` beside its module, models/moe.py);
`model.mlp.kind` selects it, `dense` (SwiGLU, or the projection kind's FFN) is the baseline. An
architecture other than the transformer likewise declares `class XOptions(ArchitectureOptions, kind="x")`
with its whole model's `params` (kind_options/recurrent.py), selected by `model.arch`, and registers its
builder: `ARCHITECTURES.register("x")(Architecture(build))` (models/recurrent.py). Width growth reads the
roles the built modules declare (models/width_roles.py). The modules of nexus.models are imported on the
first lookup, so a new kind needs no central list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn as nn

from ..config import ModelConfig
from ..plugins import Registry


@dataclass(frozen=True)
class LayerKind:
    build: Callable[..., nn.Module]  # build(cfg, **common) -> the module


@dataclass(frozen=True)
class Architecture:
    build: Callable[[ModelConfig], nn.Module]  # the whole model from its config (its count: model.arch.params)


ATTENTION_KINDS: Registry[LayerKind] = Registry("model.attention.kind", "nexus.models")
MLP_KINDS: Registry[LayerKind] = Registry("model.mlp.kind", "nexus.models")
# architectures other than the baseline transformer (models/transformer.py)
ARCHITECTURES: Registry[Architecture] = Registry("model.arch.kind", "nexus.models")


def architecture(cfg: ModelConfig) -> Architecture | None:
    """The registered architecture `model.arch.kind` names, or None for the baseline transformer."""
    return None if cfg.arch.kind == "transformer" else ARCHITECTURES.get(cfg.arch.kind)


def attention_kind(cfg: ModelConfig) -> LayerKind | None:
    """The registered kind `model.attention.kind` names, or None for standard attention."""
    return None if cfg.attention.kind == "standard" else ATTENTION_KINDS.get(cfg.attention.kind)


def mlp_kind(cfg: ModelConfig) -> LayerKind | None:
    """The registered kind `model.mlp.kind` names, or None for the dense baseline."""
    return None if cfg.mlp.kind == "dense" else MLP_KINDS.get(cfg.mlp.kind)
