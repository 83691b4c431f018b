"""Pattention projection's options and parameter count (the module: models/pattention.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..config import ModelConfig, ProjectionOptions, option


@dataclass
class PattentionOptions(ProjectionOptions, kind="pattention"):
    """TokenFormer's Pattention: projections whose weights are learnable parameter tokens."""

    growth_pins: ClassVar[dict[str, str]] = {
        "frozen_n": "tau = sqrt(frozen_n) on the q/k/v/o Pattention (0 -> param_tokens); TokenFormer growth pins "
        "it with freeze_scale so the old scores keep their scale",
        "ffn_frozen_n": "the same for the FFN Pattention (0 -> its tokens)",
    }

    targets: list[Literal["q", "k", "v", "o", "ffn"]] = option(
        ["q", "k", "v"], "which projections are Pattention (q,k,v,o,ffn)"
    )
    param_tokens: int = option(0, "parameter tokens per q/k/v/o projection (0 -> d_model)")
    pattention_act: Literal["gelu_l2", "softmax"] = option(
        "gelu_l2", "gelu_l2: GELU(L2norm(scores)*sqrt(n)) ; softmax: the softmax variant"
    )
    freeze_scale: bool = option(True, "freeze sqrt(n) at its pre-growth value so growth is exact")
    ffn_param_tokens: int = option(
        0, "parameter tokens of the FFN (0 -> model.ffn); TokenFormer sizes it apart from q/k/v/o"
    )

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        for name in ("param_tokens", "ffn_param_tokens"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 0):
                errors.append(f"{p}.{name}={v!r} (valid: an integer >= 0 (0 = default))")

    @staticmethod
    def pin_of(target: str) -> str:
        """The growth pin that holds tau's n for the Pattention of `target`."""
        return "ffn_frozen_n" if target == "ffn" else "frozen_n"

    def tokens(self, target: str, model: ModelConfig) -> int:
        return (self.ffn_param_tokens or model.ffn) if target == "ffn" else (self.param_tokens or model.d_model)

    def params(self, model: ModelConfig, target: str, d_in: int, d_out: int, bias: bool) -> int:
        """n key tokens (n, d_in), n value tokens (n, d_out) and the bias."""
        n = self.tokens(target, model)
        return n * d_in + n * d_out + (d_out if bias else 0)
