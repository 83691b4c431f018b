"""Growth-dynamics statistics (Nexusformer section 5, appendices C, D, F).

Every function takes plain numbers (numpy arrays / lists), so the paper's tables can be fed in
directly; `snapshot_stats` extracts (U_P, NOC) from model weights using the growth record's
`old_shapes` (pretrained region = leading corner, new region = the rest); by default it compares the
base (pre-growth) matrix with the whole grown matrix (see NOC_READINGS).

  noc(a, b)                 nonparametric overlap coefficient: integral of min(f, g), KDE densities
  mann_whitney_p(a, b)      Mann-Whitney U two-sided p-value (U_P), over every entry of both samples
  relative_change(x)        (x_t - x_0) / x_0   (U_P%, NOC%, Perf%)
  radius(up, noc)           R = sqrt(U_P%^2 + NOC%^2)   (eq. 18)
  scaling_fit(R, ppl)       ln PPL = w |ln R| + b, with R^2   (eq. 19)
  harmonic_regression(t, y) R(t) = A0 + A1 cos(2 pi f t + phi): f, R^2, F, p
  fisher_g(y)               Fisher's g on the linearly detrended series with its exact p-value
  pca(X)                    principal axes, explained variance, 2-D embedding z_t (standardized by default)
  pooled_pca(runs)          Table 5: PCA over several growth runs' (U_P%, NOC%, Perf%) rows
  grassmann_distances(Z)    R_G(t) from principal angles of span([PC1, PC2, 0], e3), R_E(t)
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg, signal, stats

# Weights drawn per side for the KDE of NOC: a KDE evaluated on the grid costs O(n x grid). U_P uses every
# entry: ranking is O(n log n), and a 20,000-entry sample of a 28,672-entry matrix moved U_P over 0.33-0.72
# across sampling seeds where the full-sample value was 0.41.
MAX_SAMPLES = 20000


def _sample(x, n: int, seed: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size <= n:
        return x
    return np.random.default_rng(seed).choice(x, size=n, replace=False)


def noc(a, b, grid: int = 1024, seed: int = 0) -> float:
    """Overlap coefficient of the densities of samples a and b (Schmid & Schmidt 2006): Gaussian KDEs
    (Scott's bandwidth) evaluated on a common grid, trapezoid integral of their pointwise minimum."""
    a, b = _sample(a, MAX_SAMPLES, seed), _sample(b, MAX_SAMPLES, seed + 1)
    if a.size < 2 or b.size < 2:
        raise ValueError("noc needs at least two samples per side")
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] == b[0] else 0.0
    # a constant sample (e.g. all-zero new weights) has no KDE bandwidth: give it a tiny spread
    a = a + (np.random.default_rng(seed + 2).normal(0, 1e-12 + 1e-6 * np.std(b), a.size) if np.ptp(a) == 0 else 0)
    b = b + (np.random.default_rng(seed + 3).normal(0, 1e-12 + 1e-6 * np.std(a), b.size) if np.ptp(b) == 0 else 0)
    ka, kb = stats.gaussian_kde(a), stats.gaussian_kde(b)
    pad = 4 * max(math.sqrt(ka.covariance[0, 0]), math.sqrt(kb.covariance[0, 0]))
    xs = np.linspace(min(a.min(), b.min()) - pad, max(a.max(), b.max()) + pad, grid)
    return float(np.trapezoid(np.minimum(ka(xs), kb(xs)), xs))


