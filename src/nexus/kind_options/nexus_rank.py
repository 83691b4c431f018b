"""Nexus-Rank projection's options and parameter count (the module and its forms: models/nexus_rank.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..config import ModelConfig, ProjectionOptions, option
from ..errors import ConfigError

Target = Literal["q", "k", "v", "o", "ffn"]


@dataclass
class NexusRankOptions(ProjectionOptions, kind="nexus_rank"):
    """Nexus-Rank projections (Nexusformer): D -> M -> A -> D_out with two nonlinear stages."""

    growth_pins: ClassVar[dict[str, str]] = {
        "frozen_m": "l2norm_width form: the width whose sqrt scales the M stage (0 -> rank_m); Nexus-Rank growth "
        "pins it so the old units keep their scale",
        "frozen_a": "l2norm_width form: the width whose sqrt scales the A stage (0 -> rank_a)",
    }

    targets: list[Target] = option(["q", "k", "v"], "which projections are Nexus-Rank (q,k,v,o,ffn)")
    rank_m: int = option(0, "first hidden width M (0 -> 2*d_model)")
    rank_a: int = option(0, "second hidden width A (0 -> 4*d_model)")
    form: Literal["paper", "l2norm", "l2norm_width"] = option(
        "paper",
        "paper: sigma(sigma(XW_M)W_A)W_D ; l2norm: public code's per-stage h/(||h||+1e-5)*sqrt(D_out) ; "
        "l2norm_width: its earlier h/||h||*sqrt(width)",
    )
    relax_order: bool = option(False, "allow M, A orders other than D < M < A (Table 9 ablation)")

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        for name in ("rank_m", "rank_a"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 0):
                errors.append(f"{p}.{name}={v!r} (valid: an integer >= 0 (0 = default))")
        d = model.d_model if isinstance(model.d_model, int) else 0
        m, a = self.resolved_m(d), self.resolved_a(d)
        if not self.relax_order and not d < m < a:
            errors.append(
                f"{p}.rank_m/rank_a={(m, a)!r} (valid: d_model ({d}) < rank_m < rank_a, or set {p}.relax_order=true)"
            )

    def check_width_growth(self, model: ModelConfig, targets: dict[str, int]) -> None:
        """Hidden-size (D) growth of a Nexus-Rank model: what cannot stay exact or valid is refused."""
        ffn, hidden = targets.get("ffn"), targets.get("hidden")
        if ffn and self.uses("ffn"):
            raise ConfigError(f"width.ffn={ffn} on a Nexus-Rank FFN (valid: grow its M and A with --delta-m/--delta-a)")
        if hidden and self.form == "l2norm" and (self.uses("o") or self.uses("ffn")):
            raise ConfigError(
                f"width.hidden={hidden} with model.projection.form='l2norm' on the o/ffn projections: "
                "their sqrt(D_out) factor would follow D and change every output (valid: form paper or "
                "l2norm_width, or Nexus-Rank on q/k/v only)"
            )
        m_width = self.resolved_m(model.d_model)
        if hidden and not self.relax_order and hidden >= m_width:
            raise ConfigError(
                f"width.hidden={hidden} with Nexus-Rank M={m_width}: the order D < M < A would break "
                "(valid: grow M and A first with --delta-m/--delta-a, as Table 7's 240M -> 440M path has "
                "M 780 -> 1540, A 960 -> 1730 with D 768 -> 1024; or set model.projection.relax_order=true)"
            )

    def pin_sizes(self, model: ModelConfig) -> None:
        """M and A stay through a hidden growth: their defaults (2d, 4d) would follow D otherwise."""
        self.rank_m, self.rank_a = self.resolved_m(model.d_model), self.resolved_a(model.d_model)

    def resolved_m(self, d_model: int) -> int:
        return self.rank_m or 2 * d_model

    def resolved_a(self, d_model: int) -> int:
        return self.rank_a or 4 * d_model

    def params(self, model: ModelConfig, target: str, d_in: int, d_out: int, bias: bool) -> int:
        """W_M (M, d_in), W_A (A, M), W_D (d_out, A) and W_D's bias."""
        m, a = self.resolved_m(model.d_model), self.resolved_a(model.d_model)
        return d_in * m + m * a + a * d_out + (d_out if bias else 0)
