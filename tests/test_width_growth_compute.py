"""Compute accounting (SPARKLING eq. 29): active parameters and FLOPs saved reproduce Table 2."""

import copy

import pytest

from nexus.analysis.compute import active_params, flops_saved, growth_compute
from nexus.presets import get_preset


def test_eq29_arithmetic():
    r = flops_saved(n_small=1.0, n_large=2.0, d_e=50, d_total=100)
    assert r["c_star"] == 6 * (50 + 2 * 50) and r["c_scratch"] == 6 * 2 * 100
    assert r["saved"] == pytest.approx(0.25) and r["speedup"] == pytest.approx(4 / 3)
    assert flops_saved(1.0, 2.0, 0, 100)["saved"] == 0  # growing at the start saves nothing
    with pytest.raises(ValueError):
        flops_saved(1.0, 2.0, 150, 100)


def test_active_params_count_routed_experts_only():
    cfg = get_preset("sparkling-moe-tiny").model  # 8 experts, top-2, 4 layers
    from nexus.models.accounting import param_count_for_config

    total = param_count_for_config(cfg)["total"]
    per_expert = 3 * cfg.d_model * cfg.mlp.expert_hidden
    assert active_params(cfg) == total - cfg.n_layers * (8 - 2) * per_expert
    dense = get_preset("sparkling-dense-tiny").model
    assert active_params(dense) == param_count_for_config(dense)["total"]


@pytest.mark.slow  # builds four 2.5B-parameter testbed models on the meta device (~1 min on a busy CPU)
@pytest.mark.parametrize(
    "change,active_m,saved",
    [
        ({"expert_hidden": 1024}, 751, 0.20),  # Inner 2x
        ({"d_model": 2048}, 900, 0.25),  # Hidden 2x
        ({"d_model": 2048, "expert_hidden": 1024}, 1500, 0.35),  # joint
    ],
)
def test_paper_testbed_table2(change, active_m, saved):
    small = get_preset("sparkling-olmoe-testbed").model
    large = copy.deepcopy(small)
    for k, v in change.items():
        setattr(large.mlp if k == "expert_hidden" else large, k, v)
    assert active_params(small) / 1e6 == pytest.approx(450, rel=0.01)  # Table 2: 450M active
    r = growth_compute(small, large, d_e=100e9, d_total=200e9, seq_len=4096)
    assert r["active_params_large"] / 1e6 == pytest.approx(active_m, rel=0.01)
    assert r["saved_eq29"] == pytest.approx(saved, abs=0.005)
    # measured FLOPs include attention products (unchanged by width), so they save a bit less
    assert 0 < r["saved_measured"] < r["saved_eq29"]


def test_eq29_accepts_its_whole_domain_and_refuses_the_rest():
    """0 <= D_e <= D with D > 0 and positive parameter counts, fractions included (counts in millions)."""
    assert flops_saved(1.0, 2.0, 100, 100)["saved"] == pytest.approx(0.5)  # grown at the very end: 1 - N_s/N_l
    assert flops_saved(0.25, 0.5, 0.5, 0.75)["saved"] == pytest.approx(1 - (0.25 * 0.5 + 0.5 * 0.25) / (0.5 * 0.75))
    for bad in [
        (1.0, 2.0, -1, 100),
        (1.0, 2.0, 0, 0),
        (0.0, 2.0, 10, 100),
        (1.0, 0.0, 10, 100),
        (-1.0, 2.0, 10, 100),
        (1.0, -2.0, 10, 100),
    ]:
        with pytest.raises(ValueError):
            flops_saved(*bad)


def test_growth_compute_combines_active_params_and_measured_flops_by_eq29():
    """Both readings of eq. 29 on a dense FFN-2x pair, each recomputed from the counts it reports."""
    from nexus.analysis.flops import train_flops_per_token

    small = get_preset("sparkling-dense-tiny").model
    large = copy.deepcopy(small)
    large.ffn_hidden = 2 * small.ffn
    r = growth_compute(small, large, d_e=300.0, d_total=1000.0, seq_len=64)
    ns, nl = active_params(small), active_params(large)
    assert (r["active_params_small"], r["active_params_large"]) == (ns, nl) and ns < nl
    assert r["c_star_eq29"] == 6 * (ns * 300 + nl * 700) and r["c_scratch_eq29"] == 6 * nl * 1000
    assert r["saved_eq29"] == pytest.approx(1 - (ns * 300 + nl * 700) / (nl * 1000), rel=1e-12)
    fs, fl = train_flops_per_token(small, 64), train_flops_per_token(large, 64)
    assert (r["train_flops_per_token_small"], r["train_flops_per_token_large"]) == (fs, fl)
    assert r["c_star_measured"] == pytest.approx(fs * 300 + fl * 700, rel=1e-12)
    assert r["c_scratch_measured"] == pytest.approx(fl * 1000, rel=1e-12)
    assert r["saved_measured"] == pytest.approx(1 - (fs * 300 + fl * 700) / (fl * 1000), rel=1e-12)
