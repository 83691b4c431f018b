"""Higher-order attention's options and parameter count (the module and its equations:
models/higher_order.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import AttentionOptions, ModelConfig, option


@dataclass
class HigherOrderOptions(AttentionOptions, kind="higher_order"):
    """Nexus higher-order attention: q/k (optionally v) refined by inner attention of order m - 1."""

    order: int = option(2, "higher-order attention order m (2 = one inner level)")
    ho_targets: Literal["q", "qk", "qkv"] = option("qk", "which of Q/K/V the inner attention refines")
    ho_form: Literal["projected", "self"] = option(
        "projected", "projected: eq.12 inner attention with the layer's W_q/W_k/W_v ; self: eq.7-8 softmax(QQ^T)Q"
    )
    ho_shared: bool = option(True, "share inner weights with the outer projections (parameters do not grow)")
    ho_gate: bool = option(False, "zero-initialized gate on the refinement: lossless retrofit")

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        if not (isinstance(self.order, int) and not isinstance(self.order, bool) and self.order >= 2):
            errors.append(f"{p}.order={self.order!r} (valid: an integer >= 2; order 1 is {p}.kind=standard)")
        if not self.ho_shared and self.ho_form == "self":
            errors.append(
                f"{p}.ho_shared={self.ho_shared!r} (valid: true when ho_form=self (eq. 7-8 has no inner "
                "weights to keep separate))"
            )

    def params(self, model: ModelConfig, base: int) -> int:
        """The layer's own attention (`base`), one separate inner attention per refined target (projected,
        unshared) and one zero gate per refined target's heads."""
        n = base + (len(self.ho_targets) * base if self.ho_form == "projected" and not self.ho_shared else 0)
        if self.ho_gate:
            heads = {"q": model.n_heads, "k": model.kv_heads, "v": model.kv_heads}
            n += sum(heads[t] for t in self.ho_targets)
        return n
