"""Nexus-Rank projection's options and parameter count (the module and its forms: models/nexus_rank.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import ModelConfig, ProjectionOptions, option

Target = Literal["q", "k", "v", "o", "ffn"]


@dataclass
class NexusRankOptions(ProjectionOptions, kind="nexus_rank"):
    """Nexus-Rank projections (Nexusformer): D -> M -> A -> D_out with two nonlinear stages."""

    targets: list[Target] = option(["q", "k", "v"], "which projections are Nexus-Rank (q,k,v,o,ffn)")
    rank_m: int = option(0, "first hidden width M (0 -> 2*d_model)")
    rank_a: int = option(0, "second hidden width A (0 -> 4*d_model)")
    form: Literal["paper", "l2norm", "l2norm_width"] = option(
        "paper", "paper: sigma(sigma(XW_M)W_A)W_D ; l2norm: public code's per-stage h/(||h||+1e-5)*sqrt(D_out) ; "
        "l2norm_width: its earlier h/||h||*sqrt(width)")
    relax_order: bool = option(False, "allow M, A orders other than D < M < A (Table 9 ablation)")

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        for name in ("rank_m", "rank_a"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 0):
                errors.append(f"{p}.{name}={v!r} (valid: an integer >= 0 (0 = default))")
        d = model.d_model if isinstance(model.d_model, int) else 0
        m, a = self.resolved_m(d), self.resolved_a(d)
        if not self.relax_order and not d < m < a:
            errors.append(f"{p}.rank_m/rank_a={(m, a)!r} (valid: d_model ({d}) < rank_m < rank_a, or set "
                          f"{p}.relax_order=true)")

    def resolved_m(self, d_model: int) -> int:
        return self.rank_m or 2 * d_model

    def resolved_a(self, d_model: int) -> int:
        return self.rank_a or 4 * d_model

    def params(self, model: ModelConfig, target: str, d_in: int, d_out: int, bias: bool) -> int:
        """W_M (M, d_in), W_A (A, M), W_D (d_out, A) and W_D's bias."""
        m, a = self.resolved_m(model.d_model), self.resolved_a(model.d_model)
        return d_in * m + m * a + a * d_out + (d_out if bias else 0)
