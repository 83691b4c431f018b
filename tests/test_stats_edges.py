"""Edges of nexus.experiments.stats that a mutation run found unpinned: the exact shape of degenerate
results (no values, one value, two values), None instead of NaN where a test is undefined, and the
formatted lines the reports print. Expected values come from the definitions (scipy, the t formula),
never from the functions under test."""

import math

import pytest
from scipy import stats as sps

from nexus.experiments import stats

KEYS = {"n", "mean", "std", "ci_low", "ci_high"}


def test_describe_degenerate_inputs_have_the_full_shape():
    assert stats.describe([]) == {"n": 0, "mean": None, "std": None, "ci_low": None, "ci_high": None}
    assert stats.describe([2.5]) == {"n": 1, "mean": 2.5, "std": 0.0, "ci_low": None, "ci_high": None}


def test_describe_gives_an_interval_from_two_values():
    d = stats.describe([1.0, 3.0])  # the smallest n with a t interval (1 degree of freedom)
    half = sps.t.ppf(0.975, 1) * math.sqrt(2.0) / math.sqrt(2)
    assert set(d) == KEYS and d["n"] == 2 and d["mean"] == 2.0 and d["std"] == pytest.approx(math.sqrt(2))
    assert (d["ci_low"], d["ci_high"]) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-12)


def test_undefined_p_values_are_none_not_nan():
    assert stats.welch([1.0, 1.0], [1.0, 1.0]) is None  # scipy returns NaN for zero variance everywhere
    assert stats.welch([1.0], [1.0, 2.0]) is None and stats.welch([1.0, 2.0], [1.0]) is None
    p = stats.welch([1.0, 2.0, 3.5], [2.0, 4.0, 4.5])
    assert p == pytest.approx(sps.ttest_ind([1.0, 2.0, 3.5], [2.0, 4.0, 4.5], equal_var=False).pvalue, rel=1e-12)
    assert p != pytest.approx(sps.ttest_ind([1.0, 2.0, 3.5], [2.0, 4.0, 4.5], equal_var=True).pvalue, rel=1e-6)
    two = stats.welch([1.0, 2.0], [3.0, 5.0])  # two values a side is the smallest defined case
    assert two == pytest.approx(sps.ttest_ind([1.0, 2.0], [3.0, 5.0], equal_var=False).pvalue, rel=1e-12)


def test_paired_keys_and_where_each_test_is_defined():
    same = stats.paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert set(same) == {"diff", "t_p", "wilcoxon_p"} and same["t_p"] is None and same["wilcoxon_p"] is None
    shift = stats.paired([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])  # constant non-zero difference: no t, but a sign
    assert shift["t_p"] is None and shift["wilcoxon_p"] == pytest.approx(sps.wilcoxon([1.0, 1.0, 1.0]).pvalue)
    a, b = [2.0, 3.5, 4.0, 6.0], [1.0, 2.0, 3.0, 4.0]
    both = stats.paired(a, b)
    assert both["t_p"] == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-12)
    assert both["wilcoxon_p"] == pytest.approx(sps.wilcoxon([1.0, 1.5, 1.0, 2.0]).pvalue, rel=1e-12)
    two = stats.paired([2.0, 4.0], [1.0, 2.0])  # n = 2 is enough for both tests
    assert two["t_p"] is not None and two["wilcoxon_p"] is not None
    one = stats.paired([2.0], [1.0])
    assert one["t_p"] is None and one["wilcoxon_p"] is None
    with pytest.raises(ValueError, match="equal lengths"):
        stats.paired([1.0, 2.0], [1.0])


def test_gap_closed_shape_and_per_seed_ratios():
    with pytest.raises(ValueError, match="equal lengths"):
        stats.gap_closed([1.0], [1.0, 2.0], [1.0])
    g = stats.gap_closed([3.0, 3.0], [2.5, 2.0], [1.0, 3.0])  # seed 1 has no gap: its ratio is undefined
    assert g["per_seed"] == [0.25, None]
    assert set(g) == {"n", "estimate", "ci_low", "ci_high", "bounded", "per_seed", "method"}
    assert "Fieller 95%" in g["method"]
    assert stats.gap_closed([], [], [])["estimate"] is None
    flat = stats.gap_closed([2.0, 2.0], [1.9, 1.8], [2.0, 2.0])  # no gap on average
    assert flat["estimate"] is None and not flat["bounded"]
    one = stats.gap_closed([3.0], [2.5], [2.0])
    assert one["estimate"] == 0.5 and not one["bounded"] and one["ci_low"] is None


