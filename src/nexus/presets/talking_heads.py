"""Talking-heads attention presets (Shazeer et al. 2020; models/talking_heads.py), beside the baseline
they differ from in `model.attention` alone."""

from __future__ import annotations

from ..config import AttentionOptions, RunConfig
from . import register
from .baseline import baseline_micro, baseline_tiny


def talking_heads(cfg: RunConfig, name: str) -> RunConfig:
    cfg.model.attention = AttentionOptions.make("talking_heads", **cfg.model.attention.common())
    cfg.train.out_dir = f"runs/{name}"
    return cfg


@register(
    "talking-heads-tiny", "Transformer++ 4x128 with talking-heads attention (logits and weights mixed across heads)"
)
def talking_heads_tiny() -> RunConfig:
    return talking_heads(baseline_tiny(), "talking-heads-tiny")


@register("talking-heads-micro", "Transformer++ 2x64 with talking-heads attention: seconds-scale tests")
def talking_heads_micro() -> RunConfig:
    return talking_heads(baseline_micro(), "talking-heads-micro")
