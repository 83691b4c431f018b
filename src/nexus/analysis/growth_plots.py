"""`nexus analyze growth --checkpoints A B C ...`: growth dynamics over checkpoints of one grown run,
plus the plots (R(t) with its harmonic fit, the PCA-plane trajectory, R_G / R_E).

Per checkpoint: the latest growth record's `old_shapes` tells which entries of each grown matrix are
pretrained (leading corner) and which are new; NOC and U_P compare the two (growth_stats), averaged
over the grown matrices. Performance is 1/PPL on validation batches (the paper uses benchmark
accuracy; we have no benchmarks offline), so Perf% = relative change of 1/PPL.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..figures import pyplot, save_figure
from . import growth_stats as gs


def _grown_record(cfg, where: str) -> dict:
    from ..config import ConfigError

    rec = next((r for r in reversed(cfg.growth_history) if r.get("old_shapes")), None)
    if rec is None:
        raise ConfigError(f"--checkpoints: {where!r} has no growth record with old_shapes "
                          "(valid: checkpoints written by `nexus grow` or grown during training, and later ones of that run)")
    return rec


def _val_loss(model, cfg, tok, n_batches: int, batch_size: int) -> float:
    from ..eval.perplexity import perplexity

    return perplexity(model, cfg, tok, n_batches, batch_size)["val_loss"]


def collect(paths: list[str], n_batches: int = 4, batch_size: int = 4, evaluate: bool = True) -> dict:
    """Snapshot statistics of each checkpoint (same growth event required)."""
    from ..checkpoint import load_checkpoint, load_trainer_state
    from ..config import ConfigError

    rows, ref_step = [], None
    for i, p in enumerate(paths):
        model, cfg, tok = load_checkpoint(p)
        rec = _grown_record(cfg, p)
        if ref_step is None:
            ref_step = rec.get("step", 0)
        elif rec.get("step", 0) != ref_step:
            raise ConfigError(f"--checkpoints: {p!r} comes from a growth at step {rec.get('step')} but the first from "
                              f"step {ref_step} (valid: snapshots after one growth event)")
        sd = {k: v for k, v in model.state_dict().items()}
        snap = gs.snapshot_stats(sd, rec["old_shapes"])
        st = load_trainer_state(p) or {}
        row = {"checkpoint": str(p), "step": int(st.get("step", ref_step)), "tokens_seen": int(st.get("tokens_seen", 0)),
               "u_p": snap["u_p"], "noc": snap["noc"], "matrices": len(snap["per_matrix"])}
        if evaluate:
            row["val_loss"] = _val_loss(model, cfg, tok, n_batches, batch_size)
            row["ppl"] = math.exp(min(row["val_loss"], 50))
        rows.append(row)
    return {"growth_step": ref_step, "snapshots": rows}


def analyze(paths: list[str], out_dir: Path, n_batches: int = 4, batch_size: int = 4) -> dict:
    data = collect(paths, n_batches, batch_size)
    rows = data["snapshots"]
    up = [r["u_p"] for r in rows]
    noc = [r["noc"] for r in rows]
    t = np.array([r["step"] - data["growth_step"] for r in rows], dtype=np.float64)
    perf = [1.0 / r["ppl"] for r in rows]
    result: dict = {**data, "t_steps_since_growth": t.tolist()}
    if len(rows) >= 2:
        traj = gs.trajectory(up, noc, perf if len(rows) >= 3 else None, t if len(set(t.tolist())) == len(t) else None)
        result["u_p_pct"], result["noc_pct"], result["R"] = (traj[k].tolist() for k in ("u_p_pct", "noc_pct", "R"))
        if "harmonic" in traj:
            result["harmonic"], result["fisher"] = traj["harmonic"], traj["fisher"]
        if "pca" in traj:
            p = traj["pca"]
            result["pca"] = {"components": p["components"].tolist(), "explained_ratio": p["explained_ratio"].tolist(),
                             "z": p["z"].tolist()}
            result["R_grassmann"], result["R_euclidean"] = traj["R_grassmann"].tolist(), traj["R_euclidean"].tolist()
        if sum(1 for r in traj["R"] if r > 0) >= 3:
            result["scaling_fit"] = gs.scaling_fit(traj["R"], [r["ppl"] for r in rows])
        # scalars first: the CLI prints these as its summary
        result["n_snapshots"], result["R_last"] = len(rows), result["R"][-1]
        for key, src, field in (("harmonic_period_steps", "harmonic", "period"), ("harmonic_r2", "harmonic", "r2"),
                                ("harmonic_p", "harmonic", "p"), ("fisher_g", "fisher", "g"), ("fisher_p", "fisher", "p"),
                                ("scaling_w", "scaling_fit", "w"), ("scaling_r2", "scaling_fit", "r2")):
            if src in result:
                result[key] = result[src][field]
        result["plots"] = plot_growth(result, out_dir)
    return result


def plot_growth(result: dict, out_dir: Path) -> list[str]:
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
        ax.plot(tt, h["A0"] + h["A1"] * np.cos(2 * np.pi * h["frequency"] * tt + h["phi"]), "r-",
                label=f"harmonic fit R²={h['r2']:.3f}, p={h['p']:.3f}")
        ax.legend(fontsize=7)
    ax.set_xlabel("steps since growth")
    ax.set_ylabel("radius R")
    ax.set_title("R(t) = sqrt(U_P%² + NOC%²)")
    fig.tight_layout()
    files.append(save_figure(fig, out_dir / "growth_radius.png", dpi=120))
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
        files.append(save_figure(fig, out_dir / "growth_trajectory.png", dpi=120))
    return files


def growth_kind(src, out_dir: Path, args) -> dict:
    """`nexus analyze growth` entry (cli/analyze.py dispatcher)."""
    from ..config import ConfigError

    paths = getattr(args, "checkpoints", None) or ([args.checkpoint] if args.checkpoint else [])
    if len(paths) < 2:
        raise ConfigError(f"--checkpoints={paths!r} (valid: two or more checkpoints of one grown run, in training order)")
    return analyze(paths, out_dir, args.batches, args.batch_size)
