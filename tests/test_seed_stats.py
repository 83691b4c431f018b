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
    rejections = sum(paired([rng.gauss(0, 1) for _ in range(5)], [rng.gauss(0, 1) for _ in range(5)])["t_p"] < 0.05
                     for _ in range(2000))
    assert 0.03 < rejections / 2000 < 0.07


def test_degenerate_inputs_give_no_p_value():
    assert paired([1.0, 2.0], [1.0, 2.0])["t_p"] is None  # all differences zero
    assert paired([1.0], [2.0])["t_p"] is None
    assert welch([1.0], [1.0, 2.0]) is None
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])
    assert paired([3.0, 4.0, 6.0], [1.0, 1.0, 1.0])["diff"]["mean"] == pytest.approx(10 / 3)