def test_gap_closed_is_unbounded_when_the_gap_sits_exactly_on_its_critical_value():
    """Fieller's a = mean(d)^2 - q var(d) is exactly 0 when the gap's own t statistic equals the critical
    value: the quadratic inequality becomes linear and its solution set a half-line, so no bounded interval
    (and no division by a). Two seeds with d = ((T + 1) / 2, (T - 1) / 2), T = t_{0.975, 1}: mean(d) = T/2
    and var(d) = 1/2 exactly in floating point, so mean(d)^2 == q var(d) with q = T^2 / 2 to the last bit."""
    import statistics

    crit = float(sps.t.ppf(0.975, 1))
    d = [(crit + 1) / 2, (crit - 1) / 2]
    q = crit**2 / 2
    assert statistics.fmean(d) ** 2 - q * statistics.variance(d) == 0.0  # the constructed case, exactly
    t_stat = statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(2))
    assert t_stat == pytest.approx(crit, rel=1e-15)  # the same case read as a t-test: exactly on its edge
    g = stats.gap_closed(d, [x / 2 for x in d], [0.0, 0.0])  # small - scratch = d, small - grown = d / 2
    assert g["estimate"] == pytest.approx(0.5, rel=1e-15)
    assert not g["bounded"] and g["ci_low"] is None and g["ci_high"] is None


def test_fmt_lines():
    assert stats.fmt(stats.describe([])) == "n/a"
    assert stats.fmt(stats.describe([1.25])) == "1.2500 +- 0.0000 (n=1)"
    d = stats.describe([1.0, 3.0])
    assert stats.fmt(d, digits=2) == f"2.00 +- 1.41 [95% CI {d['ci_low']:.2f}, {d['ci_high']:.2f}] (n=2)"
    assert (
        stats.fmt_gap(stats.gap_closed([2.0], [1.0], [2.0])) == "n/a (the small and scratch runs end at the same loss)"
    )
    assert stats.fmt_gap(stats.gap_closed([3.0], [2.5], [2.0])) == "0.50 (n=1)"
    unbounded = stats.gap_closed([3.0, 3.0], [2.9, 2.5], [2.0, 3.9])  # two seeds are enough to say so
    assert not unbounded["bounded"] and stats.fmt_gap(unbounded) == (
        f"{unbounded['estimate']:.2f} [95% CI unbounded: the small-to-scratch gap is not distinguishable from "
        "zero over these seeds] (n=2)"
    )
    tight = stats.gap_closed([3.0, 3.1, 2.9], [2.5, 2.6, 2.4], [2.0, 2.1, 1.9])
    assert tight["bounded"] and stats.fmt_gap(tight).startswith("0.50 [95% CI 0.50, 0.50]")


def test_gap_closed_interval_from_two_seeds_matches_the_inverted_t_test():
    """Fieller's set at n = 2: the R where the paired t-test of z = (small - grown) - R (small - scratch)
    sits exactly at p = 0.05 (1 degree of freedom), checked with scipy at both ends."""
    small, grown, scratch = [3.0, 3.2], [2.4, 2.7], [2.0, 2.3]
    g = stats.gap_closed(small, grown, scratch)
    assert g["bounded"] and g["n"] == 2
    for r in (g["ci_low"], g["ci_high"]):
        z = [(s - gr) - r * (s - c) for s, gr, c in zip(small, grown, scratch)]
        assert sps.ttest_1samp(z, 0.0).pvalue == pytest.approx(0.05, abs=1e-9)


def test_quartiles_and_rank_sum_edges():
    assert stats.quartiles([]) == {"n": 0, "median": None, "q1": None, "q3": None}
    assert stats.quartiles([4.0, 1.0, 3.0, 2.0]) == {"n": 4, "median": 2.5, "q1": 1.75, "q3": 3.25}
    a, b = [0.1, 0.2], [0.8, 0.9]  # two values a side is the smallest defined case
    assert stats.rank_sum(a, b) == pytest.approx(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert stats.rank_sum([0.1], b) is None and stats.rank_sum(a, [0.9]) is None
    assert stats.rank_sum([0.5, 0.5], [0.5, 0.5]) is None  # every value equal: no ranking
    assert stats.rank_sum([0.5, 0.5], [0.5, 0.7]) is not None  # two distinct values are enough


def test_in_standard_errors_is_the_mean_over_its_standard_error_and_never_passes_a_check_on_one_value():
    """The studies' pilot checks read ses >= k: one value cannot pass, equal differences are +-inf by their sign."""
    import math

    from nexus.experiments.stats import in_standard_errors

    d = [0.03, 0.05, 0.04, 0.06]
    mean = sum(d) / 4
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / 3 / 4)  # the sample std over sqrt(n), from its definition
    got = in_standard_errors(d)
    assert got["mean"] == pytest.approx(mean) and got["se"] == pytest.approx(se)
    assert got["ses"] == pytest.approx(mean / se)
    one = in_standard_errors([0.5])
    assert math.isnan(one["se"]) and not one["ses"] >= 4
    assert in_standard_errors([0.1, 0.1])["ses"] == math.inf and in_standard_errors([-0.1, -0.1])["ses"] == -math.inf
    assert in_standard_errors([0.0, 0.0])["ses"] == 0.0
