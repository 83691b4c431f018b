"""`nexus plot`: loss curves of existing training runs (train and validation loss against tokens,
training FLOPs and wall time, growth steps marked), as one PNG and one CSV holding every plotted point.

A run is read from what training leaves in its directory: metrics.jsonl (losses, growth events, the
parameter count and, for runs since it was recorded, the elapsed wall time), config.yaml (batch shape
and the model at the run's last start) and checkpoint/config.json (the final, possibly grown, model).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..train.hooks import Hook
from .curves import read_metrics, train_flops_per_token

CSV_COLUMNS = ["run", "series", "step", "tokens", "flops", "wall_s", "loss"]


def find_run_dir(path: str) -> Path:
    """A run directory (holding metrics.jsonl), or a checkpoint inside one -> the run directory."""
    p = Path(path)
    for cand in (p, p.parent):
        if (cand / "metrics.jsonl").is_file():
            return cand
    raise ConfigError(f"RUN={path!r} holds no metrics.jsonl (valid: a `nexus train` run directory, or a checkpoint "
                      "inside one)")


def _model_configs(run: Path) -> list[RunConfig]:
    """The configs a run's directory knows: config.yaml (the model at the last start) and the final
    checkpoint's (the model after any growth)."""
    from ..checkpoint import read_config

    out = []
    if (run / "config.yaml").is_file():
        out.append(RunConfig.load_yaml(run / "config.yaml", flag=f"{run}/config.yaml"))
    if (run / "checkpoint" / "config.json").is_file():
        out.append(read_config(run / "checkpoint"))
    if not out:
        raise ConfigError(f"RUN={str(run)!r} has neither config.yaml nor checkpoint/config.json (valid: a `nexus "
                          "train` run directory)")
    return out


def _flops_per_token(configs: list[RunConfig], params: int | None) -> tuple[float, bool]:
    """(training FLOPs per token of the model with `params` parameters, exact?). The segment's model is
    the known config of the nearest parameter count; a count that matches none within 1% (a middle growth of
    several) is scaled from the nearest by the parameter ratio, and marked inexact."""
    from ..analysis.param_formula import count

    known = []
    for c in configs:  # an ungrown run's two configs hold one model: measured once (a meta-device build)
        same = next((k for k, m in zip(known, configs) if (m.model, m.data.seq_len) == (c.model, c.data.seq_len)), None)
        known.append(same or (count(c.model)["total"], train_flops_per_token(c.model, c.data.seq_len)[0]))
    if params is None:  # the run logged no step of that model (grown before this run began)
        return known[-1][1], False
    n, f = min(known, key=lambda k: abs(k[0] - params))
    if abs(n - params) <= 0.01 * params:
        return f, True
    return f * params / n, False


def read_run(path: str, name: str) -> dict:
    """-> {name, dir, train: [...], val: [...], growth: [...], notes}; each point has step, tokens, flops and
    wall_s (None where not recorded), train and val points also the loss."""
    run = find_run_dir(path)
    rows = read_metrics(run / "metrics.jsonl")
    configs = _model_configs(run)
    tc, seq_len = configs[0].train, configs[0].data.seq_len
    world = next((int(r["world"]) for r in rows if "world" in r), None)
    notes = []
    tokens_per_step = tc.batch_size * tc.grad_accum * seq_len * (world or 1)
    last = next((r for r in reversed(rows) if "tokens_seen" in r and r.get("step")), None)
    if world is None and last is not None and last["tokens_seen"] > 1.5 * last["step"] * tokens_per_step:
        notes.append(f"{name}: the world size is not recorded and the run trained on more tokens than one process "
                     "takes: tokens and FLOPs assume one process")
    # growths logged by this run, and those its checkpoint records (a `nexus grow` before this run began)
    recorded = [int(g["step"]) for c in configs for g in c.growth_history if isinstance(g.get("step"), int)]
    growth_steps = sorted({int(r["step"]) for r in rows if r.get("event") == "growth"} | set(recorded))
    # FLOPs per token by segment between growths, from the parameter count the records logged there
    seg_params: dict[int, int] = {}
    for r in rows:
        if "params" in r and r.get("event") is None:
            seg = sum(1 for g in growth_steps if int(r["step"]) > g)
            seg_params.setdefault(seg, int(r["params"]))
    seg_fpt = []
    for seg in range(len(growth_steps) + 1):
        f, exact = _flops_per_token(configs, seg_params.get(seg))
        seg_fpt.append(f)
        if not exact:
            where = (f"before step {growth_steps[seg]}" if seg < len(growth_steps) else
                     f"after step {growth_steps[-1]}" if growth_steps else "throughout")
            notes.append(f"{name}: training FLOPs {where} are estimated from another of its models (that model's "
                         "config is not stored in this run: it was trained elsewhere, or grown in between)")
    bounds = [0] + growth_steps

    def flops_at(step: int) -> float:
        total = 0.0
        for i, start in enumerate(bounds):
            end = bounds[i + 1] if i + 1 < len(bounds) else step
            total += max(0, min(step, end) - start) * tokens_per_step * seg_fpt[i]
        return total

    def point(r: dict, key: str) -> dict:
        s = int(r["step"])
        return {"step": s, "tokens": s * tokens_per_step, "flops": flops_at(s), "wall_s": r.get("elapsed_s"),
                "loss": float(r[key])}

    train, val = {}, {}
    for r in rows:
        if "step" not in r or r.get("event") is not None:
            continue
        if "loss" in r and not r.get("skipped"):
            train[int(r["step"])] = point(r, "loss")  # a resumed run rewrites steps: the last record wins
        if "val_loss" in r:
            val[int(r["step"])] = point(r, "val_loss")
    points = sorted([*train.values(), *val.values()], key=lambda p: p["step"])

    def growth_point(g: int) -> dict:  # its wall time: the first record at or after it (none lie between)
        wall = next((p["wall_s"] for p in points if p["step"] >= g), None)
        return {"step": g, "tokens": g * tokens_per_step, "flops": flops_at(g), "wall_s": wall}

    if not train and not val:
        raise ConfigError(f"RUN={path!r}: its metrics.jsonl has no loss yet (valid: a run that logged a step)")
    if any(p["wall_s"] is None for p in [*train.values(), *val.values()]):
        notes.append(f"{name}: wall time not recorded in (part of) its metrics.jsonl (runs before nexus logged "
                     "elapsed_s): left out of the wall-time panel")
    return {"name": name, "dir": str(run), "train": [train[s] for s in sorted(train)],
            "val": [val[s] for s in sorted(val)], "growth": [growth_point(g) for g in growth_steps], "notes": notes}


