"""Talking-heads attention's options and parameter count (the module: models/talking_heads.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import AttentionOptions, ModelConfig, option


@dataclass
class TalkingHeadsOptions(AttentionOptions, kind="talking_heads"):
    """Talking-heads attention: learned mixing of the heads' logits and weights."""

    mix_logits: bool = option(
        True, "mix the heads' logits before the softmax with P_l (the paper's pre-softmax projection)"
    )
    mix_weights: bool = option(
        True, "mix the heads' weights after the softmax with P_w (the paper's post-softmax projection)"
    )

    def params(self, model: ModelConfig, base: int) -> int:
        """Standard attention (`base`) plus one h x h matrix per mixing."""
        return base + (self.mix_logits + self.mix_weights) * model.n_heads * model.n_heads
