"""`nexus plot`: loss curves of existing training runs (train and validation loss against tokens,
training FLOPs and wall time, growth steps marked), as one PNG and one CSV holding every plotted point.

A run is read from what training leaves in its directory: metrics.jsonl (losses, growth events, the
parameter count and, for runs since it was recorded, the elapsed wall time), config.yaml (batch shape
and the model at the run's last start) and checkpoint/config.json (the final, possibly grown, model).
"""

from __future__ import annotations

import copy
import csv
import io
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..config_migration import load_config_file
from ..train.hooks import HOOK_KINDS, Hook
from .curves import read_metrics, train_flops_per_token

CSV_COLUMNS = ["run", "series", "step", "tokens", "flops", "wall_s", "loss"]


def find_run_dir(path: str) -> Path:
    """A run directory (holding metrics.jsonl), or a checkpoint inside one -> the run directory."""
    p = Path(path)
    for cand in (p, p.parent):
        if (cand / "metrics.jsonl").is_file():
            return cand
    raise ConfigError(
        f"RUN={path!r} holds no metrics.jsonl (valid: a `nexus train` run directory, or a checkpoint inside one)"
    )


def _model_configs(run: Path) -> list[RunConfig]:
    """The configs a run's directory knows: config.yaml (the model at the last start) and the final
    checkpoint's (the model after any growth)."""
    from ..checkpoint import read_config

    out = []
    if (run / "config.yaml").is_file():
        out.append(load_config_file(run / "config.yaml", flag=f"{run}/config.yaml"))
    if (run / "checkpoint" / "config.json").is_file():
        out.append(read_config(run / "checkpoint"))
    if not out:
        raise ConfigError(
            f"RUN={str(run)!r} has neither config.yaml nor checkpoint/config.json (valid: a `nexus "
            "train` run directory)"
        )
    return out


def _flops_per_token(configs: list[RunConfig], params: int | None) -> tuple[float, bool]:
    """(training FLOPs per token of the model with `params` parameters, exact?). The segment's model is
    the known config of the nearest parameter count; a count that matches none within 1% (a middle growth of
    several) is scaled from the nearest by the parameter ratio, and marked inexact."""
    from ..analysis.param_formula import count

    known: list[tuple[int, float]] = []
    for c in configs:  # an ungrown run's two configs hold one model: measured once (a meta-device build)
        same = next((k for k, m in zip(known, configs) if (m.model, m.data.seq_len) == (c.model, c.data.seq_len)), None)
        known.append(same or (count(c.model)["total"], train_flops_per_token(c.model, c.data.seq_len)[0]))
    if params is None:  # the run logged no step of that model (grown before this run began)
        return known[-1][1], False
    n, f = min(known, key=lambda k: abs(k[0] - params))
    if abs(n - params) <= 0.01 * params:
        return f, True
    return f * params / n, False


def _models_before_growths(configs: list[RunConfig]) -> dict[int, RunConfig]:
    """{growth step: the run's config with the model trained up to that growth}, from the growth records that
    keep it (`model_before`, written since nexus recorded it). A run resumed from a `nexus grow` checkpoint
    logged no step of that model, so its parameter count alone cannot say what the tokens before the growth
    cost."""
    from ..config_migration import saved_run_config

    out: dict[int, RunConfig] = {}
    for c in configs:
        for g in c.growth_history:
            if isinstance(g.get("step"), int) and isinstance(g.get("model_before"), dict) and g["step"] not in out:
                out[g["step"]] = saved_run_config({**c.to_dict(), "model": g["model_before"], "growth_history": []})
    return out


