"""PNG plots for experiments (matplotlib with the non-interactive Agg backend)."""

from __future__ import annotations

from pathlib import Path

from ..figures import pyplot, save_figure

COLORS = {"grown": "tab:blue", "scratch": "tab:gray", "small": "tab:orange", "scratch-steplaw": "tab:purple"}


def mean_curve(curves: list[list[dict]], xkey: str, ykey: str) -> tuple[list[float], list[float]]:
    """Pointwise mean over seeds of curves evaluated at the same steps (cut to the shortest)."""
    n = min(len(c) for c in curves)
    xs = [sum(c[i][xkey] for c in curves) / len(curves) for i in range(n)]
    ys = [sum(c[i][ykey] for c in curves) / len(curves) for i in range(n)]
    return xs, ys


def plot_progressive(r: dict, out_dir: Path) -> list[str]:
    """loss_vs_flops.png and loss_vs_tokens.png (each seed faint, the mean bold, growth point marked) and,
    when diagnostics were logged, diagnostics.png; returns their paths."""
    plt = pyplot()
    out_dir = Path(out_dir)
    paths = []
    seeds = list(r["per_seed"].values())
    names = list(seeds[0]["runs"])
    for xkey, fname, xlabel, grow_x in (
        ("flops", "loss_vs_flops.png", "training FLOPs", r["grow_at_flops"]),
        ("tokens", "loss_vs_tokens.png", "training tokens", r["grow_at_tokens"]),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for name in names:
            color = COLORS.get(name, "tab:green")
            curves = [ps["runs"][name]["val_curve"] for ps in seeds]
            for c in curves:
                ax.plot([p[xkey] for p in c], [p["val_loss"] for p in c], "-", color=color, alpha=0.25, lw=1)
            xs, ys = mean_curve(curves, xkey, "val_loss")
            label = {
                "grown": f"grown ({r['method']})",
                "scratch": f"scratch {r['large']['shape']}",
                "small": f"small only {r['small']['shape']}",
            }.get(name, name)
            ax.plot(xs, ys, "o-", color=color, ms=3, lw=2, label=f"{label}, mean of {len(seeds)} seeds")
        what = (
            ", ".join(c.split(".")[-1] for c in r.get("growth_changes", [])[:2])
            or f"{r['small']['shape']} -> {r['large']['shape']}"
        )
        ax.axvline(grow_x, color="tab:red", ls="--", lw=1, label=f"growth ({what})")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation loss (faint: each seed, bold: mean)")
        ax.set_title(f"progressive: {r['method']}, seeds {', '.join(map(str, r['seeds']))}", fontsize=10)
        _zoom_y(ax, r)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        save_figure(fig, out_dir / fname)
        paths.append(str(out_dir / fname))
    diag = _plot_diagnostics(r, out_dir / "diagnostics.png")
    return paths + ([diag] if diag else [])


def _plot_diagnostics(r: dict, path: Path) -> str | None:
    """Symmetry lock and per-layer activation RMS ratio over the post-growth steps (SPARKLING Fig. 4)."""
    diags = [ps["runs"]["grown"]["diagnostics"] for ps in r["per_seed"].values()]
    lock = [d["symmetry_lock"] for d in diags]
    rms = [d["rms_ratio"] for d in diags]
    has_lock, has_rms = all(lock), all(rms)
    if not (has_lock or has_rms):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    if has_lock:
        for c in lock:
            ax.plot([p["step"] for p in c], [p["mean"] for p in c], color="tab:blue", alpha=0.25, lw=1)
        xs, ys = mean_curve(lock, "step", "mean")
        ax.plot(xs, ys, color="tab:blue", lw=2, label="mean cosine copy vs source")
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no copied channels", ha="center", va="center", transform=ax.transAxes)
    ax.set(xlabel="step", ylabel="symmetry lock (1 = locked)", title="symmetry lock after growth")
    ax.grid(alpha=0.3)
    ax = axes[1]
    if has_rms:
        n_layers = len(rms[0][0]["per_layer"])
        cmap = plt.get_cmap("viridis")
        for layer in range(n_layers):
            color = cmap(layer / max(n_layers - 1, 1))
            per_seed = [[{"step": p["step"], "v": p["per_layer"][layer]} for p in c] for c in rms]
            for c in per_seed:
                ax.plot([p["step"] for p in c], [p["v"] for p in c], color=color, alpha=0.2, lw=1)
            xs, ys = mean_curve(per_seed, "step", "v")
            ax.plot(xs, ys, color=color, lw=2, label="embedding" if layer == 0 else f"block {layer}")
        ax.axhline(1.0, color="k", ls=":", lw=1)
        ax.legend(fontsize=7)
    ax.set(xlabel="step", ylabel="RMS grown / RMS before growth", title="activation RMS ratio per layer")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    return str(path)


def _zoom_y(ax, r: dict) -> None:
    """Early losses (~5.5 for bytes) would flatten the interesting end; show from the worst late val loss."""
    vals = [p["val_loss"] for ps in r["per_seed"].values() for run in ps["runs"].values() for p in run["val_curve"][1:]]
    if vals:
        lo, hi = min(vals), max(vals)
        ax.set_ylim(lo - 0.05 * (hi - lo + 1e-9), hi + 0.1 * (hi - lo + 1e-9))


def plot_compare(rows: list[dict], metric: str, out_path: Path) -> str:
    """Per preset its mean as a point with the 95% t-interval (mean +- std where one seed gives no interval) and
    every seed as a small dot. Points, not bars: a bar's length reads as its value, so a bar on an axis that does
    not start at 0 overstates differences; the loss axis is zoomed to the values and its cut is drawn as a break
    on the axis and said in the label."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows) + 2.5), 4.5))
    for i, row in enumerate(rows):
        has_ci = row.get("ci_low") is not None and row.get("ci_high") is not None
        lo, hi = (row["ci_low"], row["ci_high"]) if has_ci else (row["mean"] - row["std"], row["mean"] + row["std"])
        ax.errorbar(
            [i],
            [row["mean"]],
            yerr=[[row["mean"] - lo], [hi - row["mean"]]],
            fmt="o",
            color="tab:blue",
            ms=8,
            capsize=6,
            lw=2,
            zorder=3,
            label="mean, 95% t-interval" if i == 0 else None,
        )
        ax.plot(
            [i + 0.12] * len(row["values"]),
            row["values"],
            ".",
            color="0.35",
            ms=6,
            zorder=2,
            label="one seed" if i == 0 else None,
        )
    ax.set_xticks(range(len(rows)), [row["preset"] for row in rows], rotation=20, ha="right", fontsize=10)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ends = [v for row in rows for v in row["values"]]
    ends += [e for row in rows for e in (row.get("ci_low"), row.get("ci_high")) if e is not None]
    cut = False
    if ends:
        lo, hi = min(ends), max(ends)
        pad = 0.15 * (hi - lo + 1e-3)
        bottom = lo - pad
        cut = bottom > 0  # zooming in: the axis no longer starts at 0 and says so
        ax.set_ylim(bottom if cut else min(0.0, bottom), hi + pad)
    ax.set_ylabel(metric + (" (axis cut: does not start at 0)" if cut else ""), fontsize=11)
    if cut:  # the usual break mark, two short slanted strokes across the bottom of the y axis
        for dy in (0.0, 0.025):
            ax.plot(
                [-0.02, 0.02],
                [0.01 + dy, 0.04 + dy],
                transform=ax.transAxes,
                color="k",
                lw=1.2,
                clip_on=False,
                gid="axis-break",
            )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, frameon=False)
    fig.tight_layout()
    save_figure(fig, out_path)
    return str(out_path)
