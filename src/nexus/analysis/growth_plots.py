"""`nexus analyze growth --checkpoints A B C ...`: growth dynamics over checkpoints of one grown run,
plus the plots (R(t) with its harmonic fit, the PCA-plane trajectory, R_G / R_E).

Per checkpoint: the latest growth record's `old_shapes` tells which entries of each grown matrix are
pretrained (leading corner) and which are new. By default NOC and U_P compare the base matrix (the
pretrained corner of the first checkpoint, taken at the growth) with the whole grown matrix;
`--noc-reading corner` compares the corner with the new entries instead (growth_stats.NOC_READINGS),
averaged over the grown matrices. Repeat `--checkpoints` once per grown run (e.g. 240->300M,
240->380M, 240->440M) to pool the PCA and the scaling-law fit across runs (Table 5, Fig. 3). \
Performance is 1/PPL on validation batches (the paper uses benchmark
accuracy; we have no benchmarks offline), so Perf% = relative change of 1/PPL.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..figures import pyplot, save_figure
from . import growth_stats as gs
from . import register_analysis


def _grown_record(cfg, where: str) -> dict:
    from ..config import ConfigError

    rec = next((r for r in reversed(cfg.growth_history) if r.get("old_shapes")), None)
    if rec is None:
        raise ConfigError(
            f"--checkpoints: {where!r} has no growth record with old_shapes "
            "(valid: checkpoints written by `nexus grow` or grown during training, and later ones of that run)"
        )
    return rec


def _val_loss(model, cfg, tok, n_batches: int, batch_size: int) -> float:
    from ..eval.perplexity import perplexity

    return perplexity(model, cfg, tok, n_batches, batch_size)["val_loss"]


def collect(
    paths: list[str], n_batches: int = 4, batch_size: int = 4, evaluate: bool = True, reading: str = "whole"
) -> dict:
    """Snapshot statistics of each checkpoint (same growth event required). The first checkpoint is
    taken at the growth: its grown matrices' pretrained corners are the base matrices that the
    default NOC / U_P reading compares every later snapshot's whole matrix with."""
    from ..checkpoint import load_checkpoint, load_trainer_state
    from ..config import ConfigError

    rows, ref_step, base = [], None, None
    for _i, p in enumerate(paths):
        model, cfg, tok = load_checkpoint(p)
        rec = _grown_record(cfg, p)
        if ref_step is None:
            ref_step = rec.get("step", 0)
        elif rec.get("step", 0) != ref_step:
            raise ConfigError(
                f"--checkpoints: {p!r} comes from a growth at step {rec.get('step')} but the first from "
                f"step {ref_step} (valid: snapshots after one growth event)"
            )
        sd = {k: v for k, v in model.state_dict().items()}
        if base is None:
            base = gs.base_weights(sd, rec["old_shapes"])
        snap = gs.snapshot_stats(sd, rec["old_shapes"], base=base, reading=reading)
        st = load_trainer_state(p) or {}
        row = {
            "checkpoint": str(p),
            "step": int(st.get("step", ref_step)),
            "tokens_seen": int(st.get("tokens_seen", 0)),
            "u_p": snap["u_p"],
            "u_p_new_vs_original": snap["u_p_new_vs_original"],
            "noc": snap["noc"],
            "matrices": len(snap["per_matrix"]),
        }
        if evaluate:
            row["val_loss"] = _val_loss(model, cfg, tok, n_batches, batch_size)
            row["ppl"] = math.exp(min(row["val_loss"], 50))
        rows.append(row)
    return {"growth_step": ref_step, "noc_reading": reading, "snapshots": rows}


def _pca_json(p: dict, z) -> dict:
    return {
        "components": p["components"].tolist(),
        "explained_ratio": p["explained_ratio"].tolist(),
        "standardized": bool(p["standardized"]),
        "z": np.asarray(z).tolist(),
    }


