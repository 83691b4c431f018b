"""Growth at a regime where the answer means something (issue 29): SPARKLING's recipe on one axis, a tuned
scratch baseline, a corpus that does not repeat within a run, grown variants branched from one small
checkpoint per seed, and the share of the small-to-scratch gap closed as the comparable number. Its runs are
planned by the planner `nexus experiment progressive` uses (nexus.experiments.study_plan); this script names the
regime (SCALES), its methods and the --arch pair as data, and holds the sweep, estimate and results code.

The regime (`--scale full`, the default):
  small model   4 layers, d_model 64, 4 heads of 16, FFN inner 128, byte tokens, the paper's recipe (AdamW wd 0.1
                on every parameter, per-head QK-norm; cosine, warmup 3%, final lr ratio 0.01; rho 1.3, tau as the
                paper's 250/31,800 of the post-growth steps), 16 x 128 tokens per step
  growth        at 40 tokens per parameter of the small model (~7.2M tokens), then trained to twice that; every
                grown variant of a seed branches from that seed's one small checkpoint (paired by construction)
  default set   small alone, scratch (FFN 256) at its tuned lr, sparkling (copy), sparkling-random, naive-copy;
                seeds 0, 1, 2; every evaluation on 32 x 16 x 128 = 65,536 fixed validation tokens
  --ablations   adds sparkling-no-rewarmup, sparkling-symmetric, sparkling-hidden, sparkling-both (and scratch at
                the hidden shapes); the methods are those of `nexus experiment progressive --list`
  --arch        adds Nexusformer vs TokenFormer (item 5): nexus-rank-regime and tokenformer-regime, Q/K/V projections
                of equal size (15,488 -> 31,744 parameters each) at the same d 64 shape and recipe, each grown 2x from
                its OWN small base (own prefix, own growth step at 40 tokens per parameter, own tuned scratch), so
                each one's share of its own gap closed is growth's contribution and the small-vs-small and
                scratch-vs-scratch differences are the architectures' gap

Three commands, in this order (each resumable: run it again after an interruption and finished runs are
skipped, unfinished ones continue from their last step checkpoint):

    python benchmarks/studies/progressive_regime.py --estimate --data stdlib       \
# the plan and its time; trains nothing
    python benchmarks/studies/progressive_regime.py --lr-sweep --data stdlib       \
# 5 log-spaced lrs, one seed -> OUT/lr_sweep.json
    python benchmarks/studies/progressive_regime.py --data stdlib                  \
# the benchmark (reads OUT/lr_sweep.json)
    python benchmarks/studies/progressive_regime.py --smoke --out /tmp/regime      \
# a tiny scale that exercises all of it

`--data` is any `data.source` (the stdlib corpus, a text file, ...). A corpus whose training split is smaller
than the tokens one run draws would repeat within the run, and is refused with one line. The lr sweep trains
the small model and the scratch model of every shape used, at the full budget, one seed; the best lr by final
validation loss is used (the small model's for small and grown runs, as SPARKLING keeps the pre-expansion lr;
scratch's for scratch). A best lr at the edge of the grid is printed as such. `--untuned` runs without a sweep,
every run at the preset lr, and says so in the results.

Prints one line per finished run, then the table (final loss, share of the gap closed with its Fieller 95%
interval, paired differences between methods, compute to reach scratch's loss, eq. 29 at equal tokens
labelled separately), also written to OUT/<scale>/results.json and table.md, and the validation curves to
OUT/<scale>/loss_vs_tokens.png (each seed faint, the mean bold, the post-growth half zoomed).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402

# WIDE_LR is re-exported: the study scripts and tests use R.WIDE_LR
from nexus.experiments.study_plan import (  # noqa: E402
    WIDE_LR,  # noqa: F401
    Scale,
    _sans_dir,
    describe_run,
    plan_branched,
    plan_lr_grid,
    shape_key,
    timed_config,
)

DEFAULT_METHODS = ("sparkling", "sparkling-random", "naive-copy")
ABLATIONS = ("sparkling-no-rewarmup", "sparkling-symmetric", "sparkling-hidden", "sparkling-both")
# --arch (item 5): Nexusformer vs TokenFormer, each grown from its own base; name -> (the library method it shrinks,
# its growth spec at d 64, its small projection sizes at d 64). Sizes and their matching: arch_methods().
ARCH_SHAPES = {
    "nexus-rank-regime": (
        "nexus-rank-matched",
        {"delta_m": 24, "delta_a": 80},
        {"model.projection.rank_m": 72, "model.projection.rank_a": 80},
    ),
    "tokenformer-regime": ("tokenformer-matched", {"add_tokens": 127}, {"model.projection.param_tokens": 121}),
}
DEFAULT_SEEDS = (0, 1, 2)
# 5 log-spaced peak lrs, a factor 2 apart, around the preset's 3e-3
DEFAULT_LRS = (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)
MIN_SWEEP_LRS = 5
# the regimes: tokens per parameter at growth (or a fixed growth step), batch, sequence length, evaluation batches,
# evaluations per run
SCALES = {
    s.name: s
    for s in (
        Scale("full", batch=16, seq=128, eval_batches=32, evals=20, tokens_per_param=40.0, min_val_tokens=65536),
        # the main job's budget and shapes (`nexus experiment progressive`: 150 steps, growth at 75, 8 eval batches on
        # the embedded corpus): its lr sweep is `--scale main --data embedded --lr-sweep`
        Scale("main", batch=16, seq=128, eval_batches=8, evals=10, grow_steps=75),
        # a few steps of every run: proves the machinery (branching, sweep, statistics), not the science
        Scale("smoke", batch=2, seq=32, eval_batches=2, evals=4, grow_steps=4),
        # issue 47's sparkling-credible study: growth after 20 tokens per parameter, as many steps after it
        Scale("credible", batch=16, seq=128, eval_batches=32, evals=20, tokens_per_param=20.0, min_val_tokens=65536),
        # issue 47 item 3's nexus-rank-vs-tokenformer study: growth after 10 tokens per parameter of each small model
        Scale("arch", batch=16, seq=128, eval_batches=32, evals=20, tokens_per_param=10.0, min_val_tokens=65536),
    )
}
SWEEP_FILE = "lr_sweep.json"
PAPER_GAP_CLOSED = "0.84-0.90"


class Refused(SystemExit):
    """Bad input: one line (printed by main), exit code 2."""

    def __init__(self, msg: str):
        self.line = msg
        super().__init__(2)


# ----------------------------------------------------------------------------- the plan (data for the shared planner)
def arch_methods() -> dict:
    """Issue 29 item 5's pair at the regime's shape (d 64, 4 heads of 16, FFN 128, the same recipe), each grown 2x
    in its Q/K/V projections from its own base. Their *-matched namesakes are sized at d 128; at d 64 the same
    matching holds exactly: per projection Nexus-Rank has d*M + M*A + A*d parameters (Nexusformer Sec. 3),
    TokenFormer 2*n*d (n parameter tokens): M 72, A 80 -> 15,488 = n 121; grown to M 96, A 160 -> 31,744 = n 248.
    The benchmark's own methods (study_plan's variants), not the library's: the main job and `--list` stay as
    they are."""
    from nexus.experiments import progressive as P

    shape = P.methods()["sparkling"].overrides
    return {
        name: P.method_variant(
            src, name=name, spec=spec, overrides={**shape, **sizes}, lrs={}, note="regime: d 64, own base"
        )
        for name, (src, spec, sizes) in ARCH_SHAPES.items()
    }


def plan_regime(
    methods: list[str],
    seeds: list[int],
    scale_name: str,
    data: str,
    out: Path,
    lrs: dict | None,
    tokens_per_param: float | None = None,
    post_mult: int = 1,
    ns: str = "",
) -> dict:
    """The regime's plan: `methods` (library methods, `<method>@wide-lr` arms and the --arch pair) on `seeds` at a
    scale of SCALES (study_plan.plan_branched: bases, branch points, tuned scratch; trains nothing)."""
    return plan_branched(
        methods, seeds, SCALES[scale_name], data, out, lrs, tokens_per_param, post_mult, ns, arch_methods()
    )


# ----------------------------------------------------------------------------- corpus
def corpus_check(plan: dict, refuse: bool = True) -> dict:
    """Training tokens of the corpus against the tokens one run draws; refuse a corpus that would repeat
    (refuse=False, for --estimate: say why the run would refuse it instead)."""
    try:
        return _corpus_check(plan)
    except Refused as e:
        if refuse:
            raise
        return {"problem": e.line}


def _corpus_check(plan: dict) -> dict:
    from nexus.config import ConfigError
    from nexus.config_migration import saved_run_config
    from nexus.data.loader import DataModule

    cfg = saved_run_config(next(iter(plan["runs"].values()))["cfg"])
    try:
        dm = DataModule(cfg.data, seed=0)
    except ConfigError as e:
        raise Refused(f"--data={plan['data']!r}: {e}") from None
    n_train, n_val = len(dm.train), len(dm.val)
    drawn = plan["token_budget"]
    passes = drawn / n_train
    if passes > 1:
        raise Refused(
            f"--data={plan['data']!r} has {n_train:,} training tokens, and one run draws {drawn:,}: the "
            f"corpus would repeat {passes:.2f}x within a run (valid: a corpus of >= {drawn:,} training "
            f"tokens{'' if plan['data'] == 'stdlib' else ', e.g. the stdlib corpus'})"
        )
    if n_val < SCALES[plan["scale"]].min_val_tokens:
        raise Refused(
            f"--data={plan['data']!r} has {n_val:,} validation tokens (valid: >= {plan['eval_tokens']:,} "
            f"for the fixed final evaluation)"
        )
    return {
        "train_tokens": n_train,
        "val_tokens": n_val,
        "tokens_per_run": drawn,
        "share_of_split_drawn": passes,
        "sampler": "nexus.data.sampler visits every training window once per epoch in a seeded order, so a run "
        "that draws no more tokens than the training split sees no token twice",
    }


# ----------------------------------------------------------------------------- running
# the ledger runner (nexus.experiments.ledger): skips what the ledger holds, runs the rest `workers` at a time
from nexus.experiments.ledger import execute  # noqa: E402


# ----------------------------------------------------------------------------- results
def curve(ledger, name: str, segments: list[dict], prefix: str | None = None) -> list[dict]:
    """Validation points (tokens, FLOPs, loss) from the ledger; a branch's curve starts with its prefix's points
    (those before the branch point: the branch's own curve starts where the prefix's ends)."""
    from nexus.experiments.curves import cumulative_flops

    own = ledger.curve(name)
    start = own[0]["step"] if own else float("inf")
    pts = [p for p in ledger.curve(prefix) if p["step"] < start] if prefix is not None else []
    return [{**p, "flops": cumulative_flops(p["tokens"], segments)} for p in pts + own]


def summarize(plan: dict, ledger) -> dict:
    from nexus.config_migration import saved_run_config
    from nexus.experiments.curves import (
        active_params,
        cumulative_flops,
        first_crossing,
        train_flops_per_token,
        value_at,
    )
    from nexus.experiments.report import eq29
    from nexus.experiments.stats import describe, gap_closed, paired

    tps, seeds, methods, ns = plan["tokens_per_step"], plan["seeds"], plan["methods"], plan.get("ns", "")
    runs = plan["runs"]
    model = {k: saved_run_config(r["cfg"]).model for k, r in runs.items()}
    seq = plan_seq(plan)
    fpt = {k: train_flops_per_token(m, seq)[0] for k, m in model.items()}
    final = {k: ledger.final_val_loss(k) for k in runs if runs[k]["kind"] != "prefix"}
    per_method = {}
    for m in methods:
        first = runs[f"{ns}seed{seeds[0]}/{m}"]
        base = plan["bases"][first["base"]]
        small_run, prefix_run = base["small_run"], base["prefix_run"]
        d_e, budget = base["grow_step"] * tps, base["token_budget"]
        sc_name = f"scratch-{first['shape']}"
        large_fpt = fpt[f"{ns}seed{seeds[0]}/{sc_name}"]
        small_fpt = fpt[f"{ns}seed{seeds[0]}/{small_run}"]
        segs = [
            {"start_tokens": 0.0, "flops_per_token": small_fpt},
            {"start_tokens": d_e, "flops_per_token": large_fpt},
        ]
        g = [final[f"{ns}seed{sd}/{m}"] for sd in seeds]
        sc = [final[f"{ns}seed{sd}/{sc_name}"] for sd in seeds]
        sm = [final[f"{ns}seed{sd}/{small_run}"] for sd in seeds]
        reach = []
        for sd in seeds:
            pts = curve(ledger, f"{ns}seed{sd}/{m}", segs, f"{ns}seed{sd}/{prefix_run}")
            hit = first_crossing(
                [p["flops"] for p in pts], [p["val_loss"] for p in pts], final[f"{ns}seed{sd}/{sc_name}"]
            )
            reach.append(None if hit is None else hit / (large_fpt * budget))
        got = [v for v in reach if v is not None]
        # scratch's loss at the grown run's total FLOPs (its prefix on the small model is cheaper), read off scratch's
        # own validation curve: the equal-FLOPs comparison
        grown_flops = cumulative_flops(budget, segs)
        at_flops = []
        for sd in seeds:
            pts = ledger.curve(f"{ns}seed{sd}/{sc_name}")
            at_flops.append(value_at([p["tokens"] * large_fpt for p in pts], [p["val_loss"] for p in pts], grown_flops))
        n_small = active_params(model[f"{ns}seed{seeds[0]}/{small_run}"])
        n_large = active_params(model[f"{ns}seed{seeds[0]}/{sc_name}"])
        per_method[m] = {
            "base": first["base"],
            "shape": first["shape"],
            "grown": describe(g),
            "scratch": describe(sc),
            "small": describe(sm),
            "gap_closed": gap_closed(sm, g, sc),
            "grown_minus_scratch": paired(g, sc),
            "grown_minus_small": paired(g, sm),
            "compute_to_scratch_loss": {"per_seed": reach, "reached": len(got), "of": len(reach), **describe(got)},
            "eq29_equal_tokens": eq29(n_small, n_large, d_e, budget)["flops_saved"],
            "per_seed": {"grown": g, "scratch": sc, "small": sm},
            "grown_flops": grown_flops,
            "scratch_at_grown_flops": at_flops,
        }
    between = {}
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            between[f"{a} - {b}"] = paired(per_method[a]["per_seed"]["grown"], per_method[b]["per_seed"]["grown"])
    # two bases of equal size (Nexus-Rank vs TokenFormer): the architectures' own gap at equal tokens,
    # small against small
    # and scratch against scratch, apart from what each one's growth contributes (its gap closed above)
    architectures = {}
    names = list(plan["bases"])
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if plan["bases"][a]["small_params"] != plan["bases"][b]["small_params"]:
                continue  # only bases matched in size train on equal tokens and compare as architectures
            ra, rb = (next(m for m in methods if per_method[m]["base"] == x) for x in (a, b))
            architectures[f"{a} - {b}"] = {
                "methods": [ra, rb],
                "small": paired(per_method[ra]["per_seed"]["small"], per_method[rb]["per_seed"]["small"]),
                "scratch": paired(per_method[ra]["per_seed"]["scratch"], per_method[rb]["per_seed"]["scratch"]),
                "grown": paired(per_method[ra]["per_seed"]["grown"], per_method[rb]["per_seed"]["grown"]),
            }
    return {"methods": per_method, "between_methods": between, "between_bases": architectures}


def plot_regime(plan: dict, ledger, out: Path) -> str:
    """loss_vs_tokens.png: one row per base; left the whole run, right the post-growth half zoomed; small, its
    scratch and every grown method, each seed faint and the seeds' mean bold, growth marked. A branch's curve
    starts with its prefix's points, so every line of a seed shares the first half exactly."""
    from nexus.experiments.plots import mean_curve
    from nexus.figures import pyplot, save_figure

    plt = pyplot()
    tps, seeds, ns = plan["tokens_per_step"], plan["seeds"], plan.get("ns", "")
    bases = plan["bases"]
    fig, axes = plt.subplots(len(bases), 2, figsize=(11, 3.8 * len(bases)), dpi=100, squeeze=False)
    palette = ["tab:blue", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    for row, (name, b) in zip(axes, bases.items()):
        grow_tokens = b["grow_step"] * tps
        # every scratch shape the base's methods grow to (the hidden-axis ablations have their own)
        shapes = list(dict.fromkeys(plan["runs"][f"{ns}seed{seeds[0]}/{m}"]["shape"] for m in b["methods"]))
        greys = ["tab:gray", "k", "silver"]
        lines = [("small alone" + ("" if name == "small" else f" ({name})"), b["small_run"], True, "tab:orange")]
        lines += [
            (f"scratch {sh}" + (" (tuned)" if plan["tuned"] else ""), f"scratch-{sh}", False, greys[i % len(greys)])
            for i, sh in enumerate(shapes)
        ]
        lines += [(m, m, True, palette[i % len(palette)]) for i, m in enumerate(b["methods"])]
        tail, late = [], []
        for label, run, branched, color in lines:
            curves = [
                curve(ledger, f"{ns}seed{sd}/{run}", [], f"{ns}seed{sd}/{b['prefix_run']}" if branched else None)
                for sd in seeds
            ]
            for ax in row:
                for c in curves:
                    ax.plot([p["tokens"] for p in c], [p["val_loss"] for p in c], "-", color=color, alpha=0.25, lw=1)
                xs, ys = mean_curve(curves, "tokens", "val_loss")
                # small alone dashed and on top: after growth naive copy can sit on it and would hide it
                small_line = run == b["small_run"]
                ax.plot(
                    xs,
                    ys,
                    "o--" if small_line else "o-",
                    color=color,
                    ms=2.5,
                    lw=2,
                    zorder=3 if small_line else 2,
                    label=f"{label}, mean of {len(seeds)}",
                )
            tail += [p["val_loss"] for c in curves for p in c if p["tokens"] >= grow_tokens]
            late += [p["val_loss"] for c in curves for p in c if p["tokens"] >= 0.1 * b["token_budget"]]
        for ax, title in zip(row, ("whole run", "after growth")):
            ax.axvline(grow_tokens, color="k", ls="--", lw=1, label="growth")
            ax.set(xlabel="training tokens", ylabel="validation loss", title=f"{name}: {title}")
            ax.grid(alpha=0.3)
        if late:  # the first evaluations (~5.5 nats for bytes) would flatten the rest
            row[0].set_ylim(min(late) - 0.02, max(late) + 0.05)
        if tail:  # the zoomed panel: the post-growth half, from its best to its worst point
            lo, hi = min(tail), max(tail)
            row[1].set_xlim(grow_tokens * 0.98, b["token_budget"] * 1.01)
            row[1].set_ylim(lo - 0.05 * (hi - lo + 1e-9), hi + 0.05 * (hi - lo + 1e-9))
        row[0].legend(fontsize=7)
    fig.suptitle(
        f"progressive regime ({plan['scale']}, {plan['data']}): seeds {', '.join(map(str, seeds))}, "
        f"evaluation on {plan['eval_tokens']:,} fixed tokens",
        fontsize=10,
    )
    fig.tight_layout()
    return save_figure(fig, out / "loss_vs_tokens.png")


def plan_seq(plan: dict) -> int:
    return next(iter(plan["runs"].values()))["cfg"]["data"]["seq_len"]


def render(plan: dict, summary: dict, corpus: dict, head: str) -> str:
    from nexus.experiments.stats import fmt, fmt_gap

    lines = [head, ""]
    for name, b in plan["bases"].items():
        lines.append(
            f"regime ({name}: {', '.join(b['methods'])}): small {b['small_params']:,} parameters, growth at "
            f"{b['tokens_per_param_at_growth']:.1f} tokens/param (step {b['grow_step']}), "
            f"{b['steps'] - b['grow_step']} steps after growth, {b['token_budget']:,} tokens per run"
        )
    lines += [
        f"re-warmup tau {plan['tau_rule']}; evaluation on {plan['eval_tokens']:,} fixed validation tokens; "
        f"seeds {', '.join(map(str, plan['seeds']))}",
        "lrs: "
        + (
            "tuned by the lr sweep: " + json.dumps(plan["lrs"])
            if plan["tuned"]
            else "UNTUNED (--untuned): every run at the preset lr"
        ),
        *sweep_lines(plan.get("sweep")),
        f"corpus {plan['data']}: {corpus['train_tokens']:,} training tokens; one run draws at most "
        f"{corpus['share_of_split_drawn']:.2f} of them, so no token is seen twice ({corpus['sampler']})",
        "",
        "| method | base | grown | scratch (its own) | small (its own) | share of the gap closed [95% CI] | "
        "grown - scratch (paired) | compute to reach scratch's loss (of scratch's) | eq. 29 saved at equal tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, r in summary["methods"].items():
        c = r["compute_to_scratch_loss"]
        reach = (
            "not reached" if not c["reached"] else f"{c['mean']:.3f}" + (f" +- {c['std']:.3f}" if c["n"] > 1 else "")
        )
        d = r["grown_minus_scratch"]
        lines.append(
            f"| {m} | {r['base']} | {fmt(r['grown'])} | {fmt(r['scratch'])} | {fmt(r['small'])} | "
            f"{fmt_gap(r['gap_closed'])} | {fmt(d['diff'])} p={_p(d['t_p'])} | {reach} ({c['reached']}/{c['of']} "
            f"seeds) | {100 * r['eq29_equal_tokens']:+.1f}% |"
        )
    lines += [
        "",
        f"SPARKLING's own share of the gap closed: {PAPER_GAP_CLOSED} (Table 1; grown ends above scratch).",
        "",
        "Paired differences between methods (grown final val loss, same seeds; methods of one base branch from "
        "the same small checkpoint):",
        "",
    ]
    for k, d in summary["between_methods"].items():
        lines.append(f"- {k}: {fmt(d['diff'])}; paired t p = {_p(d['t_p'])}, Wilcoxon p = {_p(d['wilcoxon_p'])}")
    if summary.get("between_bases"):
        lines += [
            "",
            "The base architectures' own gap (same seeds, equal tokens), apart from what growth contributes "
            "(each method's share of its own small-to-scratch gap above):",
            "",
        ]
        for k, d in summary["between_bases"].items():
            lines.append(
                f"- {k} ({' vs '.join(d['methods'])}): small {fmt(d['small']['diff'])}; scratch "
                f"{fmt(d['scratch']['diff'])}; grown {fmt(d['grown']['diff'])} (paired t p = "
                f"{_p(d['small']['t_p'])}, {_p(d['scratch']['t_p'])}, {_p(d['grown']['t_p'])})"
            )
    return "\n".join(lines) + "\n"


def sweep_lines(sweep: dict | None) -> list[str]:
    """The lr sweep behind a tuned result: final validation loss per lr and shape (one seed), and what it cost."""
    if not sweep:
        return []
    cost = sweep.get("cost", {})
    n = sum(len(rows) for rows in sweep["table"].values())
    lines = [
        f"lr sweep ({sweep['path']}): {n} runs, one seed (0), "
        f"{(cost.get('run_seconds') or 0) / 60:.0f} run-minutes, {(cost.get('wall_s') or 0) / 60:.0f} min wall"
    ]
    for shape, rows in sweep["table"].items():
        best = min(rows, key=lambda r: r["final_val_loss"])
        lines.append(
            f"  {shape}: "
            + ", ".join(f"{r['lr']:.3g} -> {r['final_val_loss']:.4f}" for r in rows)
            + f" (best {best['lr']:.3g})"
        )
    return lines


def _p(x) -> str:
    return "-" if x is None else f"{x:.3g}"


# ----------------------------------------------------------------------------- lr sweep
def plan_sweep(methods: list[str], scale_name: str, data: str, out: Path, lrs: list[float]) -> dict:
    """One seed, every lr, the small model of every base and the scratch model of every shape the methods use, at
    the full budget of their base."""
    return plan_lr_grid(
        methods,
        [0],
        lrs,
        SCALES[scale_name],
        data,
        out,
        variants=arch_methods(),
        name="{shape}/lr{lr:.3g}",
        where="lr-sweep/{shape}/lr{lr:.3g}",
    )


def read_sweep(path: Path, plan_key: dict) -> dict:
    if not path.is_file():
        raise Refused(
            f"--sweep={str(path)!r} does not exist (valid: run --lr-sweep first with the same --scale, "
            f"--data and methods, or pass --untuned)"
        )
    try:
        s = json.loads(path.read_text())
        key, _best = s["key"], s["best"]  # reading "best" checks the file has it (KeyError -> Refused)
    except (OSError, ValueError, KeyError) as e:
        raise Refused(
            f"--sweep={str(path)!r} is not an lr sweep result ({type(e).__name__}) (valid: the "
            f"{SWEEP_FILE} that --lr-sweep writes)"
        ) from None
    if key != plan_key:
        raise Refused(f"--sweep={str(path)!r} was swept for {key} (valid: a sweep of this plan, {plan_key})")
    return s  # "best": "small" / "<base>-small" and each scratch shape -> its best lr; "table": every run


def reuse_sweep_runs(plan: dict, methods: list[str], out: Path, sweep: dict) -> list[str]:
    """Point every benchmark run whose config equals a finished sweep run's at that run's directory: seed 0's scratch
    and small at their chosen lrs (the sweep's own seed; small is the prefix's continuation, and a bitwise resume
    makes it the same run as one trained straight through). The same config trains to the same result, so training
    it twice buys nothing. Returns the names reused. The chosen lrs were picked on those runs' validation losses, so
    seed 0 carries the sweep's selection either way."""
    from nexus.experiments.runs import is_done

    lrs = sorted({row["lr"] for rows in sweep.get("table", {}).values() for row in rows})
    if not lrs:
        return []
    swept = {}
    for r in plan_sweep(methods, plan["scale"], plan["data"], out, lrs)["runs"].values():
        if is_done(Path(r["cfg"]["train"]["out_dir"])):
            swept[_sans_dir(r["cfg"])] = r["cfg"]["train"]["out_dir"]
    reused = []
    for name, run in plan["runs"].items():
        src = swept.get(_sans_dir(run["cfg"]))
        if src is not None:
            run["cfg"]["train"]["out_dir"] = src
            run["reused_from"] = src
            reused.append(name)
    return reused


def sweep_key(plan: dict) -> dict:
    return {"scale": plan["scale"], "data": plan["data"], "token_budget": plan["token_budget"]}


# ----------------------------------------------------------------------------- estimate
def step_seconds(cfg: dict, steps: int, threads: int) -> tuple[float, float]:
    """(seconds per optimizer step, seconds per evaluation) of this run's model, timed in this process as CPU
    time: on a shared machine the wall clock measures the other jobs, CPU time what the step costs (with one
    thread per process, the wall time of an idle core)."""
    import tempfile

    import torch

    from nexus.config_migration import saved_run_config
    from nexus.train.trainer import Trainer

    torch.set_num_threads(threads)
    c = saved_run_config(copy.deepcopy(cfg))
    tc = c.train
    tc.steps, tc.schedule_steps = steps + 3, 0
    tc.drop_hook("growth")
    tc.eval_every, tc.save_every, tc.sample_every, tc.log_every = 0, 0, 0, 10**9
    with tempfile.TemporaryDirectory() as tmp:
        tc.out_dir = tmp
        tr = Trainer(c.validate(), quiet=True)
        for _ in range(3):
            tr.run_step()  # each a step as fit() takes it (hooks, counters); no eval, save or sample is due
        with StepTimer() as train:  # process CPU time: what one thread per run pays on idle cores
            for _ in range(steps):
                m = tr.run_step()
            float(m["loss"])
        with StepTimer() as evaluation:
            tr.evaluate()
        return train.elapsed.cpu / steps, evaluation.elapsed.cpu


def estimate(plan: dict, threads: int, workers: int, timing_steps: int, cost: dict | None = None) -> dict:
    """Per-step and per-evaluation cost of every distinct model timed here x each run's steps and evaluations.
    `cost` caches the timings by model across plans (the sweep's models are the benchmark's)."""
    cost = {} if cost is None else cost
    rows, total = [], 0.0
    for name, run in plan["runs"].items():
        d = describe_run(run, plan)
        if run.get("reused_from"):
            rows.append({"run": name, **d, "est_s": 0.0})
            continue
        cfg = timed_config(run, plan)
        key = json.dumps(cfg["model"], sort_keys=True)
        if key not in cost:
            cost[key] = step_seconds(cfg, timing_steps, threads)
        step_s, eval_s = cost[key]
        evals = max(1, d["steps"] // max(1, run["cfg"]["train"]["eval_every"] or d["steps"])) + 1
        sec = d["steps"] * step_s + evals * eval_s
        total += sec
        rows.append({"run": name, **d, "est_s": sec})
    est_s = {x["run"]: x["est_s"] for x in rows}

    def chain(name: str) -> float:  # a run and every run it branches from, up its chain (they run in sequence)
        after = plan["runs"][name]["after"]
        return est_s[name] + (chain(after) if after else 0.0)

    chains = {name: chain(name) for name in plan["runs"]}
    wall = max(total / max(1, workers), max(chains.values()))
    return {"rows": rows, "serial_s": total, "wall_s": wall}


def print_plan(plan: dict, est: dict | None, corpus: dict, say) -> None:
    for name, b in plan["bases"].items():
        say(
            f"plan: {plan['scale']} | base {name} ({', '.join(b['methods'])}) | small {b['small_params']:,} params | "
            f"growth at step {b['grow_step']} = {b['grow_step'] * plan['tokens_per_step']:,} tokens "
            f"({b['tokens_per_param_at_growth']:.1f} tokens/param) | "
            f"{b['steps']} steps = {b['token_budget']:,} tokens per "
            f"run | eval {plan['eval_tokens']:,} tokens | seeds {','.join(map(str, plan['seeds']))}"
        )
    if "problem" in corpus:
        say(f"corpus: a run would refuse it: {corpus['problem']}")
    else:
        say(
            f"corpus {plan['data']}: {corpus['train_tokens']:,} training / {corpus['val_tokens']:,} validation tokens; "
            f"one run draws {corpus['share_of_split_drawn']:.2f} of the training split (no token seen twice)"
        )
    say(f"{'run':34s} {'layers':>6s} {'d_model':>7s} {'FFN':>8s} {'lr':>8s} {'steps':>6s} {'tokens':>11s}  est (CPU)")
    rows = est["rows"] if est else [{"run": k, **describe_run(r, plan)} for k, r in plan["runs"].items()]
    for r in rows:
        run = plan["runs"][r["run"]]
        proj = shape_key(timed_config(run, plan)["model"]).split("-", 2)[2:]  # a projection other than Linear
        to = r.get("grows_to", {})
        d = f"{r['d_model']}" + (f"->{to['d_model']}" if to.get("d_model", r["d_model"]) != r["d_model"] else "")
        f = f"{r['ffn']}" + (f"->{to['ffn']}" if to.get("ffn", r["ffn"]) != r["ffn"] else "")
        shape = f"{d:>7s} {f:>8s}"
        t = f"  {r['est_s'] / 60:5.1f} min" if "est_s" in r else ""
        say(
            f"{r['run']:34s} {r['layers']:>6d} {shape} {r['lr']:>8.2g} {r['steps']:>6d} {r['tokens']:>11,d}{t}"
            + (f"  ({proj[0]})" if proj else "")
        )


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except Refused as e:
        print(f"error: {e.line}", file=sys.stderr)
        raise


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="stdlib", help="data.source of every run (default: the stdlib corpus)")
    ap.add_argument("--scale", choices=sorted(SCALES), default="full")
    ap.add_argument("--smoke", action="store_true", help="--scale smoke on the embedded corpus")
    ap.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)))
    ap.add_argument("--ablations", action="store_true", help=f"also {', '.join(ABLATIONS)}")
    ap.add_argument(
        "--arch",
        action="store_true",
        help=f"also {', '.join(ARCH_SHAPES)}: Nexusformer vs TokenFormer, "
        "each grown from its own base (issue 29 item 5)",
    )
    ap.add_argument("--methods", default=None, help=f"comma-separated (default {','.join(DEFAULT_METHODS)})")
    ap.add_argument("--estimate", action="store_true", help="print the plan and the time; train nothing")
    ap.add_argument("--lr-sweep", action="store_true", help="the lr sweep (one seed) -> OUT/<scale>/lr_sweep.json")
    ap.add_argument("--lrs", default=",".join(f"{x:g}" for x in DEFAULT_LRS), help="peak lrs of the sweep (>= 5)")
    ap.add_argument("--sweep", default=None, help="the sweep result to read (default OUT/<scale>/lr_sweep.json)")
    ap.add_argument("--untuned", action="store_true", help="no sweep: every run at the preset lr (results say so)")
    ap.add_argument("--workers", type=int, default=2, help="training processes at once (default 2, one per core)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--timing-steps", type=int, default=20, help="steps timed per model for --estimate")
    ap.add_argument("--out", default="runs/bench-progressive-regime")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    scale = "smoke" if a.smoke else a.scale
    data = "embedded" if a.smoke and a.data == "stdlib" else a.data
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        lrs = [float(x) for x in a.lrs.split(",")]
    except ValueError:
        raise Refused(f"--seeds={a.seeds!r} / --lrs={a.lrs!r} (valid: comma-separated integers / numbers)") from None
    if len(set(lrs)) < MIN_SWEEP_LRS or any(not (x > 0 and math.isfinite(x)) for x in lrs):
        raise Refused(f"--lrs={a.lrs!r} (valid: at least {MIN_SWEEP_LRS} distinct learning rates > 0)")
    from nexus.experiments import progressive as P

    methods = (
        a.methods.split(",")
        if a.methods
        else list(DEFAULT_METHODS) + (list(ABLATIONS) if a.ablations else []) + (list(ARCH_SHAPES) if a.arch else [])
    )
    known = {**P.methods(), **arch_methods()}
    for m in methods:
        if m not in known or (known[m].family != "width" and m not in ARCH_SHAPES):
            raise Refused(
                f"--methods: {m!r} (valid: width methods of `nexus experiment progressive --list`, e.g. "
                f"{', '.join(DEFAULT_METHODS + ABLATIONS)}, or {', '.join(ARCH_SHAPES)})"
            )
    out = Path(a.out) / scale
    head = (
        f"progressive regime ({scale}) | threads {a.threads} x workers {a.workers} | load "
        f"{os.getloadavg()[0]:.1f} | {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | "
        f"{platform.node()}"
    )
    print(head, flush=True)
    print_machine()  # CPU model and capability beside the figures below
    from nexus.config import ConfigError

    try:
        if a.lr_sweep:
            return _sweep(a, methods, scale, data, out, lrs)
        sweep = None
        probe = plan_regime(methods, seeds, scale, data, out, None)
        sweep_path = Path(a.sweep) if a.sweep else out / SWEEP_FILE
        # --estimate plans the tuned benchmark when the sweep has run (its reused runs cost nothing), else untuned
        if not a.untuned and (not a.estimate or sweep_path.is_file()):
            sweep = read_sweep(sweep_path, sweep_key(probe))
        plan = probe if sweep is None else plan_regime(methods, seeds, scale, data, out, dict(sweep["best"]))
        reused = [] if sweep is None else reuse_sweep_runs(plan, methods, out, sweep)
        if sweep is not None:  # the tuning's evidence and cost travel with the result (issue 29 item 2)
            plan["sweep"] = {"path": str(sweep_path), "table": sweep.get("table", {}), "cost": sweep.get("cost", {})}
    except ConfigError as e:
        raise Refused(str(e)) from None
    for name in reused:
        print(
            f"{name}: the lr sweep's run of the same config, {plan['runs'][name]['reused_from']}, is this run "
            f"(not trained again)",
            flush=True,
        )
    corpus = corpus_check(plan, refuse=not a.estimate)
    if a.estimate:
        cost: dict = {}
        est = estimate(plan, a.threads, a.workers, a.timing_steps, cost)
        print_plan(plan, est, corpus, print)
        sw = estimate(plan_sweep(methods, scale, data, out, lrs), a.threads, a.workers, a.timing_steps, cost)
        print(
            f"estimate (per-step and per-eval CPU time measured here x steps = wall time on idle cores, one thread "
            f"per process; load now {os.getloadavg()[0]:.1f}): "
            f"benchmark {est['serial_s'] / 60:.1f} min serial, {est['wall_s'] / 60:.1f} min wall with {a.workers} "
            f"worker(s); lr sweep ({len(lrs)} lrs x {len(sw['rows']) // len(lrs)} shapes, one seed) "
            f"{sw['serial_s'] / 60:.1f} min serial, {sw['wall_s'] / 60:.1f} min wall",
            flush=True,
        )
        return 0
    print_plan(plan, None, corpus, print)
    if not plan["tuned"]:
        print("note: --untuned: scratch runs at the small model's preset lr, not a tuned one", flush=True)
    clock = StepTimer().start()
    from nexus.experiments.ledger import Ledger

    ledger = Ledger(out / "ledger")  # each finished run's config, final metrics and curve; a rerun skips them
    execute(plan["runs"], a.workers, a.threads, lambda s: print(s, flush=True), ledger, plan["tokens_per_step"])
    summary = summarize(plan, ledger)
    wall = clock.so_far().wall
    text = render(plan, summary, corpus, f"{head} | wall {wall:.0f} s")
    print("\n" + text, flush=True)
    from nexus.experiments.runs import write_json_atomic, write_text_atomic

    write_json_atomic(
        out / "results.json", {"command": sys.argv, "plan": plan, "corpus": corpus, "summary": summary, "wall_s": wall}
    )
    write_text_atomic(out / "table.md", f"`{' '.join(sys.argv)}`\n\n{text}")
    print(f"plot: {out / plot_regime(plan, ledger, out)}", flush=True)
    emit_headline(summary, f"progressive regime ({scale})", plan["seeds"])
    return 0


