"""Statistics over seeds, shared by `experiment progressive` and `experiment compare` (scipy.stats).

* `describe(values)`: n, mean, sample std, 95% Student-t interval of the mean.
* `paired(a, b)`: a vs b where a[i] and b[i] come from the same seed (same data order, same init of
  the shared part): mean difference a - b with its 95% t-interval, the paired t-test and the Wilcoxon
  signed-rank test (two-sided; with n seeds Wilcoxon cannot go below p = 2 / 2^n, 0.25 at n = 3).
* `welch(a, b)`: independent samples (different presets): Welch's t-test.
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


def fmt(d: dict, digits: int = 4) -> str:
    """'mean +- std [ci_low, ci_high] (n=..)' for a describe() result."""
    if d["n"] == 0:
        return "n/a"
    s = f"{d['mean']:.{digits}f} +- {d['std']:.{digits}f}"
    if d["ci_low"] is not None:
        s += f" [95% CI {d['ci_low']:.{digits}f}, {d['ci_high']:.{digits}f}]"
    return s + f" (n={d['n']})"
