"""Issue 38: the regime benchmark's open questions as one study that outlives a session.

The study is data (study_parts below: its tuning grids and the arms each part compares, on which seeds, at which
growth point and horizon) over the regimes of benchmarks/studies/progressive_regime.py; every run is planned by the
planner `nexus experiment progressive` uses (nexus.experiments.study_plan / study_parts: bases, branch points, tuned
scratch) and trained by the ledger runner (nexus.experiments.ledger): each finished run is one
JSON file under benchmarks/results/<study>/runs/ (config, final metrics, downsampled validation curve), written
atomically when it finishes. Rerunning a command skips what the ledger holds and runs the rest, on the CPU or a GPU,
in any session; `--workers N` runs N at once (separate processes, same results as alone).

Parts (run in this order; a part that needs tuned lrs refuses until its tuning is complete in the ledger):
  tune       leak-free lr sweep: the small and the scratch shape, 5 lrs a factor 2 apart, tuning seeds 100 and 101
             (never evaluation seeds); the lr with the lowest mean final validation loss over both seeds is chosen,
             and its neighbours are reported beside it
  headline   evaluation seeds 0-4 at the chosen lrs: small, scratch, sparkling, sparkling-random, naive-copy (the
             paper's naive expansion, symmetry broken by a stated tiny perturbation), naive-copy-locked (the exact
             copy, a control) and sparkling@wide-lr (the grown run moves to scratch's tuned lr at growth, item 3)
  ablations  sparkling-no-rewarmup and sparkling-symmetric on the headline's seeds, branched from the same prefixes
             (paired by branch with sparkling)
  horizon    post-growth budget 2x and 4x of the headline's (1x), seeds 0-2, small / scratch / sparkling at equal
             total tokens each: the share of the gap closed against post-growth steps
  arch-tune  Nexus-Rank vs TokenFormer at 20 tokens per parameter: each small shape and scratch shape, 3 lrs, tuning
             seed 100
  arch       both grown 2x from their own base at matched parameters and equal compute, seeds 0-4 (small, grown),
             scratch on seeds 0-2: the paired difference of the growth gains (small - grown), Nexus-Rank minus
             TokenFormer, and each one's share of its own gap

    python benchmarks/studies/regime_study.py --estimate                   \
# done / remaining / cost per part; trains nothing
    python benchmarks/studies/regime_study.py --estimate --device cuda --cuda-steps-per-s 40   \
# the same at a stated GPU rate
    python benchmarks/studies/regime_study.py --parts tune                 \
# run (or continue) a part; commit the ledger after
    python benchmarks/studies/regime_study.py --plot                       # tables and figures from the ledger alone
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/studies/, home of progressive_regime
import _arch_study as A  # noqa: E402  (issue 47 item 3's nexus-rank-vs-tokenformer study)
import _credible_study as C  # noqa: E402  (issue 47's sparkling-credible study: its parts and summary)
import _depth_study as D  # noqa: E402  (issue 48's depth-vs-width study, planned)
import progressive_regime as R  # noqa: E402  (the regime's data: scales, methods; its results code)
from _harness import StepTimer, print_machine  # noqa: E402  (progressive_regime put benchmarks/ on the path)

from nexus.experiments.study_parts import Arms, LrGrid, build_parts, plan_arms  # noqa: E402
from nexus.experiments.study_plan import merge_runs  # noqa: E402

STUDY = "progressive-regime"
TUNING_SEEDS = (100, 101)  # never evaluation seeds
EVAL_SEEDS = (0, 1, 2, 3, 4)
# the leak-free grid, in the order it runs: the seed-0 sweep's optima (3.2e-2 small, 1.6e-2 scratch) first, so a
# session that ends early leaves the most informative points in the ledger
TUNE_LRS = (1.6e-2, 3.2e-2, 8e-3, 6.4e-2, 4e-3)
# --scale main (the main job's budget, 150 steps on the embedded corpus): its seed-0 sweep picked 2e-3 for both shapes
MAIN_TUNE_LRS = (2e-3, 4e-3, 1e-3, 8e-3, 5e-4)
HEADLINE = ("sparkling", "sparkling-random", "naive-copy", "naive-copy-locked", "sparkling" + R.WIDE_LR)
ABLATIONS = ("sparkling-no-rewarmup", "sparkling-symmetric")
HORIZONS = (2, 4)  # post-growth steps as a multiple of the steps before growth (the headline is 1x)
HORIZON_SEEDS = (0, 1, 2)
ARCH = tuple(R.ARCH_SHAPES)
ARCH_TOKENS_PER_PARAM = 20.0
ARCH_SEEDS = (0, 1, 2, 3, 4)
ARCH_SCRATCH_SEEDS = (0, 1, 2)
ARCH_TUNING_SEEDS = (100,)
ARCH_LRS = (1.6e-2, 8e-3, 3.2e-2)
# --scale main: the full-scale grid ran first (2026-12-07) and 3 of its 4 shapes took an edge lr (8e-3 twice,
# 3.2e-2 once); one step on each side moved three to the new lower edge (4e-3), so it extends down to 1e-3 (the
# main tune part's small model took 2e-3)
MAIN_ARCH_LRS = ARCH_LRS + (4e-3, 6.4e-2, 2e-3, 1e-3)
PARTS = ("tune", "headline", "ablations", "horizon", "arch-tune", "arch")
# the seed-0 sweep's lrs (issue 29), used only to *estimate* parts whose tuning is not finished: cost does not
# depend on the lr, and no run is ever trained at them by this study
ESTIMATE_ONLY_LRS = {"small": 3.2e-2, "d64-ffn256": 1.6e-2}


def study_parts(tune_lrs=TUNE_LRS, arch_lrs=ARCH_LRS) -> dict:
    """The study as data, in the order its parts are built and estimated (each tuning grid before the parts it
    tunes): the shared planner (nexus.experiments.study_parts) plans every part from this."""
    tuned = dict(tuned_by="tune", untuned_lrs=ESTIMATE_ONLY_LRS)
    return {
        "tune": LrGrid(R.DEFAULT_METHODS[:1], TUNING_SEEDS, "tune/", tuple(tune_lrs)),
        "arch-tune": LrGrid(ARCH, ARCH_TUNING_SEEDS, "arch-tune/", tuple(arch_lrs), ARCH_TOKENS_PER_PARAM),
        "headline": Arms(HEADLINE, EVAL_SEEDS, **tuned),
        "ablations": Arms(ABLATIONS, EVAL_SEEDS, **tuned),
        "horizon": tuple(Arms(("sparkling",), HORIZON_SEEDS, **tuned, post_mult=k, ns=f"post{k}x/") for k in HORIZONS),
        # before arch-tune is complete, every shape at 1.6e-2 (estimate only)
        "arch": Arms(
            ARCH,
            ARCH_SEEDS,
            "arch-tune",
            1.6e-2,
            ns="arch/",
            tokens_per_param=ARCH_TOKENS_PER_PARAM,
            scratch_seeds=ARCH_SCRATCH_SEEDS,
        ),
    }


STUDIES = {m.STUDY: m for m in (C, A, D)}  # studies with parts of their own (the rest: this file's regime study)
# part -> the tuning part it needs complete in the ledger before it runs
NEEDS = {
    name: (p[0] if isinstance(p, tuple) else p).tuned_by
    for name, p in study_parts().items()
    if not isinstance(p, LrGrid)
}
# the horizon scan's 1x point: the headline's runs of the horizon seeds
HORIZON_1X = Arms(("sparkling",), HORIZON_SEEDS, "tune", ESTIMATE_ONLY_LRS)


def build(scale: str, data: str, out: Path, ledger, tune_lrs=TUNE_LRS, arch_lrs=None, study: str = STUDY) -> dict:
    """Every part's plan (lrs from the ledger's tuning where complete, else the estimate-only lrs, marked)."""
    if study in STUDIES:
        parts = STUDIES[study].study_parts(tune_lrs)
    else:
        parts = study_parts(tune_lrs, arch_lrs or (MAIN_ARCH_LRS if scale == "main" else ARCH_LRS))
    variants = {
        **R.arch_methods(),
        **(C.bracket_methods() if study == C.STUDY else {}),
        **(D.depth_methods() if study == D.STUDY else {}),
    }
    return build_parts(parts, R.SCALES[scale], data, out, ledger, tuple(tune_lrs), variants)


def study_def(study: str) -> tuple[tuple, dict, str]:
    """(its parts in the order they run, part -> the tuning part it needs complete, its default scale)."""
    if study in STUDIES:
        return STUDIES[study].PARTS, STUDIES[study].NEEDS, STUDIES[study].SCALE
    return PARTS, NEEDS, "full"


# ----------------------------------------------------------------------------- estimate
def estimate_parts(
    parts: dict, ledger, threads: int, workers: int, timing_steps: int, device: str, cuda_rate: float | None, say
) -> list[dict]:
    """done / remaining / cost per part: CPU seconds from this machine's measured step and evaluation time, or
    steps at a stated GPU rate."""
    import torch

    cost: dict = {}
    rows = []
    seen: set = set()  # a run two parts share (the ablations' prefixes are the headline's) is counted once, first
    for name, part in parts.items():
        done, todo_s, todo_steps, remaining = 0, 0.0, 0, 0
        for plan in part["plans"]:
            est = R.estimate(plan, threads, workers, timing_steps, cost) if device == "cpu" else None
            for r in est["rows"] if est else [{"run": k, **R.describe_run(v, plan)} for k, v in plan["runs"].items()]:
                if r["run"] in seen or r["run"] not in part["runs"]:
                    continue
                seen.add(r["run"])
                if ledger.holds(r["run"], part["runs"][r["run"]]["cfg"]):
                    done += 1
                    continue
                remaining += 1
                todo_steps += r["steps"]
                todo_s += r.get("est_s", 0.0)
        if device == "cuda":
            todo_s = todo_steps / cuda_rate
        rows.append(
            {
                "part": name,
                "runs": done + remaining,
                "done": done,
                "remaining": remaining,
                "remaining_steps": todo_steps,
                "serial_s": todo_s,
                "wall_s": todo_s / max(1, workers),
                "tuned": part.get("tuned", True),
            }
        )
    if device == "cpu":
        rate = ", ".join(
            f"{1 / s:.1f} steps/s ({json.loads(k)['ffn_hidden']} FFN, {json.loads(k)['projection']['kind']})"
            for k, (s, _) in cost.items()
        )
        basis = (
            f"CPU: per-step and per-evaluation CPU time measured here ({timing_steps} steps per model, {threads} "
            f"thread(s), capability {torch.backends.cpu.get_cpu_capability()}, load {os.getloadavg()[0]:.1f}): "
            f"{rate}"
        )
    else:
        basis = (
            f"GPU: an ASSUMED rate of {cuda_rate:g} optimizer steps/s per worker (not measured here; tiny models "
            f"are launch-bound, so {workers} worker(s) on one GPU are assumed not to slow each other)"
        )
    say(f"estimate basis: {basis}")
    say(
        f"{'part':10s} {'runs':>5s} {'done':>5s} {'left':>5s} {'steps left':>11s} {'serial':>9s} {'wall':>9s}"
        "   (runs: not counted again where an earlier part has them)"
    )
    for r in rows:
        say(
            f"{r['part']:10s} {r['runs']:5d} {r['done']:5d} {r['remaining']:5d} {r['remaining_steps']:11,d} "
            f"{r['serial_s'] / 3600:8.2f}h {r['wall_s'] / 3600:8.2f}h  ({workers} worker(s))"
            + ("" if r["tuned"] else "  [lrs not tuned yet: planned at estimate-only lrs, same cost]")
        )
    for name, part in parts.items():  # a corpus too small for a part is said now, not found after hours of runs
        for plan in part["plans"]:
            problem = R.corpus_check(plan, refuse=False).get("problem")
            if problem:
                say(f"part {name} ({plan.get('ns') or 'main plan'}): a run would refuse the corpus: {problem}")
    tot = sum(r["serial_s"] for r in rows)
    live = live_rate(parts, ledger)
    if live and device == "cpu":  # the rate runs really got, under this machine's load, beside the idle-core timing
        steps = sum(r["remaining_steps"] for r in rows)
        measured = steps / tot if tot else float("nan")
        slow = measured / live["steps_per_s"] if live["steps_per_s"] else float("nan")
        say(
            f"live rate: {live['steps_per_s']:.1f} steps/s per worker over the ledger's last {live['runs']} runs "
            f"(finished {live['since']} .. {live['until']}) against {measured:.1f} timed now"
            + (f": {slow:.1f}x slower, the machine is loaded or was" if slow > 1.3 else "")
            + "; at the live rate what remains takes "
            f"{steps / live['steps_per_s'] / 3600 / max(1, workers):.2f} h wall "
            f"with {workers} worker(s)"
        )
        for r in rows:  # each part at the live rate: a worker-hour is a CPU-hour (one thread per worker)
            r["live_serial_s"] = r["remaining_steps"] / live["steps_per_s"]
            if r["remaining"]:
                say(
                    f"  at the live rate: {r['part']} {r['remaining']} runs, {r['remaining_steps']:,} steps, "
                    f"{r['live_serial_s'] / 3600:.2f} CPU-hours ({r['live_serial_s'] / 3600 / max(1, workers):.2f} h "
                    f"wall with {workers} worker(s))"
                )
    say(
        f"total remaining: {sum(r['remaining'] for r in rows)} runs, {tot / 3600:.2f} h serial, "
        f"{tot / 3600 / max(1, workers):.2f} h wall with {workers} worker(s)"
    )
    return rows


def live_rate(parts: dict, ledger, last: int = 8) -> dict | None:
    """Optimizer steps per second per worker that the ledger's latest finished runs got (steps each trained itself,
    a branch not its prefix's, a resumed run only those after its step checkpoint, over its wall time): the rate under
    the machine's real load."""
    from nexus.experiments.ledger import trained_steps

    recs = []
    for part in parts.values():
        for name, run in part["runs"].items():
            if ledger.holds(name, run["cfg"]):
                final = ledger.read(name)
                steps = trained_steps(run, final["final"])
                if isinstance(final["final"].get("wall_s"), (int, float)) and final["final"]["wall_s"] > 0:
                    recs.append((final["finished_at"], steps, final["final"]["wall_s"]))
    if not recs:
        return None
    recs = sorted(set(recs))[-last:]
    return {
        "steps_per_s": sum(r[1] for r in recs) / sum(r[2] for r in recs),
        "runs": len(recs),
        "since": recs[0][0],
        "until": recs[-1][0],
    }


