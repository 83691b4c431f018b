"""The mixture-of-experts MLP kind's options and parameter count (the module: models/moe.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..config import MLPOptions, ModelConfig, option


@dataclass
class MoEOptions(MLPOptions, kind="moe"):
    """OLMoE-style token-choice mixture of experts in place of the dense MLP."""

    n_experts: int = option(8, "number of SwiGLU experts")
    top_k: int = option(2, "experts each token is routed to")
    expert_hidden: int = option(
        0, "inner size of each expert (0 -> model.ffn_hidden // top_k: the dense model's active FFN size)"
    )
    lb_loss_coef: float = option(0.01, "load-balancing loss weight (Switch/OLMoE form)")
    router_z_coef: float = option(0.001, "router z-loss weight (ST-MoE)")
    # width growth grows the experts' inner size, not a dense FFN's (there is none)
    width_axis_reasons: ClassVar[dict[str, str]] = {"expert_inner": "new MoE expert inner size (0 = unchanged)"}

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        n = self.n_experts
        n_ok = isinstance(n, int) and not isinstance(n, bool) and n >= 1
        if not n_ok:
            errors.append(f"{p}.n_experts={n!r} (valid: an integer >= 1; {p}.kind=dense for no experts)")
        if n_ok and not (isinstance(self.top_k, int) and 1 <= self.top_k <= n):
            errors.append(f"{p}.top_k={self.top_k!r} (valid: 1..n_experts ({n}))")
        if not (isinstance(self.expert_hidden, int) and self.expert_hidden >= 0):
            errors.append(f"{p}.expert_hidden={self.expert_hidden!r} (valid: an integer >= 0 (0 = default))")
        for name in ("lb_loss_coef", "router_z_coef"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                errors.append(f"{p}.{name}={v!r} (valid: a finite number >= 0)")

    def params(self, model: ModelConfig, base: int) -> int:
        """The router (E, d) and E SwiGLU experts (gate, up, down: 3 * d * expert_hidden each)."""
        return model.d_model * self.n_experts + self.n_experts * 3 * model.d_model * expert_hidden(model)

    def width_axes(self, model: ModelConfig) -> dict[str, int]:
        """Width growth grows the experts' inner size, not the dense FFN's (there is none)."""
        return {"expert_inner": expert_hidden(model)}

    def set_width_axes(self, model: ModelConfig, sizes: dict[str, int]) -> None:
        self.expert_hidden = sizes["expert_inner"]


def expert_hidden(cfg: ModelConfig) -> int:
    """Inner size of one expert (mlp.expert_hidden, default ffn // top_k so active FFN size matches dense)."""
    return cfg.mlp.expert_hidden or max(cfg.ffn // cfg.mlp.top_k, 1)
