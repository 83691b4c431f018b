"""Nexusformer paper, Table 8 (forward FLOPs per token at 4,096 context, measured with CalFlops):
which counting convention reproduces the printed numbers. Expected values are the paper's own
(Table 8, and the nominal sizes of Tables 6-7); see docs/nexusformer.md for the arithmetic."""

from __future__ import annotations

import pytest

from nexus.analysis.flops import calflops_without_attention_core, forward_flops_per_token
from nexus.models.accounting import param_count_for_config
from nexus.presets import get_preset

TABLE8 = {
    "240m": (4.256e8, 4.223e8),
    "300m": (5.648e8, 6.036e8),
    "380m": (7.171e8, 7.570e8),
    "440m": (8.390e8, 8.704e8),
}  # size -> (Nexusformer, Qwen3) FLOPs per token as printed
NOMINAL = {"240m": 240e6, "300m": 300e6, "380m": 380e6, "440m": 440e6}  # the sizes the paper names


@pytest.mark.parametrize("size", list(TABLE8))
def test_qwen3_rows_are_calflops_without_the_attention_core(size):
    """CalFlops' conventions (matmuls 2 MACs, norms/activations counted, LM head counted, embedding
    lookup free) minus QK^T/softmax/AV, which a fused attention kernel hides from its hooks,
    reproduce the Qwen3 rows within 8%; counting the attention core at 4,096 tokens overshoots by
    39-69%."""
    cfg = get_preset(f"qwen3-{size}").validate().model
    paper = TABLE8[size][1]
    assert abs(calflops_without_attention_core(cfg, 4096) / paper - 1) < 0.08
    assert forward_flops_per_token(cfg, 4096) / paper - 1 > 0.35


@pytest.mark.parametrize("size", list(TABLE8))
def test_nexusformer_gap_tracks_the_parameter_gap(size):
    """The same convention leaves the Nexusformer rows 19-31% low, and our Nexusformer presets
    (Table 6/7 shapes, Nexus-Rank on Q/K/V) are 16-28% below the sizes the paper names: per row the
    FLOPs shortfall is the parameter shortfall to within 5 points. The difference is in the models,
    not in how FLOPs are counted."""
    cfg = get_preset(f"nexusformer-{size}").validate().model
    flops_ratio = calflops_without_attention_core(cfg, 4096) / TABLE8[size][0]
    params_ratio = param_count_for_config(cfg)["total"] / NOMINAL[size]
    assert 0.65 < flops_ratio < 0.85
    assert abs(flops_ratio - params_ratio) < 0.05