# ----------------------------------------------------------------------------- results from the ledger
def summarize_parts(parts: dict, ledger, root: Path, say) -> dict:
    """Every table and figure the ledger can support now; a part not complete says how far it is."""
    out: dict = {}
    for p in ("tune", "arch-tune"):
        out[p] = parts[p]["choice"]
        say_tuning(p, out[p], say)
    if any(r["mean"] is not None for rows in parts["tune"]["choice"]["table"].values() for r in rows):
        plot_tuning(parts["tune"]["choice"], root / "tune.png")
    ready = {}
    for p in ("headline", "ablations", "horizon", "arch"):
        part = parts[p]
        held = sum(ledger.holds(k, r["cfg"]) for k, r in part["runs"].items())
        ready[p] = held == len(part["runs"]) and part.get("tuned")
        if not ready[p]:
            say(
                f"{p}: {held} of {len(part['runs'])} runs in the ledger"
                + ("" if part.get("tuned") else " (its lrs are not tuned yet)")
                + "; not summarized yet"
            )
    if ready["headline"]:
        plans = [parts["headline"]["plans"][0]] + (parts["ablations"]["plans"] if ready["ablations"] else [])
        plan = {
            **plans[0],
            "methods": [m for pl in plans for m in pl["methods"]],
            "runs": merge_runs(pl["runs"] for pl in plans),
        }  # ablations branch from the headline's prefixes: paired
        out["headline"] = R.summarize(plan, ledger)
        say(R.render(plan, out["headline"], R.corpus_check(plan), f"headline from the ledger {root}"))
        R.plot_regime(plan, ledger, root)
    if ready["headline"] and ready["horizon"]:
        out["horizon"] = horizon(parts, ledger, root, say)
    if ready["arch"]:
        out["arch"] = arch_summary(parts["arch"]["plans"][0], ledger, say)
    return out


