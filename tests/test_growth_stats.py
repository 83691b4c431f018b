"""Growth-dynamics statistics from plain numbers: the paper's Table 4 R column from its U_P and NOC
columns, appendix D's Fisher's g and p, and each statistic against an independent check."""

import math

import numpy as np
import pytest
from scipy import stats

from nexus.analysis import growth_stats as gs

# Nexusformer Table 4 (240M -> 380M, snapshots every 3B tokens)
TABLE4 = {
    "zero": {
        "up": [0.8152, 0.8608, 0.7707, 0.8794, 0.8769, 0.9374, 0.9903, 0.8490, 0.8697, 0.5923, 0.7171],
        "noc": [0.7752, 0.7888, 0.7747, 0.7663, 0.7614, 0.7585, 0.7567, 0.7559, 0.7550, 0.7595, 0.7645],
        "R": [
            0,
            0.058623857,
            0.054591642,
            0.079586138,
            0.0777523,
            0.151441944,
            0.216115606,
            0.04836286,
            0.071753518,
            0.274178867,
            0.12112758,
        ],
    },
    "noise10": {
        "up": [0.7168, 0.9653, 0.3055, 0.0455, 0.0404, 0.0035, 0.0076, 0.0071, 0.0462, 0.0469, 0.0374],
        "noc": [0.7947, 0.9150, 0.9193, 0.9106, 0.8973, 0.8870, 0.8796, 0.8783, 0.8751, 0.8843, 0.8955],
        "R": [
            0,
            0.37828834,
            0.594835608,
            0.947811059,
            0.952429315,
            1.001872123,
            0.995148381,
            0.995667735,
            0.941001262,
            0.941346665,
            0.956273056,
        ],
    },
    "noise20": {
        "up": [0.7702, 0.7103, 0.2047, 0.0039, 0.0145, 0.0147, 0.0424, 0.0259, 0.0462, 0.0029, 0.0128],
        "noc": [0.8135, 0.9174, 0.9224, 0.9106, 0.8955, 0.8854, 0.8770, 0.8724, 0.8679, 0.8788, 0.8922],
        "R": [
            0,
            0.149535328,
            0.746328532,
            1.002070555,
            0.986337829,
            0.98488782,
            0.948167874,
            0.969080895,
            0.942391158,
            0.99946336,
            0.988128119,
        ],
    },
}


@pytest.mark.parametrize("setting", list(TABLE4))
def test_table4_radius_column_is_reproduced(setting):
    row = TABLE4[setting]
    np.testing.assert_allclose(gs.radius(row["up"], row["noc"]), row["R"], atol=1e-8)


def test_appendix_d_fisher_g_and_exact_p():
    out = gs.fisher_g(TABLE4["zero"]["R"])  # linearly detrended, 11 samples -> m = 5 frequencies
    assert out["m"] == 5
    assert out["g"] == pytest.approx(0.4876, abs=5e-5)
    assert out["p"] == pytest.approx(0.3448, abs=5e-4)


def test_fisher_exact_p_matches_white_noise_simulation():
    rng = np.random.default_rng(0)
    n, m = 11, 5
    y = rng.standard_normal((40000, n))
    spec = np.abs(np.fft.rfft(y, axis=1))[:, 1 : m + 1] ** 2
    g_sim = spec.max(axis=1) / spec.sum(axis=1)
    for g0 in (0.35, 0.4876, 0.6):
        assert gs.fisher_g_pvalue(g0, m) == pytest.approx((g_sim > g0).mean(), abs=0.01)


def test_noc_against_the_closed_form_for_two_normals():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 8000), rng.normal(3, 1, 8000)
    assert gs.noc(a, b) == pytest.approx(2 * stats.norm.cdf(-1.5), abs=0.03)  # OVL of N(0,1), N(3,1)
    assert gs.noc(a, rng.normal(0, 1, 8000)) > 0.95


def test_mann_whitney_detects_a_location_shift_only():
    rng = np.random.default_rng(2)
    null = [gs.mann_whitney_p(rng.normal(0, 1, 200), rng.normal(0, 2, 200)) for _ in range(300)]
    assert 0.02 < np.mean(np.array(null) < 0.05) < 0.09  # same location, other scale: p ~ uniform
    a = rng.normal(0, 1, 3000)
    assert gs.mann_whitney_p(a, rng.normal(0.3, 1, 3000)) < 1e-6


