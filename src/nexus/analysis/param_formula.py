"""`nexus analyze params`: the parameter counts of a model (the arithmetic lives in kind_options/param_formula.py,
below the models, so the builder's size check can use it; `count` and `sizes` are re-exported for callers here)."""

from __future__ import annotations

from ..kind_options.param_formula import count, sizes  # noqa: F401  (re-exported)
from . import register_analysis


@register_analysis("params", "parameter counts (no weights allocated)")
def params_kind(src, out_dir, args) -> dict:
    from ..models.accounting import param_count_for_config

    return param_count_for_config(src.cfg.model)