def say_tuning(part: str, choice: dict, say) -> None:
    """One line per shape of a tuning part: the mean final loss per lr over its seeds and the lr chosen (a best at
    the grid's edge is said: extend the grid past it before any evaluation run)."""
    for shape, rows in choice["table"].items():
        cells = ", ".join(f"{r['lr']:.3g}: " + ("-" if r["mean"] is None else f"{r['mean']:.4f}") for r in rows)
        best = choice["best"].get(shape)
        edge = " (edge of the grid: extend it)" if best and choice["edge"][shape] else ""
        say(
            f"{part} {shape}: mean over seeds {','.join(map(str, choice['seeds']))}: {cells}"
            + (f" -> {best:.3g}{edge}" if best else " (incomplete)")
        )


def arch_study_summary(parts: dict, ledger, root: Path, say) -> dict:
    """The nexus-rank-vs-tokenformer study's tuning table, pilot and comparison (_arch_study.summarize)."""
    c = parts["tune"]["choice"]
    say_tuning("tune", c, say)
    if any(r["mean"] is not None for rows in c["table"].values() for r in rows):
        plot_tuning(c, root / "tune.png")
    return A.summarize(parts, ledger, say)


def credible_summary(parts: dict, ledger, root: Path, say) -> dict:
    """The sparkling-credible study's tables (_credible_study.summarize) and its tuning figures."""
    out = {}
    for p in ("tune", "tune-halving"):
        say_tuning(p, parts[p]["choice"], say)
    c = parts["tune-halving"]["choice"] if parts["tune-halving"]["choice"]["table"] else parts["tune"]["choice"]
    if any(r["mean"] is not None for rows in parts["tune"]["choice"]["table"].values() for r in rows):
        plot_tuning(parts["tune"]["choice"] if not c["complete"] else c, root / "tune.png")
    out.update(C.summarize(parts, ledger, R.summarize, say))
    out["bracket"] = C.bracket_summary(parts, ledger, say)
    out["horizon"] = C.horizon_summary(parts, ledger, say)
    if "methods" in out:
        R.plot_regime(parts["eval"]["plans"][0], ledger, root)
    if out["horizon"] and out["horizon"]["horizons"]:
        plot_wsd_horizon(out["horizon"], root / "horizon.png")
    return out