def run_names(paths: list[str]) -> list[str]:
    """Each run's directory name, or its path where two runs share a name."""
    dirs = [find_run_dir(p) for p in paths]
    names = [d.name for d in dirs]
    return [str(d) if names.count(n) > 1 else n for d, n in zip(dirs, names)]


def curves_csv(runs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in runs:
        for series in ("train", "val"):
            for p in r[series]:
                w.writerow([r["name"], series, p["step"], p["tokens"], f"{p['flops']:.6g}",
                            "" if p["wall_s"] is None else f"{p['wall_s']:.3f}", f"{p['loss']:.6f}"])
        for g in r["growth"]:
            w.writerow([r["name"], "growth", g["step"], g["tokens"], f"{g['flops']:.6g}",
                        "" if g["wall_s"] is None else f"{g['wall_s']:.3f}", ""])
    return buf.getvalue()


PANELS = (("tokens", "tokens processed"), ("flops", "training FLOPs (3 x forward, analytic)"),
          ("wall_s", "wall time (s)"))


def plot_runs(runs: list[dict], path: Path, title: str | None = None) -> None:
    """Three panels (loss vs tokens, FLOPs, wall time): per run a thin train line and a marked validation
    line in one colour, its growth steps as dashed vertical lines."""
    from ..figures import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        for ax, (key, _) in zip(axes, PANELS):
            tr = [p for p in r["train"] if p[key] is not None]
            va = [p for p in r["val"] if p[key] is not None]
            if tr:
                ax.plot([p[key] for p in tr], [p["loss"] for p in tr], "-", color=c, lw=1, alpha=0.55)
            if va:
                ax.plot([p[key] for p in va], [p["loss"] for p in va], "o-", color=c, lw=2, ms=4)
            for g in r["growth"]:
                if g[key] is not None:
                    ax.axvline(g[key], color=c, ls="--", lw=1)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[i % len(colors)], lw=2, label=r["name"]) for i, r in enumerate(runs)]
    handles += [Line2D([], [], color="black", lw=1, alpha=0.55, label="train loss"),
                Line2D([], [], color="black", lw=2, marker="o", ms=4, label="validation loss"),
                Line2D([], [], color="black", ls="--", lw=1, label="growth")]
    for ax, (key, label) in zip(axes, PANELS):
        ax.set_xlabel(label, fontsize=11)
        ax.set_ylabel("loss (nats per token)", fontsize=11)
        ax.grid(alpha=0.3)
        if key == "wall_s" and not any(p["wall_s"] is not None for r in runs for p in r["train"] + r["val"]):
            ax.text(0.5, 0.5, "wall time not recorded\nin these runs", ha="center", va="center", transform=ax.transAxes)
    axes[0].legend(handles=handles, fontsize=9, loc="upper right")
    fig.suptitle(title or "loss of " + ", ".join(r["name"] for r in runs), fontsize=12)
    fig.tight_layout()
    save_figure(fig, path)


CURVE_FILES = ("loss_curve.png", "loss_curve.csv")  # in train/run_dir.RUN_FILES too: --overwrite removes them


class LossCurveHook(Hook):
    """`nexus train` draws its own curve at the end: loss_curve.png and loss_curve.csv in the run directory,
    as `nexus plot RUN` draws them (the whole run, earlier resumed parts included)."""

    priority = -50  # after the final evaluation and checkpoint (their records are in), before the console's last lines

    def on_fit_end(self, trainer, result):
        if not trainer.is_main:
            return
        from ..atomic import write_text_atomic

        run = read_run(str(trainer.out_dir), trainer.out_dir.name)
        png, csv_path = (trainer.out_dir / name for name in CURVE_FILES)
        plot_runs([run], png)
        write_text_atomic(csv_path, curves_csv([run]))
        from ..train.run_dir import record_run_files

        record_run_files(trainer.out_dir)  # the run's own files from now on (a resume rewrites, --overwrite removes them)
        result["curve"] = str(png)
        trainer.say(f"loss curve: {png} (points in {csv_path.name})")