def analyze_run(
    paths: list[str], n_batches: int = 4, batch_size: int = 4, reading: str = "whole", standardize: bool = True
) -> dict:
    """Everything for one growth run: per-snapshot NOC / U_P / PPL, R(t), harmonic fit, Fisher's g,
    the run's own PCA (standardized by default, as Table 5) and the scaling-law fit."""
    data = collect(paths, n_batches, batch_size, reading=reading)
    rows = data["snapshots"]
    up = [r["u_p"] for r in rows]
    noc = [r["noc"] for r in rows]
    t = np.array([r["step"] - data["growth_step"] for r in rows], dtype=np.float64)
    perf = [1.0 / r["ppl"] for r in rows]
    result: dict = {**data, "t_steps_since_growth": t.tolist()}
    if len(rows) >= 2:
        traj = gs.trajectory(
            up,
            noc,
            perf if len(rows) >= 3 else None,
            t if len(set(t.tolist())) == len(t) else None,
            standardize=standardize,
        )
        result["u_p_pct"], result["noc_pct"], result["R"] = (traj[k].tolist() for k in ("u_p_pct", "noc_pct", "R"))
        if "harmonic" in traj:
            result["harmonic"], result["fisher"] = traj["harmonic"], traj["fisher"]
        if "pca" in traj:
            result["pca"] = _pca_json(traj["pca"], traj["pca"]["z"])
            result["R_grassmann"], result["R_euclidean"] = traj["R_grassmann"].tolist(), traj["R_euclidean"].tolist()
        if sum(1 for r in traj["R"] if r > 0) >= 3:
            result["scaling_fit"] = gs.scaling_fit(traj["R"], [r["ppl"] for r in rows])
        # scalars first: the CLI prints these as its summary
        result["n_snapshots"], result["R_last"] = len(rows), result["R"][-1]
        for key, src, field in (
            ("harmonic_period_steps", "harmonic", "period"),
            ("harmonic_r2", "harmonic", "r2"),
            ("harmonic_p", "harmonic", "p"),
            ("fisher_g", "fisher", "g"),
            ("fisher_p", "fisher", "p"),
            ("scaling_w", "scaling_fit", "w"),
            ("scaling_r2", "scaling_fit", "r2"),
        ):
            if src in result:
                result[key] = result[src][field]
    return result


def pooled(runs: list[dict], standardize: bool = True) -> dict:
    """Cross-scale aggregation (Fig. 3, Table 5): one PCA over every run's (U_P%, NOC%, Perf%) rows
    after its growth step, and one fit ln PPL = w |ln R| + b over every run's (R, PPL) points."""
    out: dict = {"n_runs": len(runs), "n_points": sum(len(r["snapshots"]) for r in runs)}
    rows = [
        gs.state_rows(
            [s["u_p"] for s in r["snapshots"]],
            [s["noc"] for s in r["snapshots"]],
            [1.0 / s["ppl"] for s in r["snapshots"]],
        )
        for r in runs
        if len(r["snapshots"]) >= 2
    ]
    if sum(len(x) - 1 for x in rows) >= 3:
        p = gs.pooled_pca(rows, standardize)
        out["pca"] = {**_pca_json(p, np.vstack(p["z_runs"])), "z_runs": [z.tolist() for z in p["z_runs"]]}
        out["pca_explained_pc12"] = float(p["explained_ratio"][:2].sum())
    R = [x for r in runs for x in r.get("R", [])]
    ppl = [s["ppl"] for r in runs if "R" in r for s in r["snapshots"]]
    if sum(1 for x in R if x > 0) >= 3:
        out["scaling_fit"] = gs.scaling_fit(R, ppl)
        out["scaling_w"], out["scaling_b"], out["scaling_r2"] = (out["scaling_fit"][k] for k in ("w", "b", "r2"))
    return out


def analyze(
    runs: list[list[str]],
    out_dir: Path,
    n_batches: int = 4,
    batch_size: int = 4,
    reading: str = "whole",
    standardize: bool = True,
) -> dict:
    """One run: that run's analysis (the JSON keys of `analyze_run`). Several runs (e.g. 240->300M,
    240->380M, 240->440M): {"runs": [...], "pooled": cross-run PCA and scaling fit}, plus plots."""
    if runs and isinstance(runs[0], str):  # one run given as a flat list of paths
        runs = [runs]
    results = [analyze_run(paths, n_batches, batch_size, reading, standardize) for paths in runs]
    if len(results) == 1:
        result = results[0]
        if "R" in result:
            result["plots"] = plot_growth(result, out_dir)
        return result
    agg = pooled(results, standardize)
    result = {
        k: agg[k]
        for k in ("n_runs", "n_points", "pca_explained_pc12", "scaling_w", "scaling_b", "scaling_r2")
        if k in agg
    }
    result.update({"noc_reading": reading, "runs": results, "pooled": agg})
    result["plots"] = [
        f for i, r in enumerate(results) if "R" in r for f in plot_growth(r, out_dir, prefix=f"run{i}_")
    ] + plot_pooled(results, agg, out_dir)
    return result