def plot_wsd_horizon(summary: dict, path: Path) -> str:
    """sparkling-credible's horizon scan: grown - scratch and grown - small (95% t intervals) against the post-growth
    steps of each WSD horizon, with the pre-stated margin."""
    from nexus.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    rows = sorted(summary["horizons"].values(), key=lambda r: r["post_steps"])
    x = [r["post_steps"] for r in rows]
    for key, label, color, dx in (
        ("grown_minus_scratch", "grown - scratch (equal tokens)", "tab:blue", 0.98),
        ("grown_minus_small", f"grown - {C.HORIZON_CONTROL} (growth's own effect)", "tab:orange", 1.02),
    ):
        d = [r[key]["diff"] for r in rows]
        mean = [v["mean"] for v in d]
        lo = [v["mean"] - (v["ci_low"] if v["ci_low"] is not None else v["mean"]) for v in d]
        hi = [(v["ci_high"] if v["ci_high"] is not None else v["mean"]) - v["mean"] for v in d]
        ax.errorbar([a * dx for a in x], mean, yerr=[lo, hi], fmt="o-", color=color, capsize=3, label=label)
        # each seed's own difference, faint: with 3 seeds a wide interval is one seed, and the reader should see which
        other = "scratch" if key == "grown_minus_scratch" else "small"
        for r, a in zip(rows, x):
            ps = r["per_seed"]
            ax.plot(
                [a * dx] * len(ps["grown"]),
                [g - o for g, o in zip(ps["grown"], ps[other])],
                "_",
                color=color,
                ms=10,
                alpha=0.6,
                gid="per-seed",
            )
    ax.axhline(C.MARGIN, color="tab:green", ls="--", lw=1, label=f"margin +{C.MARGIN:g}")
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set(
        xscale="log",
        xlabel=f"steps after growth (WSD, decay over the last {C.HORIZON_DECAY_FRACTION:.0%} of each horizon)",
        ylabel="final validation loss difference (nats)",
        title=f"{C.STUDY} horizon scan, seeds {', '.join(map(str, summary['seeds']))} (bars: 95% t, ticks: each seed)",
    )
    ax.set_xticks(x, [str(v) for v in x])
    ax.set_xticks([], minor=True)  # the log axis's own minor labels (2x10^3 ...) would print over the horizons'
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def horizon(parts: dict, ledger, root: Path, say) -> list[dict]:
    """The share of the gap closed against post-growth steps (1x: the headline's runs of the horizon seeds), and
    whether the grown run reaches scratch's final loss at equal total tokens and at equal FLOPs."""
    from nexus.experiments.stats import fmt_gap

    h = parts["headline"]["plans"][0]
    one = plan_arms(
        HORIZON_1X,
        h["lrs"],
        R.SCALES[h["scale"]],
        h["data"],
        Path(next(iter(h["runs"].values()))["cfg"]["train"]["out_dir"]).parents[1],
        R.arch_methods(),
    )
    rows = []
    for k, plan in [(1, one)] + list(zip(HORIZONS, parts["horizon"]["plans"])):
        m = R.summarize(plan, ledger)["methods"]["sparkling"]
        d = m["grown_minus_scratch"]["diff"]
        rows.append(
            {
                "post_mult": k,
                "post_steps": plan["steps"] - plan["grow_step"],
                "gap_closed": m["gap_closed"],
                "grown_minus_scratch": d,
                "reached_equal_tokens": sum(
                    v <= 0 for v in [g - s for g, s in zip(m["per_seed"]["grown"], m["per_seed"]["scratch"])]
                ),
                "reached_equal_flops": m["compute_to_scratch_loss"]["reached"],
                "seeds": len(HORIZON_SEEDS),
            }
        )
        say(
            f"horizon {k}x ({rows[-1]['post_steps']} steps after growth): share {fmt_gap(m['gap_closed'])}; grown - "
            f"scratch {d['mean']:+.4f}; reaches scratch's loss at equal tokens in {rows[-1]['reached_equal_tokens']} "
            f"and within scratch's FLOPs in {rows[-1]['reached_equal_flops']} of {len(HORIZON_SEEDS)} seeds"
        )
    from nexus.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for r in rows:
        g = r["gap_closed"]
        if g["estimate"] is not None:
            lo, hi = (g["ci_low"], g["ci_high"]) if g["bounded"] else (g["estimate"], g["estimate"])
            ax.errorbar(
                [r["post_steps"]],
                [g["estimate"]],
                yerr=[[g["estimate"] - lo], [hi - g["estimate"]]],
                fmt="o",
                color="tab:blue",
                capsize=3,
            )
    ax.plot(
        [r["post_steps"] for r in rows],
        [r["gap_closed"]["estimate"] for r in rows],
        "-",
        color="tab:blue",
        label="sparkling, share of the gap closed (Fieller 95%)",
    )
    ax.axhspan(0.84, 0.90, color="tab:green", alpha=0.2, label="SPARKLING Table 1 (0.84-0.90)")
    ax.set(
        xscale="log",
        xlabel="optimizer steps after growth",
        ylabel="(small - grown) / (small - scratch)",
        title=f"horizon scan, seeds {', '.join(map(str, HORIZON_SEEDS))}",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, root / "horizon.png")
    return rows


