"""Statistics over seeds, shared by `experiment progressive` and `experiment compare` (scipy.stats).

* `describe(values)`: n, mean, sample std, 95% Student-t interval of the mean.
* `paired(a, b)`: a vs b where a[i] and b[i] come from the same seed (same data order, same init of
  the shared part): mean difference a - b with its 95% t-interval, the paired t-test and the Wilcoxon
  signed-rank test (two-sided; with n seeds Wilcoxon cannot go below p = 2 / 2^n, 0.25 at n = 3).
* `welch(a, b)`: independent samples (different presets): Welch's t-test.
* `quartiles(values)`, `rank_sum(a, b)`: median and quartiles, and the Mann-Whitney test, for outcomes
  that are bimodal over seeds.
* `gap_closed(small, grown, scratch)`: the share of the small-to-scratch loss gap a grown run closed,
  (small - grown) / (small - scratch), the paper's comparable number (SPARKLING closes 84-90%), as a
  ratio of the mean paired differences with Fieller's 95% interval over seeds (see its docstring).
p-values are None where the test is undefined (fewer than two values, or zero variance in every
difference).
"""

from __future__ import annotations

import math
import statistics

CONFIDENCE = 0.95


def _finite(p) -> float | None:
    p = float(p)
    return None if math.isnan(p) else p


def describe(values: list[float], confidence: float = CONFIDENCE) -> dict:
    """{"n", "mean", "std", "ci_low", "ci_high"} (interval = mean +- t_{n-1} * std / sqrt(n))."""
    from scipy import stats

    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "ci_low": None, "ci_high": None}
    mean = statistics.fmean(vals)
    if n < 2:
        return {"n": 1, "mean": mean, "std": 0.0, "ci_low": None, "ci_high": None}
    std = statistics.stdev(vals)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "ci_low": mean - half, "ci_high": mean + half}


def in_standard_errors(diffs: list[float]) -> dict:
    """The mean of paired differences in units of its standard error, {"mean", "se", "ses"}: the studies' pilot
    checks (a gap must exceed k standard errors). Under 2 values se and ses are nan (no check can pass); where
    every difference is equal (se 0) ses is +-inf by the sign of the mean (0 for a zero mean)."""
    d = describe(diffs)
    if d["n"] < 2:
        return {"mean": d["mean"], "se": float("nan"), "ses": float("nan")}
    se = d["std"] / math.sqrt(d["n"])
    ses = d["mean"] / se if se > 0 else math.copysign(float("inf"), d["mean"]) if d["mean"] else 0.0
    return {"mean": d["mean"], "se": se, "ses": ses}


def paired(a: list[float], b: list[float]) -> dict:
    """Paired comparison of a and b (same seeds, same order)."""
    from scipy import stats

    if len(a) != len(b):
        raise ValueError(f"paired test needs equal lengths, got {len(a)} and {len(b)}")
    diff = [float(x) - float(y) for x, y in zip(a, b)]
    out = {"diff": describe(diff), "t_p": None, "wilcoxon_p": None}
    if len(diff) >= 2 and any(d != diff[0] for d in diff):
        out["t_p"] = _finite(stats.ttest_rel(a, b).pvalue)
    if len(diff) >= 2 and any(d != 0 for d in diff):
        out["wilcoxon_p"] = _finite(stats.wilcoxon(diff).pvalue)
    return out