def mann_whitney_p(a, b) -> float:
    """Two-sided Mann-Whitney U p-value over every entry of a and b (scipy ranks the pooled sample, O(n log n)):
    do the new weights differ in location from the old ones?"""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def relative_change(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return (x - x[0]) / x[0]


def radius(up, noc_values) -> np.ndarray:
    """R_t = sqrt(U_P%(t)^2 + NOC%(t)^2), both relative to the first snapshot (eq. 16-18)."""
    return np.hypot(relative_change(up), relative_change(noc_values))


def scaling_fit(r, ppl) -> dict:
    """OLS fit ln(PPL) = w |ln R| + b over the points with R > 0 (eq. 19)."""
    r, ppl = np.asarray(r, dtype=np.float64), np.asarray(ppl, dtype=np.float64)
    keep = r > 0
    x, y = np.abs(np.log(r[keep])), np.log(ppl[keep])
    fit = stats.linregress(x, y)
    return {"w": float(fit.slope), "b": float(fit.intercept), "r2": float(fit.rvalue**2), "n": int(keep.sum())}


def harmonic_regression(t, y, n_freqs: int = 2000) -> dict:
    """R(t) = A0 + A1 cos(2 pi f t + phi) by OLS on [1, cos, sin] for each f on a grid up to the
    Nyquist frequency (f > 1/span so at least one period fits); the best f by R^2 is kept.
    F and p compare with the constant model on (2, n - 3) degrees of freedom, as in appendix D.3.2
    (f treated as given, so p is optimistic when f was searched)."""
    t, y = np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = t.size
    span = t.max() - t.min()
    dt = np.min(np.diff(np.sort(t)))
    best = None
    for f in np.linspace(1.0 / span, 0.5 / dt, n_freqs):
        X = np.column_stack([np.ones(n), np.cos(2 * np.pi * f * t), np.sin(2 * np.pi * f * t)])
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        ss_res = float(((y - X @ coef) ** 2).sum())
        if best is None or ss_res < best[0]:
            best = (ss_res, f, coef)
    assert best is not None  # a grid of n_freqs >= 1 points (its one caller: 2000)
    ss_res, f, coef = best
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    df1, df2 = 2, n - 3
    F = (r2 / df1) / ((1 - r2) / df2) if r2 < 1 else float("inf")
    return {
        "A0": float(coef[0]),
        "A1": float(math.hypot(coef[1], coef[2])),
        "phi": float(math.atan2(-coef[2], coef[1])),
        "frequency": float(f),
        "period": float(1.0 / f),
        "r2": float(r2),
        "F": float(F),
        "p": float(stats.f.sf(F, df1, df2)),
        "df": [df1, df2],
    }


def fisher_g_pvalue(g: float, m: int) -> float:
    """Exact null p-value of Fisher's g with m Fourier frequencies (Fisher 1929):
    P(G > g) = sum_{j=1}^{floor(1/g)} (-1)^(j-1) C(m, j) (1 - j g)^(m-1)."""
    total = 0.0
    for j in range(1, min(m, int(math.floor(1.0 / g))) + 1):
        total += (-1) ** (j - 1) * math.comb(m, j) * (1.0 - j * g) ** (m - 1)
    return float(min(max(total, 0.0), 1.0))


def fisher_g(y, detrend: bool = True) -> dict:
    """g = max periodogram ordinate / sum of ordinates at the Fourier frequencies k/n, k = 1..m,
    m = floor((n-1)/2) (zero and Nyquist excluded), after removing a least-squares line."""
    y = np.asarray(y, dtype=np.float64)
    if detrend:
        y = signal.detrend(y, type="linear")
    n = y.size
    m = (n - 1) // 2
    spec = np.abs(np.fft.rfft(y)) ** 2
    ords = spec[1 : m + 1]
    g = float(ords.max() / ords.sum())
    k = int(np.argmax(ords)) + 1
    return {"g": g, "p": fisher_g_pvalue(g, m), "m": m, "dominant_frequency": k / n}


def pca(X, standardize: bool = True) -> dict:
    """PCA of rows x_t (features in columns). Returns components (rows = PCs, signs fixed so the
    largest-magnitude loading is positive), explained variance ratios, the 2-D embedding z, and the
    centre/scale used (for `project`). standardize=True (default) divides each centred feature by
    its sample std, i.e. PCA of the correlation matrix: the features (U_P%, NOC%, Perf%) live on
    different scales, and only this reading reproduces the paper's Table 5 (92.49%, PC1 loadings
    0.604 / 0.669 / 0.433). standardize=False is covariance PCA, where U_P% alone makes up PC1."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    scale = np.ones(X.shape[1])
    if standardize:
        sd = (X - mean).std(axis=0, ddof=1)
        scale = np.where(sd > 0, sd, 1.0)
    Xc = (X - mean) / scale
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    for i in range(vt.shape[0]):
        if vt[i, np.argmax(np.abs(vt[i]))] < 0:
            vt[i] = -vt[i]
    var = s**2
    ratio = var / var.sum() if var.sum() > 0 else var
    return {
        "components": vt,
        "explained_ratio": ratio,
        "z": Xc @ vt[:2].T,
        "mean": mean,
        "scale": scale,
        "standardized": standardize,
    }


def project(p: dict, X) -> np.ndarray:
    """2-D embedding of rows X with a fitted `pca` result (same centre, scale and axes)."""
    return ((np.asarray(X, dtype=np.float64) - p["mean"]) / p["scale"]) @ p["components"][:2].T


def state_rows(up, noc_values, perf) -> np.ndarray:
    """x_t = (U_P%, NOC%, Perf%) of one growth run (eq. 21), each relative to the run's growth step."""
    return np.column_stack([relative_change(up), relative_change(noc_values), relative_change(perf)])


def pooled_pca(runs: list, standardize: bool = True) -> dict:
    """Appendix C / Table 5 across runs: PCA of the state vectors of every run pooled together. Each
    run's growth-step row is the origin by construction (all three changes are 0), so it is left out
    of the fit (with it, Table 3 gives 92.0% instead of Table 5's 92.49%) and only projected.
    Returns the pca result plus `z_runs`, each run's full embedded trajectory (growth step first)."""
    runs = [np.asarray(r, dtype=np.float64) for r in runs]
    fit_rows = np.vstack([r[1:] for r in runs])
    p = pca(fit_rows, standardize)
    p["z_runs"] = [project(p, r) for r in runs]
    return p


def grassmann_distances(z) -> dict:
    """Appendix C.1: S_t = span(QR([PC1_t, PC2_t, 0], [0, 0, 1])) in Gr(2, 3); R_G(t) = ||principal
    angles(S_0, S_t)||_2 (scipy.linalg.subspace_angles), R_E(t) = ||z_t - z_0||_2."""
    z = np.asarray(z, dtype=np.float64)
    e3 = np.array([0.0, 0.0, 1.0])

    def basis(p):
        q, _ = np.linalg.qr(np.column_stack([np.array([p[0], p[1], 0.0]), e3]))
        return q

    b0 = basis(z[0])
    rg = np.array([float(np.linalg.norm(linalg.subspace_angles(b0, basis(p)))) for p in z])
    re = np.linalg.norm(z - z[0], axis=1)
    return {"grassmann": rg, "euclidean": re}


# ----------------------------------------------------------------------------- from weights
# Which two weight samples NOC and U_P compare (section 5.1: "the shift in weight distributions
# between the base and expanded models"):
#   whole   the base model's matrix (pre-growth, fixed) against the whole grown matrix at this
#           snapshot. At the growth step with zero / 10% / 20% noise init this gives the magnitude
#           and ordering of the paper's Table 4 at 0B (0.775 / 0.795 / 0.814). Default.
#           This is a reading chosen because it reproduces that NOC ordering; the paper does not say it.
#   corner  the pretrained corner of the grown matrix against its new entries only. At the growth
#           step with zero init the new entries are one spike at 0, so NOC is ~0, far from Table 4.
# Beside either reading, snapshot_stats also gives `u_p_new_vs_original`: U_P of the new entries against
# the original (base) matrix, the comparison the paper's U_P sentence names ("whether the newly added
# parameters diverge from the original distribution in terms of statistical location", Sec. 5.1).
NOC_READINGS = ("whole", "corner")


def split_old_new(weight, old_shape) -> tuple[np.ndarray, np.ndarray]:
    """Pretrained entries (leading corner of `old_shape`) and newly added entries of a grown tensor."""
    w = np.asarray(weight, dtype=np.float64)
    sl = tuple(slice(0, s) for s in old_shape)
    mask = np.ones(w.shape, dtype=bool)
    mask[sl] = False
    return w[sl].ravel(), w[mask]


def _numpy(w) -> np.ndarray:
    return w.detach().float().cpu().numpy() if hasattr(w, "detach") else np.asarray(w, dtype=np.float64)


def base_weights(state_dict: dict, old_shapes: dict) -> dict:
    """The base (pre-growth) matrices read from a snapshot taken at the growth step: each grown
    matrix's leading corner, which growth leaves as the pretrained weights."""
    return {
        name: split_old_new(_numpy(state_dict[name]), shape)[0]
        for name, shape in old_shapes.items()
        if name in state_dict
    }


def snapshot_stats(
    state_dict: dict, old_shapes: dict, base: dict | None = None, reading: str = "whole", seed: int = 0
) -> dict:
    """Per grown matrix and pooled (mean over matrices): NOC and U_P in the given reading (see
    NOC_READINGS). `base` maps names to the pre-growth weights (`base_weights` of the growth-step
    snapshot); without it the corner of this snapshot stands in, which is exact at the growth step."""
    if reading not in NOC_READINGS:
        raise ValueError(f"reading={reading!r} (valid: {'|'.join(NOC_READINGS)})")
    per = {}
    for name, shape in old_shapes.items():
        if name not in state_dict:
            continue
        w = _numpy(state_dict[name])
        old, new = split_old_new(w, shape)
        if new.size < 2:
            continue
        original = base[name] if base is not None and name in base else old
        a, b = (original, w.ravel()) if reading == "whole" else (old, new)
        per[name] = {
            "noc": noc(a, b, seed=seed),
            "u_p": mann_whitney_p(a, b),
            "u_p_new_vs_original": mann_whitney_p(original, new),
        }
    if not per:
        raise ValueError("no grown matrices with new entries in this checkpoint")
    return {
        **{k: float(np.mean([v[k] for v in per.values()])) for k in ("noc", "u_p", "u_p_new_vs_original")},
        "reading": reading,
        "per_matrix": per,
    }


def trajectory(up, noc_values, perf=None, t=None, standardize: bool = True) -> dict:
    """Everything section 5 / appendices C-D compute from a series of snapshots of one growth run.
    `standardize` picks correlation (default, as Table 5) or covariance PCA."""
    up, noc_values = np.asarray(up, dtype=np.float64), np.asarray(noc_values, dtype=np.float64)
    out: dict = {"u_p_pct": relative_change(up), "noc_pct": relative_change(noc_values), "R": radius(up, noc_values)}
    n = up.size
    t = np.arange(n, dtype=np.float64) if t is None else np.asarray(t, dtype=np.float64)
    if n >= 5:
        out["harmonic"] = harmonic_regression(t, out["R"])
        out["fisher"] = fisher_g(out["R"])
    if perf is not None and n >= 3:
        X = state_rows(up, noc_values, perf)
        p = pooled_pca([X], standardize)
        out["perf_pct"] = X[:, 2]
        out["pca"] = {**p, "z": p["z_runs"][0]}
        out.update({f"R_{k}": v for k, v in grassmann_distances(out["pca"]["z"]).items()})
    return out