def arch_summary(plan: dict, ledger, say) -> dict:
    """Nexus-Rank vs TokenFormer: the paired difference of growth gains (small - grown) over ARCH_SEEDS, and each
    one's share of its own gap over the seeds with a scratch run."""
    from nexus.experiments.stats import fmt, fmt_gap, gap_closed, paired

    ns = plan["ns"]
    final = {k: ledger.final_val_loss(k) for k, r in plan["runs"].items() if r["kind"] != "prefix"}
    gain, share = {}, {}
    for m in ARCH:
        b = plan["bases"][m] if m in plan["bases"] else next(v for v in plan["bases"].values() if m in v["methods"])
        sc = plan["runs"][f"{ns}seed{ARCH_SEEDS[0]}/{m}"]["shape"]
        sm = [final[f"{ns}seed{sd}/{b['small_run']}"] for sd in ARCH_SEEDS]
        gr = [final[f"{ns}seed{sd}/{m}"] for sd in ARCH_SEEDS]
        gain[m] = [a - g for a, g in zip(sm, gr)]
        idx = [ARCH_SEEDS.index(sd) for sd in ARCH_SCRATCH_SEEDS]
        share[m] = gap_closed(
            [sm[i] for i in idx],
            [gr[i] for i in idx],
            [final[f"{ns}seed{sd}/scratch-{sc}"] for sd in ARCH_SCRATCH_SEEDS],
        )
    a, b = ARCH
    d = paired(gain[a], gain[b])
    say(
        f"arch ({ARCH_TOKENS_PER_PARAM:g} tokens/param at growth, seeds {','.join(map(str, ARCH_SEEDS))}): growth gain "
        f"(small - grown) {a} minus {b}: {fmt(d['diff'])}, paired t p = {R._p(d['t_p'])}; share of own gap (seeds "
        f"{','.join(map(str, ARCH_SCRATCH_SEEDS))}): {a} {fmt_gap(share[a])}, {b} {fmt_gap(share[b])}"
    )
    return {"gain_difference": d, "gains": gain, "share": share}


