"""nexus.experiments.stats: intervals hold their coverage, a planted difference is detected and a
planted null is not (checked against the textbook formulas and by simulation)."""

import math
import random

import pytest

from nexus.experiments.stats import describe, paired, welch


def test_describe_matches_the_t_interval_formula():
    vals = [2.0, 2.5, 3.5]
    d = describe(vals)
    mean, sd = sum(vals) / 3, math.sqrt(sum((v - 2.6666666666666665) ** 2 for v in vals) / 2)
    t_975_df2 = 4.302652729911275  # Student t, 97.5th percentile, 2 degrees of freedom (tables)
    assert d["mean"] == pytest.approx(mean) and d["std"] == pytest.approx(sd)
    assert d["ci_low"] == pytest.approx(mean - t_975_df2 * sd / math.sqrt(3))
    assert d["ci_high"] == pytest.approx(mean + t_975_df2 * sd / math.sqrt(3))
    assert describe([1.0])["ci_low"] is None and describe([])["mean"] is None


def test_interval_covers_the_true_mean_about_95_percent():
    rng = random.Random(0)
    hits = 0
    for _ in range(2000):
        d = describe([rng.gauss(5.0, 2.0) for _ in range(3)])
        hits += d["ci_low"] <= 5.0 <= d["ci_high"]
    assert 0.93 < hits / 2000 < 0.97


def test_paired_detects_a_planted_difference_and_not_a_planted_null():
    rng = random.Random(1)
    seed_effect = [rng.gauss(0, 0.5) for _ in range(8)]  # large between-seed spread, shared by both arms
    a = [2.0 + s + rng.gauss(0, 0.01) for s in seed_effect]
    b_diff = [2.1 + s + rng.gauss(0, 0.01) for s in seed_effect]  # planted +0.1
    b_null = [2.0 + s + rng.gauss(0, 0.01) for s in seed_effect]
    found = paired(b_diff, a)
    assert found["t_p"] < 1e-4 and found["wilcoxon_p"] < 0.01
    assert found["diff"]["ci_low"] < 0.1 < found["diff"]["ci_high"] and found["diff"]["ci_low"] > 0
    null = paired(b_null, a)
    assert null["t_p"] > 0.05 and null["wilcoxon_p"] > 0.05
    assert null["diff"]["ci_low"] < 0 < null["diff"]["ci_high"]
    # pairing is what finds it: the same numbers as independent samples drown in the seed spread
    assert welch(b_diff, a) > 0.05


def test_paired_null_false_positive_rate_is_about_five_percent():
    rng = random.Random(2)
    rejections = sum(
        paired([rng.gauss(0, 1) for _ in range(5)], [rng.gauss(0, 1) for _ in range(5)])["t_p"] < 0.05
        for _ in range(2000)
    )
    assert 0.03 < rejections / 2000 < 0.07


def test_degenerate_inputs_give_no_p_value():
    assert paired([1.0, 2.0], [1.0, 2.0])["t_p"] is None  # all differences zero
    assert paired([1.0], [2.0])["t_p"] is None
    assert welch([1.0], [1.0, 2.0]) is None
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])
    assert paired([3.0, 4.0, 6.0], [1.0, 1.0, 1.0])["diff"]["mean"] == pytest.approx(10 / 3)


# ----------------------------------------------------------------------------- share of the gap closed
def _t_p(z):
    from scipy import stats

    return float(stats.ttest_1samp(z, 0.0).pvalue)


def test_gap_closed_interval_is_the_inverted_paired_t_test():
    """Fieller's set written from its definition: R is inside iff scipy's one-sample t-test of
    (small - grown) - R (small - scratch) does not reject at 5%; its ends sit at p = 0.05."""
    from nexus.experiments.stats import gap_closed

    small, grown, scratch = [3.00, 3.10, 2.95, 3.05], [2.90, 2.97, 2.86, 2.93], [2.80, 2.95, 2.77, 2.88]
    g = gap_closed(small, grown, scratch)
    num = [s - x for s, x in zip(small, grown)]
    den = [s - c for s, c in zip(small, scratch)]
    assert g["estimate"] == pytest.approx(sum(num) / sum(den)) and g["bounded"]
    z = lambda r: [n - r * d for n, d in zip(num, den)]  # noqa: E731
    assert _t_p(z(g["ci_low"])) == pytest.approx(0.05, abs=1e-6)
    assert _t_p(z(g["ci_high"])) == pytest.approx(0.05, abs=1e-6)
    assert _t_p(z(g["estimate"])) > 0.05
    width = g["ci_high"] - g["ci_low"]
    assert _t_p(z(g["ci_low"] - 0.1 * width)) < 0.05 and _t_p(z(g["ci_high"] + 0.1 * width)) < 0.05