def test_u_p_uses_every_entry():
    """U_P of a matrix larger than the old 20,000-entry sample is scipy's test on all entries, so a shift too
    small for a sample is detected (planted effect) and equal distributions are not flagged (planted null)."""
    rng = np.random.default_rng(11)
    a, b = rng.normal(0, 1, 200_000), rng.normal(0.02, 1, 200_000)
    full = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert gs.mann_whitney_p(a, b) == pytest.approx(full, rel=1e-12) and full < 1e-6
    assert stats.mannwhitneyu(a[:20_000], b[:20_000]).pvalue > 1e-3  # a 20,000-entry sample misses it
    assert gs.mann_whitney_p(a, rng.normal(0, 1, 200_000)) > 0.05


def test_u_p_new_vs_original_reading_beside_whole():
    """The new entries alone against the original matrix: a shift of the new entries, diluted in the whole
    grown matrix, is detected (planted effect); new entries drawn like the original are not (planted null)."""
    rng = np.random.default_rng(12)
    base = rng.normal(0, 1, (64, 64))
    shapes = {"m.weight": [64, 64]}
    for shift, detected in ((0.25, True), (0.0, False)):
        w = rng.normal(shift, 1, (66, 64))
        w[:64, :64] = base
        out = gs.snapshot_stats({"m.weight": w}, shapes)
        new = w[64:].ravel()
        assert out["u_p_new_vs_original"] == pytest.approx(stats.mannwhitneyu(base.ravel(), new).pvalue, rel=1e-12)
        assert (out["u_p_new_vs_original"] < 0.01) is detected
        if detected:
            assert out["u_p"] > 0.05  # the whole-matrix reading dilutes the 128 shifted entries among 4,096


def test_harmonic_regression_recovers_a_planted_cycle():
    t = np.arange(0, 31, 3.0)
    rng = np.random.default_rng(3)
    y = 0.1 + 0.05 * np.cos(2 * np.pi * t / 11.0 + 0.7) + rng.normal(0, 0.005, t.size)
    out = gs.harmonic_regression(t, y)
    assert out["period"] == pytest.approx(11.0, rel=0.08)
    assert out["r2"] > 0.9 and out["p"] < 0.01 and out["A1"] == pytest.approx(0.05, rel=0.2)
    flat = gs.harmonic_regression(t, rng.normal(0, 1, t.size))
    assert flat["r2"] < out["r2"]


def test_scaling_fit_recovers_planted_law():
    rng = np.random.default_rng(4)
    r = rng.uniform(0.05, 1.0, 30)
    ppl = np.exp(-0.0991 * np.abs(np.log(r)) + 2.4804 + rng.normal(0, 0.001, 30))
    fit = gs.scaling_fit(np.r_[0.0, r], np.r_[10.0, ppl])  # R = 0 (the growth snapshot) is skipped
    assert (
        fit["n"] == 30
        and fit["w"] == pytest.approx(-0.0991, abs=0.005)
        and fit["b"] == pytest.approx(2.4804, abs=0.005)
    )


def test_pca_matches_covariance_eigendecomposition():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(11, 3)) @ np.array([[2.0, 0.3, 0.1], [0.0, 1.0, 0.4], [0.0, 0.0, 0.2]])
    out = gs.pca(X, standardize=False)
    evals, evecs = np.linalg.eigh(np.cov(X.T))
    np.testing.assert_allclose(out["explained_ratio"], evals[::-1] / evals.sum(), atol=1e-10)
    for i in range(3):
        assert abs(abs(out["components"][i] @ evecs[:, ::-1][:, i]) - 1) < 1e-8
    np.testing.assert_allclose(out["z"], (X - X.mean(0)) @ out["components"][:2].T)


def test_default_pca_is_the_correlation_matrix_eigendecomposition():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(15, 3)) * np.array([100.0, 1.0, 0.01]) + rng.normal(size=(15, 1))
    out = gs.pca(X)
    evals, evecs = np.linalg.eigh(np.corrcoef(X.T))
    np.testing.assert_allclose(out["explained_ratio"], evals[::-1] / evals.sum(), atol=1e-10)
    for i in range(3):
        assert abs(abs(out["components"][i] @ evecs[:, ::-1][:, i]) - 1) < 1e-8
    np.testing.assert_allclose(gs.project(out, X), out["z"], atol=1e-12)