def plot_tuning(choice: dict, path: Path) -> str:
    """Final validation loss against lr per shape: each tuning seed a point, the seeds' mean a line."""
    from nexus.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for i, (shape, rows) in enumerate(choice["table"].items()):
        color = ["tab:orange", "tab:gray", "tab:blue", "tab:green"][i % 4]
        for r in rows:
            pts = [v for v in r["losses"].values() if v is not None]
            ax.plot([r["lr"]] * len(pts), pts, "o", color=color, alpha=0.4, ms=4)
        full = [r for r in rows if r["mean"] is not None]
        ax.plot([r["lr"] for r in full], [r["mean"] for r in full], "-", color=color, lw=2, label=f"{shape}, mean")
    ax.set(
        xscale="log",
        xlabel="peak lr",
        ylabel="final validation loss",
        title=f"leak-free lr sweep, tuning seeds {', '.join(map(str, choice['seeds']))}",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Bad input: one line, exit 2. SIGINT / SIGTERM: one line saying where the study stopped and the command that
    continues it, exit 128 + the signal's number; no worker outlives this process (nexus.experiments.ledger)."""
    import shlex
    import signal

    from nexus.experiments.ledger import StudyInterrupted

    again = " ".join(
        shlex.quote(x) for x in [sys.executable, str(Path(__file__)), *(sys.argv[1:] if argv is None else argv)]
    )

    def term(signum, frame):  # before and after the runs: as Ctrl-C is, a stop with nothing in flight
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, term)
    try:
        return _main(argv)
    except R.Refused as e:
        print(f"error: {e.line}", file=sys.stderr)
        raise
    except StudyInterrupted as e:
        saved = f" ({', '.join(e.saved)} saved mid-run, resumed from there)" if e.saved else ""
        print(
            f"study stopped by {e.signal_name} at a run boundary: {e.finished} run(s) finished this time, all in the "
            f"ledger{saved}; continue with: {again}",
            file=sys.stderr,
            flush=True,
        )
        return 128 + e.signum
    except KeyboardInterrupt:
        print(
            f"study stopped before any run was in flight; nothing was lost; continue with: {again}",
            file=sys.stderr,
            flush=True,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, before)