def plot_growth(result: dict, out_dir: Path, prefix: str = "") -> list[str]:
    plt = pyplot()
    out_dir = Path(out_dir)
    files = []
    t, R = np.array(result["t_steps_since_growth"]), np.array(result["R"])
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ppl = [r.get("ppl") for r in result["snapshots"]]
    sc = ax.scatter(t, R, c=ppl if all(p is not None for p in ppl) else None, cmap="viridis", zorder=3)
    if all(p is not None for p in ppl):
        fig.colorbar(sc, ax=ax, label="PPL")
    h = result.get("harmonic")
    if h:
        tt = np.linspace(t.min(), t.max(), 200)
        ax.plot(
            tt,
            h["A0"] + h["A1"] * np.cos(2 * np.pi * h["frequency"] * tt + h["phi"]),
            "r-",
            label=f"harmonic fit R²={h['r2']:.3f}, p={h['p']:.3f}",
        )
        ax.legend(fontsize=7)
    ax.set_xlabel("steps since growth")
    ax.set_ylabel("radius R")
    ax.set_title("R(t) = sqrt(U_P%² + NOC%²)")
    fig.tight_layout()
    files.append(save_figure(fig, out_dir / f"{prefix}growth_radius.png"))
    if "pca" in result:
        z = np.array(result["pca"]["z"])
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        axes[0].plot(z[:, 0], z[:, 1], "-o", ms=3)
        axes[0].scatter(z[0, 0], z[0, 1], c="red", zorder=3, label="growth")
        axes[0].set_xlabel("PC1")
        axes[0].set_ylabel("PC2")
        axes[0].legend(fontsize=7)
        axes[0].set_title("trajectory in the PCA plane")
        axes[1].plot(t, result["R_grassmann"], "-o", ms=3, label="R_G (Grassmann)")
        axes[1].plot(t, result["R_euclidean"], "-s", ms=3, label="R_E (PCA plane)")
        axes[1].set_xlabel("steps since growth")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        files.append(save_figure(fig, out_dir / f"{prefix}growth_trajectory.png"))
    return files


def plot_pooled(runs: list[dict], agg: dict, out_dir: Path) -> list[str]:
    """Fig. 3 (ln PPL against |ln R| over every run, with the pooled fit) and the pooled PCA plane."""
    plt = pyplot()
    files = []
    fit = agg.get("scaling_fit")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for i, r in enumerate(runs):
        pts = [(abs(math.log(R)), math.log(s["ppl"])) for R, s in zip(r.get("R", []), r["snapshots"]) if R > 0]
        if pts:
            ax.scatter(*zip(*pts), s=14, label=f"run {i}")
    if fit:
        lo, hi = ax.get_xlim()
        xs = np.linspace(lo, hi, 50)
        ax.plot(xs, fit["w"] * xs + fit["b"], "k-", label=f"w={fit['w']:.4f}, b={fit['b']:.3f}, R²={fit['r2']:.3f}")
    ax.set_xlabel("|ln R|")
    ax.set_ylabel("ln PPL")
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.append(save_figure(fig, Path(out_dir) / "growth_scaling_pooled.png"))
    if "pca" in agg:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        for i, z in enumerate(agg["pca"]["z_runs"]):
            z = np.asarray(z)
            ax.plot(z[:, 0], z[:, 1], "-o", ms=3, label=f"run {i}")
        ev = agg["pca"]["explained_ratio"]
        ax.set_xlabel(f"PC1 ({ev[0]:.1%})")
        ax.set_ylabel(f"PC2 ({ev[1]:.1%})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(save_figure(fig, Path(out_dir) / "growth_pca_pooled.png"))
    return files


@register_analysis(
    "growth",
    "growth dynamics over --checkpoints A B C [--checkpoints D E F ...]: NOC, U_P, R, "
    "harmonic fit, Fisher g, standardized PCA; several runs pooled for PCA and scaling fit",
)
def growth_kind(src, out_dir: Path, args) -> dict:
    """`nexus analyze growth`. Each --checkpoints group is one grown
    run in training order; give the flag once per run for cross-scale aggregation."""
    from ..config import ConfigError

    groups = getattr(args, "checkpoints", None) or ([[args.checkpoint]] if args.checkpoint else [])
    groups = [g if isinstance(g, list) else [g] for g in groups]
    for g in groups:
        if len(g) < 2:
            raise ConfigError(
                f"--checkpoints={g!r} (valid: two or more checkpoints of one grown run, in training order; "
                "repeat --checkpoints once per run)"
            )
    if not groups:
        raise ConfigError(
            "--checkpoints is missing (valid: two or more checkpoints of one grown run, in training order)"
        )
    import sys

    print(
        f"nexus analyze growth: {sum(map(len, groups))} checkpoints of {len(groups)} run(s): loading each and scoring "
        f"{args.batches} validation batch(es) of {args.batch_size} on it, then NOC, U_P, R, PCA and the fits",
        file=sys.stderr,
        flush=True,
    )
    return analyze(
        groups,
        out_dir,
        args.batches,
        args.batch_size,
        getattr(args, "noc_reading", "whole"),
        getattr(args, "pca", "standardized") == "standardized",
    )