# Nexusformer Table 3: (U_P, NOC, Avg) per snapshot 0B..60B of the three growth paths from 240M
TABLE3 = {
    "240-300M": (
        [0.8919, 0.7471, 0.4555, 0.6181, 0.5530, 0.5049, 0.9516],
        [0.8674, 0.8372, 0.8277, 0.8294, 0.8343, 0.8394, 0.8425],
        [42.638, 43.008, 43.684, 43.814, 43.284, 44.126, 45.162],
    ),
    "240-380M": (
        [0.8152, 0.9536, 0.8788, 0.8402, 0.6461, 0.8717, 0.6347],
        [0.7752, 0.7825, 0.7783, 0.7834, 0.7676, 0.7807, 0.7722],
        [42.638, 44.842, 45.654, 46.348, 44.130, 46.164, 44.518],
    ),
    "240-440M": (
        [0.7683, 0.9762, 0.8834, 0.6615, 0.5976, 0.9219, 0.8422],
        [0.7194, 0.7255, 0.7207, 0.7307, 0.7235, 0.7257, 0.7270],
        [42.638, 42.314, 43.620, 45.876, 44.088, 43.974, 44.532],
    ),
}


def test_table5_loadings_and_variance_from_table3_rows():
    """Appendix C: PC1 + PC2 explain 92.49%; Table 5 loadings PC1 (0.604, 0.669, 0.433), PC2
    (-0.493, -0.113, 0.863) for (U_P%, NOC%, Performance%), computed from Table 3 alone."""
    runs = [gs.state_rows(*TABLE3[k]) for k in TABLE3]
    out = gs.pooled_pca(runs)
    assert out["explained_ratio"][:2].sum() == pytest.approx(0.9249, abs=5e-5)
    np.testing.assert_allclose(out["components"][0], [0.604, 0.669, 0.433], atol=5e-4)
    np.testing.assert_allclose(out["components"][1], [-0.493, -0.113, 0.863], atol=5e-4)
    assert [z.shape for z in out["z_runs"]] == [(7, 2)] * 3
    # the covariance reading (the old default) does not reproduce the table: PC1 is U_P% alone
    cov = gs.pooled_pca(runs, standardize=False)
    assert cov["explained_ratio"][:2].sum() > 0.99 and cov["components"][0][0] > 0.99


def test_trajectory_uses_standardized_pca_by_default():
    up, noc_values, perf = TABLE3["240-380M"]
    out = gs.trajectory(up, noc_values, perf)
    want = gs.pooled_pca([gs.state_rows(up, noc_values, perf)])
    assert out["pca"]["standardized"] is True
    np.testing.assert_allclose(out["pca"]["components"], want["components"])
    np.testing.assert_allclose(out["pca"]["z"], want["z_runs"][0])
    assert gs.trajectory(up, noc_values, perf, standardize=False)["pca"]["standardized"] is False


def test_grassmann_distance_from_principal_angles():
    z = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    out = gs.grassmann_distances(z)
    np.testing.assert_allclose(out["grassmann"], [0, 0, math.pi / 2, math.pi / 4], atol=1e-10)
    np.testing.assert_allclose(out["euclidean"], [0, 1, math.sqrt(2), 1], atol=1e-12)


def test_snapshot_stats_split_old_and_new_weights():
    rng = np.random.default_rng(6)
    w = rng.normal(0, 1, (40, 30))
    w[32:, :] = rng.normal(2.0, 1, (8, 30))  # new rows shifted: low overlap, tiny U_P
    w[:32, 24:] = rng.normal(2.0, 1, (32, 6))
    out = gs.snapshot_stats({"m.weight": w}, {"m.weight": [32, 24]}, reading="corner")
    assert out["per_matrix"]["m.weight"]["u_p"] < 1e-10 and out["noc"] < 0.5
    same = rng.normal(0, 1, (40, 30))
    assert gs.snapshot_stats({"m.weight": same}, {"m.weight": [32, 24]}, reading="corner")["noc"] > 0.85


def test_trajectory_on_table4_zero_init():
    row = TABLE4["zero"]
    t = np.arange(0, 31, 3.0)
    perf = np.exp(-np.array([2.5112, 2.6199, 2.5528, 2.5385, 2.5932, 2.6416, 2.5655, 2.5608, 2.5404, 2.3602, 2.3337]))
    out = gs.trajectory(row["up"], row["noc"], perf, t)
    np.testing.assert_allclose(out["R"], row["R"], atol=1e-8)
    assert out["fisher"]["g"] == pytest.approx(0.4876, abs=5e-5)
    assert 8 < out["harmonic"]["period"] < 14  # "dominant period approximately 11B tokens"
    assert abs(out["R_grassmann"][0]) < 1e-12 and out["pca"]["explained_ratio"].sum() == pytest.approx(1.0)