def emit_headline(summary: dict, label: str, seeds: list[int]) -> None:
    """The RESULT line of each growth method of a summary (summarize()): \
grown - scratch final val loss, seed by seed."""
    for m, pm in summary["methods"].items():
        emit(
            f"{label}: {m} grown - scratch final val loss (paired by seed)",
            [g - sc for g, sc in zip(pm["per_seed"]["grown"], pm["per_seed"]["scratch"])],
            "report (< 0: growth beat scratch)",
            unit="nats",
            seeds=list(seeds),
            t_p=pm["grown_minus_scratch"]["t_p"],
        )


def _sweep(a, methods, scale, data, out: Path, lrs: list[float]) -> int:
    from nexus.experiments.runs import read_done, write_json_atomic

    plan = plan_sweep(methods, scale, data, out, lrs)
    corpus = corpus_check(plan, refuse=not a.estimate)
    if a.estimate:  # the sweep's plan and time; trains nothing
        est = estimate(plan, a.threads, a.workers, a.timing_steps)
        print_plan(plan, est, corpus, print)
        print(
            f"estimate (per-step and per-eval CPU time measured here x steps, one thread per process; load now "
            f"{os.getloadavg()[0]:.1f}): lr sweep {est['serial_s'] / 60:.1f} min serial, {est['wall_s'] / 60:.1f} "
            f"min wall with {a.workers} worker(s)",
            flush=True,
        )
        return 0
    print_plan(plan, None, corpus, print)
    clock = StepTimer().start()
    execute(plan["runs"], a.workers, a.threads, lambda s: print(s, flush=True))
    table, best = {}, {}
    for _name, run in plan["runs"].items():
        done = read_done(Path(run["cfg"]["train"]["out_dir"]))
        table.setdefault(run["shape"], []).append(
            {"lr": run["lr"], "final_val_loss": float(done["val_loss"]), "wall_s": done.get("wall_s")}
        )
    for shape, rows in table.items():
        rows.sort(key=lambda r: r["lr"])
        b = min(rows, key=lambda r: r["final_val_loss"])
        best[shape] = b["lr"]
        edge = b["lr"] in (rows[0]["lr"], rows[-1]["lr"])
        print(
            f"{shape:16s} "
            + "  ".join(f"{r['lr']:.3g}: {r['final_val_loss']:.4f}" for r in rows)
            + f"  -> best {b['lr']:.3g}"
            + ("  (at the edge of the grid: widen --lrs)" if edge else ""),
            flush=True,
        )
    wall = clock.so_far().wall
    cost = sum(r["wall_s"] or 0 for rows in table.values() for r in rows)
    write_json_atomic(
        out / SWEEP_FILE,
        {
            "key": sweep_key(plan),
            "best": best,
            "table": table,
            "seed": 0,
            "cost": {"wall_s": wall, "run_seconds": cost},
            "command": sys.argv,
        },
    )
    print(
        f"lr sweep: {len(plan['runs'])} runs, {wall / 60:.1f} min wall, "
        f"{cost / 60:.1f} run-minutes -> {out / SWEEP_FILE}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
