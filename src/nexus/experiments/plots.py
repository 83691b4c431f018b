"""PNG plots for experiments (matplotlib with the non-interactive Agg backend)."""
from __future__ import annotations

from pathlib import Path

from ..figures import pyplot, save_figure


def plot_progressive(r: dict, out_dir: Path) -> list[str]:
    """loss_vs_flops.png (growth point marked) and loss_vs_tokens.png; returns their paths."""
    plt = pyplot()
    out_dir = Path(out_dir)
    paths = []
    for xkey, fname, xlabel, grow_x in (("flops", "loss_vs_flops.png", "training FLOPs", r["grow_at_flops"]),
                                         ("tokens", "loss_vs_tokens.png", "training tokens", r["grow_at_tokens"])):
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
        for name, color in (("scratch", "tab:gray"), ("grown", "tab:blue")):
            run = r["runs"][name]
            tc = run["train_curve"]
            ax.plot([p[xkey] for p in tc], [p["loss"] for p in tc], color=color, alpha=0.3, lw=1)
            vc = run["val_curve"]
            label = f"{name} ({r['method']})" if name == "grown" else f"scratch {r['large']['shape']}"
            ax.plot([p[xkey] for p in vc], [p["val_loss"] for p in vc], "o-", color=color, ms=3, label=label + " val")
        what = ", ".join(c.split(".")[-1] for c in r.get("growth_changes", [])[:2]) or f"{r['small']['shape']} -> {r['large']['shape']}"
        ax.axvline(grow_x, color="tab:red", ls="--", lw=1, label=f"growth ({what})")
        ax.axhline(r["target_val_loss"], color="tab:gray", ls=":", lw=1)
        hit = r["grown_flops_to_target"] if xkey == "flops" else r["grown_tokens_to_target"]
        if hit is not None:
            ax.plot([hit], [r["target_val_loss"]], "*", color="tab:green", ms=11, label="reaches scratch final loss")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("loss (faint: train, dots: validation)")
        ax.set_title(f"progressive: {r['method']}", fontsize=10)
        _zoom_y(ax, r)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        save_figure(fig, out_dir / fname)
        paths.append(str(out_dir / fname))
    return paths


def _zoom_y(ax, r: dict) -> None:
    """Early losses (~5.5 for bytes) would flatten the interesting end; show from the worst val loss."""
    vals = [p["val_loss"] for run in r["runs"].values() for p in run["val_curve"]]
    if vals:
        lo, hi = min(vals), max(vals)
        ax.set_ylim(lo - 0.05 * (hi - lo + 1e-9), hi + 0.1 * (hi - lo + 1e-9))


def plot_compare(rows: list[dict], metric: str, out_path: Path) -> str:
    """Mean +- std bars per preset, seeds as dots."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(rows) + 2), 4.0), dpi=100)
    for i, row in enumerate(rows):
        ax.bar(i, row["mean"], yerr=row["std"], color="tab:blue", alpha=0.5, capsize=4)
        ax.plot([i] * len(row["values"]), row["values"], "k.", ms=6)
    ax.set_xticks(range(len(rows)), [row["preset"] for row in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    vals = [v for row in rows for v in row["values"]]
    if vals:
        lo, hi = min(vals), max(vals)
        ax.set_ylim(lo - 0.3 * (hi - lo + 1e-3), hi + 0.3 * (hi - lo + 1e-3))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out_path)
    return str(out_path)