def read_run(path: str, name: str, configs: list[RunConfig] | None = None) -> dict:
    """-> {name, dir, train: [...], val: [...], growth: [...], notes}; each point has step, tokens, flops and
    wall_s (None where not recorded), train and val points also the loss. configs: the run's configs at its
    last start and at its end when the caller holds them (the training run itself), else read from its files."""
    run = find_run_dir(path)
    rows = read_metrics(run / "metrics.jsonl")
    configs = configs or _model_configs(run)
    tc, seq_len = configs[0].train, configs[0].data.seq_len
    world = next((int(r["world"]) for r in rows if "world" in r), None)
    notes = []
    tokens_per_step = tc.batch_size * tc.grad_accum * seq_len * (world or 1)
    last = next((r for r in reversed(rows) if "tokens_seen" in r and r.get("step")), None)
    if world is None and last is not None and last["tokens_seen"] > 1.5 * last["step"] * tokens_per_step:
        notes.append(
            f"{name}: the world size is not recorded and the run trained on more tokens than one process "
            "takes: tokens and FLOPs assume one process"
        )
    # growths logged by this run, and those its checkpoint records (a `nexus grow` before this run began)
    recorded = [int(g["step"]) for c in configs for g in c.growth_history if isinstance(g.get("step"), int)]
    growth_steps = sorted({int(r["step"]) for r in rows if r.get("event") == "growth"} | set(recorded))
    # FLOPs per token by segment between growths, from the parameter count the records logged there
    seg_params: dict[int, int] = {}
    for r in rows:
        if "params" in r and r.get("event") is None:
            seg = sum(1 for g in growth_steps if int(r["step"]) > g)
            seg_params.setdefault(seg, int(r["params"]))
    before = _models_before_growths(configs)
    seg_fpt = []
    for seg in range(len(growth_steps) + 1):
        if seg < len(growth_steps) and growth_steps[seg] in before:  # the record keeps that model: exact
            b = before[growth_steps[seg]]
            f, exact = train_flops_per_token(b.model, b.data.seq_len)[0], True
        else:
            f, exact = _flops_per_token(configs, seg_params.get(seg))
        seg_fpt.append(f)
        if not exact:
            where = (
                f"before step {growth_steps[seg]}"
                if seg < len(growth_steps)
                else f"after step {growth_steps[-1]}"
                if growth_steps
                else "throughout"
            )
            notes.append(
                f"{name}: training FLOPs {where} are estimated from another of its models (that model's "
                "config is not stored in this run: it was trained elsewhere, or grown in between)"
            )
    bounds = [0] + growth_steps

    def flops_at(step: int) -> float:
        total = 0.0
        for i, start in enumerate(bounds):
            end = bounds[i + 1] if i + 1 < len(bounds) else step
            total += max(0, min(step, end) - start) * tokens_per_step * seg_fpt[i]
        return total

    def point(r: dict, key: str) -> dict:
        s = int(r["step"])
        return {
            "step": s,
            "tokens": s * tokens_per_step,
            "flops": flops_at(s),
            "wall_s": r.get("elapsed_s"),
            "loss": float(r[key]),
        }

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
        notes.append(
            f"{name}: wall time not recorded in (part of) its metrics.jsonl (runs before nexus logged "
            "elapsed_s): left out of the wall-time panel"
        )
    return {
        "name": name,
        "dir": str(run),
        "train": [train[s] for s in sorted(train)],
        "val": [val[s] for s in sorted(val)],
        "growth": [growth_point(g) for g in growth_steps],
        "notes": notes,
    }


def run_names(paths: list[str]) -> list[str]:
    """Each run's directory name, or its path where two runs share a name."""
    dirs = [find_run_dir(p) for p in paths]
    names = [d.name for d in dirs]
    return [str(d) if names.count(n) > 1 else n for d, n in zip(dirs, names)]


def smoothing_weight(n_points: int) -> float:
    """The EMA weight `nexus plot` uses by default: none up to 30 points, then 1 - 30/n, so any run is
    smoothed over about a thirtieth of its length (0.9 for 300 logged steps, 0.99 for 3,000)."""
    return max(0.0, 1.0 - 30.0 / max(n_points, 1))


def ema(values: list[float], weight: float) -> list[float]:
    """Exponential moving average with the start-up bias removed (as TensorBoard's smoothing): point i is
    sum_j w^(i-j) (1-w) v_j / (1 - w^(i+1)), so the first points are not pulled toward 0."""
    out, acc, norm = [], 0.0, 0.0
    for v in values:
        acc = weight * acc + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out.append(acc / norm if norm else v)
    return out


def with_smoothing(runs: list[dict], weight: float | None = None) -> list[dict]:
    """Each run with a "train_ema" series: its train losses smoothed by `ema` (weight None: by
    `smoothing_weight` of its own length; 0: a copy of the raw curve)."""
    out = []
    for r in runs:
        w = smoothing_weight(len(r["train"])) if weight is None else weight
        smooth = ema([p["loss"] for p in r["train"]], w)
        out.append({**r, "train_ema": [{**p, "loss": v} for p, v in zip(r["train"], smooth)], "smoothing": w})
    return out


