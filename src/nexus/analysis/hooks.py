"""Analysis-side interventions and recorders, attached to a model from outside for one block of code.

The model has no analysis switches: these context managers register forward (pre-)hooks on its
modules and remove them on exit, so the model computes exactly what it computes in training
outside the block.

  * `forward_hooks`: read tensors at hook points (e.g. `attn.hook_qk`, `attn.hook_gate`).
  * `anchor_removed`: evaluate with the anchor term zeroed in every mixed layer (ExoFormer's
    anchor-removal probe).
  * `direct_anchor_projection`: project every token's anchor instead of gathering rows of a
    per-vocabulary table (benchmarks and tests compare the two paths).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch.nn as nn

from ..models.mixing import AnchorMixer


@contextlib.contextmanager
def forward_hooks(pairs: Iterable[tuple[nn.Module, Callable]]):
    """Register `fn(module, inputs, output)` as a forward hook on each (module, fn) for the block."""
    handles = [m.register_forward_hook(fn) for m, fn in pairs]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def forward_pre_hooks(pairs: Iterable[tuple[nn.Module, Callable]]):
    """Register `fn(module, args, kwargs) -> (args, kwargs) | None` on each (module, fn) for the block."""
    handles = [m.register_forward_pre_hook(fn, with_kwargs=True) for m, fn in pairs]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _without_anchor(module, args, kwargs):
    # AnchorMixer.forward(parts, x, anchors): anchors None drops the anchor term
    if len(args) >= 3:
        return (*args[:2], None, *args[3:]), kwargs
    return args, {**kwargs, "anchors": None}


def anchor_removed(model: nn.Module):
    """Context manager: evaluate `model` with the anchor term zeroed in every mixed layer."""
    return forward_pre_hooks((m, _without_anchor) for m in model.modules() if isinstance(m, AnchorMixer))


def _no_token_ids(module, args, kwargs):
    return args, {**kwargs, "input_ids": None}


def direct_anchor_projection(model: nn.Module):
    """Context manager: the exogenous anchor projects every token (no per-vocabulary table gather)."""
    anchor = getattr(model, "anchor", None)
    return forward_pre_hooks([(anchor, _no_token_ids)] if anchor is not None else [])