def _grown_at_growth_step(init: str, frac: float = 0.1):
    """A Nexus-Rank model grown along the 240M -> 380M path's proportions (M 780 -> 1340, A 960 -> 1530,
    scaled down 10x), returned with its growth record, at the growth step."""
    import torch

    from nexus.config import ModelConfig, ProjectionOptions, RunConfig
    from nexus.growth import grow
    from nexus.models import build_model

    proj = ProjectionOptions.make("nexus_rank", targets=["q", "k", "v"], rank_m=78, rank_a=96)
    cfg = RunConfig(model=ModelConfig(d_model=48, n_layers=1, n_heads=2, max_seq_len=128, projection=proj))
    torch.manual_seed(0)
    model = build_model(cfg.model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained-looking base: off its init
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3 * (p.std() if p.numel() > 1 else 0.1))
    new_model, new_cfg, _, _ = grow(
        model, cfg, {"family": "nexus_rank", "delta_m": 56, "delta_a": 57, "init": init, "noise_frac": frac}
    )
    return new_model.state_dict(), new_cfg.growth_history[-1]["old_shapes"]


def test_noc_default_reading_gives_table4_magnitude_and_ordering_at_growth():
    """Table 4 at 0B: NOC 0.775 (zero) < 0.795 (10% noise) < 0.814 (20%). The default reading (base
    matrix against the whole grown matrix) gives that ordering at that magnitude; the corner reading
    (pretrained corner against the new entries) gives ~0 for zero init, far from the paper."""
    whole, corner = {}, {}
    for key, init, frac in (("zero", "zero", 0.1), ("n10", "noise", 0.1), ("n20", "noise", 0.2)):
        sd, shapes = _grown_at_growth_step(init, frac)
        whole[key] = gs.snapshot_stats(sd, shapes)
        corner[key] = gs.snapshot_stats(sd, shapes, reading="corner")
        assert whole[key]["reading"] == "whole" and corner[key]["reading"] == "corner"
    assert whole["zero"]["noc"] < whole["n10"]["noc"] < whole["n20"]["noc"]
    assert 0.5 < whole["zero"]["noc"] and whole["n20"]["noc"] < 0.95
    assert corner["zero"]["noc"] < 0.05
    with pytest.raises(ValueError, match="reading"):
        gs.snapshot_stats(*_grown_at_growth_step("zero"), reading="diagonal")


def test_whole_reading_uses_the_given_base_not_the_moved_corner():
    rng = np.random.default_rng(7)
    base = rng.normal(0, 1, (32, 24))
    w = np.zeros((40, 30))
    w[:32, :24] = base + 3.0  # the pretrained corner has moved far from the base after training
    w[32:, :] = rng.normal(3.0, 1, (8, 30))
    w[:32, 24:] = rng.normal(3.0, 1, (32, 6))
    shapes = {"m.weight": [32, 24]}
    against_base = gs.snapshot_stats({"m.weight": w}, shapes, base={"m.weight": base.ravel()})
    against_corner = gs.snapshot_stats({"m.weight": w}, shapes)
    assert against_base["noc"] < 0.2 < 0.85 < against_corner["noc"]


def test_covariance_pca_of_table3_is_the_covariance_eigendecomposition():
    """`--pca covariance` on the pooled Table 3 rows (growth-step rows left out, as nexus fits them) is the
    eigendecomposition of those rows' covariance matrix, and U_P% dominates its PC1."""
    runs = [gs.state_rows(*TABLE3[k]) for k in TABLE3]
    out = gs.pooled_pca(runs, standardize=False)
    fit_rows = np.vstack([r[1:] for r in runs])
    evals, evecs = np.linalg.eigh(np.cov(fit_rows.T))
    np.testing.assert_allclose(out["explained_ratio"], evals[::-1] / evals.sum(), atol=1e-12)
    assert abs(out["components"][0] @ evecs[:, -1]) == pytest.approx(1, abs=1e-10)
    assert abs(out["components"][0][0]) > 0.99  # PC1 is U_P% alone
    with_growth_rows = np.linalg.eigvalsh(np.cov(np.vstack(runs).T))[::-1]
    assert out["explained_ratio"][:2].sum() > with_growth_rows[:2].sum() / with_growth_rows.sum()