def curves_csv(runs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in runs:
        for series in ("train", "train_ema", "val"):
            for p in r.get(series, []):
                w.writerow(
                    [
                        r["name"],
                        series,
                        p["step"],
                        p["tokens"],
                        f"{p['flops']:.6g}",
                        "" if p["wall_s"] is None else f"{p['wall_s']:.3f}",
                        f"{p['loss']:.6f}",
                    ]
                )
        for g in r["growth"]:
            w.writerow(
                [
                    r["name"],
                    "growth",
                    g["step"],
                    g["tokens"],
                    f"{g['flops']:.6g}",
                    "" if g["wall_s"] is None else f"{g['wall_s']:.3f}",
                    "",
                ]
            )
    return buf.getvalue()


PANELS = (
    ("tokens", "tokens processed"),
    ("flops", "training FLOPs (3 x forward, analytic)"),
    ("wall_s", "wall time (s)"),
)


def plot_runs(
    runs: list[dict],
    path: Path,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    enter: bool = False,
    dpi: int | None = None,
) -> None:
    """Three panels (loss vs tokens, FLOPs, wall time), made to be read on a slide: per run one colour,
    the raw train loss faint behind its EMA (`with_smoothing`), the validation loss on top, thick with
    markers, growth steps as dashed vertical lines; log-scaled axes on request. enter, dpi (None: 150) and the
    format (the path's suffix): see nexus.figures.save_figure."""
    from ..figures import pyplot, save_figure

    runs = [r if "train_ema" in r else with_smoothing([r])[0] for r in runs]
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        for ax, (key, _) in zip(axes, PANELS):
            tr = [p for p in r["train"] if p[key] is not None]
            sm = [p for p in r["train_ema"] if p[key] is not None]
            va = [p for p in r["val"] if p[key] is not None]
            if tr:
                ax.plot([p[key] for p in tr], [p["loss"] for p in tr], "-", color=c, lw=0.8, alpha=0.18, zorder=1)
                ax.plot([p[key] for p in sm], [p["loss"] for p in sm], "-", color=c, lw=1.6, alpha=0.85, zorder=2)
            if va:
                ax.plot(
                    [p[key] for p in va],
                    [p["loss"] for p in va],
                    "o-",
                    color=c,
                    lw=2.8,
                    ms=6,
                    zorder=4,
                    markeredgecolor="white",
                    markeredgewidth=0.8,
                )
            for g in r["growth"]:
                if g[key] is not None:
                    ax.axvline(g[key], color=c, ls="--", lw=1.2, alpha=0.8, zorder=0)
    from matplotlib.lines import Line2D

    ema_label = "train loss, EMA-smoothed" if any(r["smoothing"] for r in runs) else "train loss"
    handles = [Line2D([], [], color=colors[i % len(colors)], lw=3, label=r["name"]) for i, r in enumerate(runs)]
    handles += [
        Line2D([], [], color="black", lw=2.8, marker="o", ms=6, label="validation loss"),
        Line2D([], [], color="black", lw=1.6, alpha=0.85, label=ema_label),
        Line2D([], [], color="black", lw=0.8, alpha=0.25, label="train loss, raw"),
        Line2D([], [], color="black", ls="--", lw=1.2, label="growth"),
    ]
    for ax, (key, label) in zip(axes, PANELS):
        ax.set_xlabel(label + (" (log)" if logx else ""), fontsize=13)
        ax.set_ylabel("loss (nats per token)" + (" (log)" if logy else ""), fontsize=13)
        ax.tick_params(labelsize=11)
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if logx:
            ax.set_xscale("log")
        if logy:  # a loss spans well under a decade: plain numbers on every tick, not 4 x 10^0
            from matplotlib.ticker import FuncFormatter, LogLocator

            ax.set_yscale("log")
            ax.yaxis.set_minor_locator(LogLocator(subs=(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)))
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.yaxis.grid(True, which="minor", alpha=0.15)
        if key == "wall_s" and not any(p["wall_s"] is not None for r in runs for p in r["train"] + r["val"]):
            ax.text(
                0.5,
                0.5,
                "wall time not recorded\nin these runs",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=12,
            )
    fig.legend(handles=handles, fontsize=11, loc="lower center", ncol=min(len(handles), 6), frameon=False)
    fig.suptitle(title or "loss of " + ", ".join(r["name"] for r in runs), fontsize=15)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    save_figure(fig, path, enter=enter, dpi=dpi)


CURVE_FILES = ("loss_curve.png", "loss_curve.csv")  # in train/run_dir.RUN_FILES too: --overwrite removes them


@HOOK_KINDS.register("loss_curve")
class LossCurveHook(Hook):
    """The run draws its own curve at the end: loss_curve.png and loss_curve.csv in the run directory, as
    `nexus plot RUN` draws them (the whole run, earlier resumed parts included). `nexus train` asks for it
    in the config it writes (a `{kind: loss_curve}` entry in train.hooks)."""

    priority = -50  # after the final evaluation and checkpoint (their records are in), before the console's last lines

    def __init__(self):
        self.start_cfg = None  # the config this run started with (what it writes as config.yaml)

    def on_fit_start(self, trainer):
        self.start_cfg = copy.deepcopy(trainer.cfg)

    def on_fit_end(self, trainer, result):
        if not trainer.is_main:
            return
        from ..atomic import write_text_atomic

        # the configs the trainer holds (at the start, and the possibly grown one it saved): not read back
        configs = [self.start_cfg, trainer.cfg] if self.start_cfg is not None else None
        run = with_smoothing([read_run(str(trainer.out_dir), trainer.out_dir.name, configs)])[0]
        png, csv_path = (trainer.out_dir / name for name in CURVE_FILES)
        # the run's own files, entered in its manifest as they are renamed (a resume rewrites, --overwrite removes them)
        plot_runs([run], png, enter=True)
        write_text_atomic(csv_path, curves_csv([run]), enter=True)
        result["curve"] = str(png)
        trainer.say(f"loss curve: {png} (points in {csv_path.name})")