def _planted(rng, closed: float, n: int, noise: float = 0.01):
    """Seeds differ a lot in level (shared by every run of a seed), the gap is 0.1 nats."""
    small, grown, scratch = [], [], []
    for _ in range(n):
        level = rng.gauss(3.0, 0.3)
        small.append(level + rng.gauss(0, noise))
        scratch.append(level - 0.1 + rng.gauss(0, noise))
        grown.append(level - closed * 0.1 + rng.gauss(0, noise))
    return small, grown, scratch


def test_gap_closed_detects_a_planted_share_and_not_a_planted_null():
    from nexus.experiments.stats import gap_closed

    rng = random.Random(3)
    found = gap_closed(*_planted(rng, 0.85, 5))
    assert found["bounded"] and found["ci_low"] < 0.85 < found["ci_high"] and found["ci_low"] > 0
    null = gap_closed(*_planted(rng, 0.0, 5))
    assert null["bounded"] and null["ci_low"] < 0 < null["ci_high"]


def test_gap_closed_interval_covers_the_planted_share_about_95_percent():
    from nexus.experiments.stats import gap_closed

    rng = random.Random(4)
    hits = 0
    for _ in range(1000):
        g = gap_closed(*_planted(rng, 0.6, 3, noise=0.02))
        hits += (not g["bounded"]) or g["ci_low"] <= 0.6 <= g["ci_high"]  # an unbounded set covers everything
    assert 0.93 < hits / 1000 < 0.97


def test_gap_closed_is_unbounded_when_the_gap_itself_is_noise():
    from nexus.experiments.stats import fmt_gap, gap_closed

    g = gap_closed([3.0, 3.1, 2.9], [3.0, 3.08, 2.93], [3.05, 3.0, 2.98])  # scratch is not reliably better
    assert not g["bounded"] and g["ci_low"] is None and "unbounded" in fmt_gap(g)
    assert gap_closed([3.0], [2.9], [2.8])["estimate"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        gap_closed([1.0, 2.0], [1.0], [1.0, 2.0])


def test_quartiles_and_rank_sum_on_a_bimodal_outcome():
    """Seven seeds of which three stay at chance and four solve the task (order 1 on MQAR): the median and
    quartiles are numpy's percentiles; a planted shift that a higher order wins is detected by the rank tests,
    and a planted null (the same bimodal mix) is not."""
    import numpy as np
    from scipy import stats

    from nexus.experiments.stats import quartiles, rank_sum

    rng = random.Random(5)
    order1 = [0.03 + rng.uniform(0, 0.01) for _ in range(3)] + [0.9 + rng.uniform(0, 0.05) for _ in range(4)]
    q = quartiles(order1)
    want = np.percentile(order1, [25, 50, 75])
    assert (q["q1"], q["median"], q["q3"]) == (pytest.approx(want[0]), pytest.approx(want[1]), pytest.approx(want[2]))
    assert q["n"] == 7 and quartiles([])["median"] is None
    better = [0.97 + rng.uniform(0, 0.02) for _ in range(7)]  # every seed solves it
    assert rank_sum(better, order1) == pytest.approx(stats.mannwhitneyu(better, order1).pvalue)
    assert rank_sum(better, order1) < 0.05
    assert paired(better, order1)["wilcoxon_p"] == pytest.approx(2 / 2**7)  # higher in all 7 seeds
    same_mix = [0.03 + rng.uniform(0, 0.01) for _ in range(3)] + [0.9 + rng.uniform(0, 0.05) for _ in range(4)]
    assert rank_sum(same_mix, order1) > 0.05 and paired(same_mix, order1)["wilcoxon_p"] > 0.05
    assert rank_sum([1.0, 1.0], [1.0, 1.0]) is None
