"""Training compute of progressive width growth vs training the wide model from scratch.

SPARKLING eq. 29 (Kaplan's C ~ 6 N D with N the ACTIVE parameters):
    C*        = 6 (N_small D_e + N_large (D - D_e))      grow after D_e of D tokens
    C_scratch = 6 N_large D                              the wide model from scratch
    FLOPs saved = 1 - C* / C_scratch
`growth_compute` gives the same comparison from the measured forward FLOPs per token of both
shapes (nexus.analysis.flops, which also counts attention products and only routed experts).
"""

from __future__ import annotations

from ..config import ModelConfig


def flops_saved(n_small: float, n_large: float, d_e: float, d_total: float) -> dict:
    """Eq. 29 with active parameter counts and token counts. Returns C*, C_scratch, saved, speedup."""
    if not 0 <= d_e <= d_total or d_total <= 0 or n_small <= 0 or n_large <= 0:
        raise ValueError(f"need 0 <= d_e ({d_e}) <= d_total ({d_total}) and positive parameter counts")
    c_star = 6.0 * (n_small * d_e + n_large * (d_total - d_e))
    c_scratch = 6.0 * n_large * d_total
    return {"c_star": c_star, "c_scratch": c_scratch, "saved": 1.0 - c_star / c_scratch, "speedup": c_scratch / c_star}


def active_params(cfg: ModelConfig) -> int:
    """Parameters one token touches: all of them minus the experts it is not routed to (the tied
    embedding counted once, as in the paper's 450M active / 2.56B total for its testbed)."""
    from ..models.accounting import build_on_meta
    from ..models.moe import MoEMLP

    model = build_on_meta(cfg)
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for m in model.modules():
        if isinstance(m, MoEMLP):
            per_expert = sum(p.numel() for p in m.experts[0].parameters())
            idle += (m.n_experts - m.top_k) * per_expert
    return total - idle


def growth_compute(small: ModelConfig, large: ModelConfig, d_e: float, d_total: float, seq_len: int) -> dict:
    """Eq. 29 from active parameter counts and from measured FLOPs per token, side by side."""
    from .flops import train_flops_per_token

    n_small, n_large = active_params(small), active_params(large)
    by_params = flops_saved(n_small, n_large, d_e, d_total)
    f_small, f_large = train_flops_per_token(small, seq_len), train_flops_per_token(large, seq_len)
    measured = flops_saved(f_small / 6.0, f_large / 6.0, d_e, d_total)  # 6 N per token <-> FLOPs per token
    return {
        "active_params_small": n_small,
        "active_params_large": n_large,
        "saved_eq29": by_params["saved"],
        "c_star_eq29": by_params["c_star"],
        "c_scratch_eq29": by_params["c_scratch"],
        "train_flops_per_token_small": f_small,
        "train_flops_per_token_large": f_large,
        "saved_measured": measured["saved"],
        "c_star_measured": measured["c_star"],
        "c_scratch_measured": measured["c_scratch"],
    }