def welch(a: list[float], b: list[float]) -> float | None:
    """Two-sided Welch's t-test p-value; None when either side has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats

    return _finite(stats.ttest_ind(a, b, equal_var=False).pvalue)


def gap_closed(small: list[float], grown: list[float], scratch: list[float], confidence: float = CONFIDENCE) -> dict:
    """Share of the small-to-scratch gap closed, R = mean(small - grown) / mean(small - scratch), over seeds
    paired by index, with Fieller's interval (Fieller 1954): the set of R for which the paired t-test of
    z_i = (small_i - grown_i) - R (small_i - scratch_i) does not reject mean(z) = 0 at 1 - confidence.

    Why Fieller rather than a t interval of per-seed ratios or a bootstrap: a per-seed ratio explodes when
    one seed's small and scratch losses happen to be close, and with 3 seeds a bootstrap has 10 distinct
    resamples. Fieller's set is exact for normal paired differences at any n, and it is honest when the
    gap itself is not distinguishable from zero: then the set is unbounded and `bounded` is False
    (ci_low/ci_high None) instead of a narrow interval around a meaningless ratio. scipy has no Fieller
    interval, so the quadratic is solved here; tests check it against scipy's one-sample t-test.

    1 = as good as scratch, 0 = no better than the small model alone, < 0 worse than the small model."""
    from scipy import stats

    if not len(small) == len(grown) == len(scratch):
        raise ValueError(f"gap_closed needs equal lengths, got {len(small)}, {len(grown)}, {len(scratch)}")
    k = len(small)
    num = [float(s) - float(g) for s, g in zip(small, grown)]
    den = [float(s) - float(c) for s, c in zip(small, scratch)]
    per_seed = [None if d == 0 else n / d for n, d in zip(num, den)]
    out: dict[str, object] = {
        "n": k,
        "estimate": None,
        "ci_low": None,
        "ci_high": None,
        "bounded": False,
        "per_seed": per_seed,
        "method": f"ratio of mean paired differences, Fieller {confidence:.0%} interval",
    }
    if k == 0:
        return out
    mn, md = statistics.fmean(num), statistics.fmean(den)
    out["estimate"] = None if md == 0 else mn / md
    if k < 2 or out["estimate"] is None:
        return out
    s_nn, s_dd = statistics.variance(num), statistics.variance(den)
    s_nd = statistics.covariance(num, den)
    q = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) ** 2 / k
    # (mn - R md)^2 <= q (s_nn - 2 R s_nd + R^2 s_dd)  <=>  a R^2 - 2 b R + c <= 0
    a, b, c = md * md - q * s_dd, mn * md - q * s_nd, mn * mn - q * s_nn
    if a <= 0:  # the gap's own interval contains 0: the set of R is unbounded
        return out
    root = math.sqrt(max(b * b - a * c, 0.0))  # >= 0: the estimate itself satisfies the inequality
    out.update(ci_low=(b - root) / a, ci_high=(b + root) / a, bounded=True)
    return out


def quartiles(values: list[float]) -> dict:
    """{"n", "median", "q1", "q3"} (numpy's linear-interpolation percentiles): the summary for outcomes that
    are bimodal over seeds (a task that some seeds solve and others do not), where mean +- std misleads."""
    import numpy as np

    v = np.asarray([float(x) for x in values], dtype=np.float64)
    if v.size == 0:
        return {"n": 0, "median": None, "q1": None, "q3": None}
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {"n": int(v.size), "median": float(med), "q1": float(q1), "q3": float(q3)}


def rank_sum(a: list[float], b: list[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value of a vs b as independent samples (scipy); None below 2 values a side
    or when every value is the same."""
    if len(a) < 2 or len(b) < 2 or len({*map(float, a), *map(float, b)}) < 2:
        return None
    from scipy import stats

    return _finite(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def fmt_gap(g: dict) -> str:
    """'0.49 [95% CI 0.21, 0.77] (n=3)' of a gap_closed() result, or why there is no interval."""
    if g["estimate"] is None:
        return "n/a (the small and scratch runs end at the same loss)"
    s = f"{g['estimate']:.2f}"
    if g["bounded"]:
        s += f" [95% CI {g['ci_low']:.2f}, {g['ci_high']:.2f}]"
    elif g["n"] >= 2:
        s += " [95% CI unbounded: the small-to-scratch gap is not distinguishable from zero over these seeds]"
    return s + f" (n={g['n']})"


def fmt(d: dict, digits: int = 4) -> str:
    """'mean +- std [ci_low, ci_high] (n=..)' for a describe() result."""
    if d["n"] == 0:
        return "n/a"
    s = f"{d['mean']:.{digits}f} +- {d['std']:.{digits}f}"
    if d["ci_low"] is not None:
        s += f" [95% CI {d['ci_low']:.{digits}f}, {d['ci_high']:.{digits}f}]"
    return s + f" (n={d['n']})"