def _main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--study",
        default=STUDY,
        help="the ledger's name under --results; "
        + "; ".join(f"{m.STUDY}: its own parts ({', '.join(m.PARTS)}), scale {m.SCALE}" for m in STUDIES.values())
        + "; any other name runs the regime study's parts",
    )
    ap.add_argument(
        "--results",
        default=str(Path(__file__).resolve().parents[1] / "results"),
        help="where ledgers live (default benchmarks/results)",
    )
    ap.add_argument("--out", default="runs/regime-study", help="run directories (checkpoints; not committed)")
    ap.add_argument(
        "--scale", choices=sorted(R.SCALES), default=None, help="the regime (default: full, or the --study's own scale)"
    )
    ap.add_argument("--data", default="stdlib")
    ap.add_argument(
        "--parts",
        default=None,
        help=f"comma-separated parts to run, of {', '.join(PARTS)} (or the --study's own parts)",
    )
    ap.add_argument("--estimate", action="store_true", help="done / remaining / cost per part; train nothing")
    ap.add_argument("--plot", action="store_true", help="tables and figures from the ledger alone; train nothing")
    ap.add_argument(
        "--device", default="cpu", choices=("cpu", "cuda"), help="where runs train (and what --estimate prices)"
    )
    ap.add_argument(
        "--cuda-steps-per-s",
        type=float,
        default=None,
        help="--estimate --device cuda: the assumed optimizer steps/s of one worker (stated, not measured)",
    )
    ap.add_argument(
        "--lrs",
        default=None,
        help="the tune part's lrs, comma-separated, in the order they run (default "
        f"{','.join(f'{x:g}' for x in TUNE_LRS)}; --scale main: {','.join(f'{x:g}' for x in MAIN_TUNE_LRS)})",
    )
    ap.add_argument("--workers", type=int, default=1, help="runs at once, each in its own process")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--timing-steps", type=int, default=20)
    a = ap.parse_args(argv)
    if a.workers < 1 or a.threads < 1:
        raise R.Refused(f"--workers={a.workers} / --threads={a.threads} (valid: integers >= 1)")
    if a.estimate and a.device == "cuda" and not (a.cuda_steps_per_s and a.cuda_steps_per_s > 0):
        raise R.Refused(
            f"--cuda-steps-per-s={a.cuda_steps_per_s!r} (valid: with --estimate --device cuda, the assumed "
            f"optimizer steps/s of one worker, > 0, e.g. 40)"
        )
    parts_of, needs, default_scale = study_def(a.study)
    a.scale = a.scale or default_scale
    default_lrs = STUDIES[a.study].TUNE_LRS if a.study in STUDIES else MAIN_TUNE_LRS if a.scale == "main" else TUNE_LRS
    try:
        tune_lrs = tuple(float(x) for x in a.lrs.split(",")) if a.lrs else default_lrs
    except ValueError:
        tune_lrs = ()
    if len(set(tune_lrs)) < 3 or not all(x > 0 for x in tune_lrs):
        raise R.Refused(f"--lrs={a.lrs!r} (valid: at least 3 distinct learning rates > 0, comma-separated)")
    chosen = a.parts.split(",") if a.parts else []
    bad = [p for p in chosen if p not in parts_of]
    if bad:
        raise R.Refused(f"--parts: {bad[0]!r} (valid for --study {a.study}: comma-separated of {', '.join(parts_of)})")
    if not (chosen or a.estimate or a.plot):
        raise R.Refused("nothing to do (valid: --estimate, --plot, or --parts PART[,PART])")
    import torch

    from nexus.config import ConfigError
    from nexus.experiments.ledger import Ledger

    torch.set_num_threads(a.threads)
    root = Path(a.results) / a.study
    ledger = Ledger(root)
    out = Path(a.out) / a.scale
    data = "embedded" if a.scale == "smoke" and a.data == "stdlib" else a.data
    say = lambda s: print(s, flush=True)  # noqa: E731
    say(
        f"study {a.study} ({a.scale}, {data}) | ledger {root} | {len(ledger.names())} runs held | "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    )
    print_machine()  # CPU model and capability beside the figures below
    try:
        parts = build(a.scale, data, out, ledger, tune_lrs, study=a.study)
        if a.estimate:
            estimate_parts(parts, ledger, a.threads, a.workers, a.timing_steps, a.device, a.cuda_steps_per_s, say)
            return 0
        for p in chosen:
            if p in needs and not parts[p].get("tuned"):
                c = parts[needs[p]]["choice"]
                n = sum(v is not None for rows in c["table"].values() for r in rows for v in r["losses"].values())
                m = sum(len(r["losses"]) for rows in c["table"].values() for r in rows)
                raise R.Refused(
                    f"--parts {p} needs part {needs[p]!r} complete in the ledger ({n} of {m} runs there) "
                    f"(valid: run --parts {needs[p]} first)"
                )
        for p in chosen:
            runs = parts[p]["runs"]
            if a.device == "cuda":
                for r in runs.values():
                    r["cfg"]["train"]["device"] = "cuda"
            plan0 = parts[p]["plans"][0]
            corpus = R.corpus_check({**plan0, "token_budget": max(pl["token_budget"] for pl in parts[p]["plans"])})
            say(
                f"part {p}: {len(runs)} runs; corpus {corpus['share_of_split_drawn']:.2f} of the training split per run"
            )
            with StepTimer() as t:
                R.execute(runs, a.workers, a.threads, say, ledger, plan0["tokens_per_step"])
            say(f"part {p}: finished in {t.elapsed.wall:.0f} s wall")
        if a.plot or chosen:
            lines: list[str] = []
            built = build(a.scale, data, out, ledger, tune_lrs, study=a.study)
            note = lambda s: (say(s), lines.append(s))  # noqa: E731
            if a.study == C.STUDY:
                summary = credible_summary(built, ledger, root, note)
            elif a.study == A.STUDY:
                summary = arch_study_summary(built, ledger, root, note)
            else:
                summary = summarize_parts(built, ledger, root, note)
            if "headline" in summary:  # the RESULT lines: the headline's methods against scratch, seed by seed
                R.emit_headline(summary["headline"], f"regime study {a.study} ({a.scale})", EVAL_SEEDS)
            if a.plot:  # the ledger's own summary, redrawn from nothing but the ledger
                from nexus.experiments.runs import write_text_atomic

                write_text_atomic(
                    root / "summary.md",
                    f"`{' '.join(['python benchmarks/studies/regime_study.py', *sys.argv[1:]])}`"
                    "\n\n```\n" + "\n".join(lines) + "\n```\n",
                )
                say(f"summary: {root / 'summary.md'}")
    except ConfigError as e:
        raise R.Refused(str(e)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
