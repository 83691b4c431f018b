"""Progressive growth in SPARKLING's regime: the small model is trained well past its compute-optimal
point before growing (>= 100 tokens per active parameter; SPARKLING grows its 450M-active model at
100B tokens, ~222 tokens per active parameter with the tied embedding counted once as the paper's
450M does, ~251 per active non-embedding parameter), grown 2x along its method's axis, vs the target
model from scratch and the small model alone, over seeds, for every method of `nexus experiment
progressive --list`, and the nexus-vs-tokenformer pair computed from its two members' grown runs.

Shapes are shrunk so the full setting fits 60 minutes on an idle 2-core CPU (`--estimate` measures
it): every small model is 2 layers at d_model 16 (2 heads of 8, FFN 32) on the byte tokenizer, and
each method grows 2x:
  width methods  d_model 16 -> 32, FFN 32 -> 64 (attention keeps its 2 heads of 8, as SPARKLING's hidden 2x
                 keeps its heads)
  nexus-rank     Q/K/V ranks M 24 -> 48, A 32 -> 64
  tokenformer    Q/K/V parameter tokens 8 -> 16 (8 tokens = a 16x16 linear projection's parameters)
  *-matched      Nexus-Rank M 24 -> 48, A 32 -> 64 and TokenFormer 52 -> 152 tokens: equal parameters
                 per projection before (1,664) and after (4,864) growth. At this shape nexus-rank and
                 nexus-rank-matched are the same runs.
  retrofit-ho    order-2 higher-order attention retrofit (not a width growth; listed for completeness)
Each method's budget: growth at 50% of D, D_e = TOKENS_PER_PARAM x the small model's active parameters
(tied embedding counted once, as the paper's 450M), 16 x 128 tokens per step, SPARKLING's recipe
(cosine, warmup 3%, final lr ratio 0.01, rho 1.3, tau as the paper's ratio). The shrunk methods are variants
of the registered ones (REGIME: data), planned by nexus.experiments.study_plan.plan_at_tokens_per_param.

Runs whose configurations are identical apart from their directory (the width methods' shared small
and scratch runs, the retrofit's small run, nexus-rank = nexus-rank-matched, the pair's grown runs)
are trained once and copied, so the full setting trains 16 distinct runs per seed.

    python benchmarks/studies/progressive_paper_regime.py --out runs/bench-paper-regime   \
# full: 100 tokens/param, seeds 0,1,2
    python benchmarks/studies/progressive_paper_regime.py --estimate   \
# time a few steps of every distinct model: idle estimate
    python benchmarks/studies/progressive_paper_regime.py --quick      # 4 tokens/param, seeds 0,1,2 (a smoke run)
    python benchmarks/studies/progressive_paper_regime.py --methods sparkling,naive-copy --seeds 0
Prints a progress line per run, one JSON line per method, and a table (mean +- std, 95% interval,
paired tests vs scratch), also written to OUT/table.md and OUT/results.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402

# The recipe its recorded results were measured with (before issue 29): no QK-norm, weight decay on matrices only,
# and naive-copy with the asymmetric optimizer state. benchmarks/studies/progressive_regime.py runs the paper's recipe.
SMALL = {
    "model.n_layers": 2,
    "model.d_model": 16,
    "model.n_heads": 2,
    "model.head_dim": 8,
    "model.ffn_hidden": 32,
    "train.eval_batches": 4,
    "model.qk_norm": False,
    "train.decay_all": False,
}
_NR = {"model.projection.rank_m": 24, "model.projection.rank_a": 32}
# method -> (spec changes, extra small-model overrides): the 2x growth of each method at the shrunk shape
REGIME = {
    "sparkling": ({"hidden": 32, "ffn": 64}, {}),
    "sparkling-random": ({"hidden": 32, "ffn": 64}, {}),
    "naive-copy": ({"hidden": 32, "ffn": 64, "optimizer_state": "asymmetric"}, {}),
    "nexus-rank": ({"delta_m": 24, "delta_a": 32}, _NR),
    "nexus-rank-matched": ({"delta_m": 24, "delta_a": 32}, _NR),
    "tokenformer": ({"add_tokens": 8}, {"model.projection.param_tokens": 8}),
    "tokenformer-matched": ({"add_tokens": 100}, {"model.projection.param_tokens": 52}),
    "retrofit-ho": ({}, {}),
}
TOKENS_PER_PARAM = 100.0  # the issue's floor; SPARKLING: ~222 per active parameter (Table 2: 100B tokens, 450M)
QUICK_TOKENS_PER_PARAM = 4.0


def regime_methods(names: list[str]) -> dict:
    """The progressive experiment's methods with the shrunk shapes and 2x growth above (the benchmark's own
    variants: the library's methods stay as they are)."""
    from nexus.experiments.progressive import method_variant

    bad = [n for n in names if n not in REGIME]
    if bad:
        raise SystemExit(f"--methods: {bad[0]!r} has no paper-regime shape (valid: {', '.join(REGIME)})")
    return {
        name: method_variant(
            name, spec=REGIME[name][0], overrides={**SMALL, **REGIME[name][1]}, note="paper regime: shrunk, 2x"
        )
        for name in names
    }


def param_counts(model_cfg) -> dict:
    """Active parameters with the tied embedding counted once (the paper's 450M) and without it."""
    from nexus.experiments.curves import active_params
    from nexus.models.accounting import build_on_meta

    active = active_params(model_cfg)
    emb = sum(
        p.numel() for n, p in build_on_meta(model_cfg).named_parameters() if n.split(".")[0] in ("embed", "lm_head")
    )
    return {"active": active, "active_non_embedding": active - emb}


def run_key(cfg_dict: dict) -> str:
    """A run's identity: its whole configuration except where it is written."""
    c = json.loads(json.dumps(cfg_dict))
    c["train"].pop("out_dir", None)
    return json.dumps(c, sort_keys=True)


class RunCache:
    """Finished runs by configuration: a run identical to one trained for an earlier method is copied
    instead of retrained (a finished run directory is skipped by run_resumable)."""

    def __init__(self):
        self.done: dict[str, Path] = {}

    def fill(self, configs: dict, exp_dir: Path, claim: bool = True) -> int:
        from nexus.experiments.runs import is_done
        from nexus.outdir import EXPERIMENT, claim_directory

        if claim:  # mark the experiment directory first: run_progressive resumes only a marked one
            claim_directory(exp_dir, EXPERIMENT, resume=True)
        copied = 0
        for sd, runs in configs.items():
            for name, cfg in runs.items():
                dst = exp_dir / f"seed{sd}" / name
                src = self.done.get(run_key(cfg))
                if src is not None and not is_done(dst) and src != dst:
                    shutil.rmtree(dst, ignore_errors=True)
                    shutil.copytree(src, dst)
                    _rewrite_out_dir(dst, str(dst))
                    copied += 1
        return copied

    def record(self, configs: dict, exp_dir: Path) -> None:
        from nexus.experiments.runs import is_done

        for sd, runs in configs.items():
            for name, cfg in runs.items():
                d = exp_dir / f"seed{sd}" / name
                if is_done(d):
                    self.done.setdefault(run_key(cfg), d)


def _rewrite_out_dir(run_dir: Path, new: str) -> None:
    """The copied run's config.yaml names its new place (nothing reads it back to train)."""
    f = run_dir / "config.yaml"
    if f.is_file():
        lines = f.read_text().splitlines()
        f.write_text("\n".join(f"  out_dir: {new}" if ln.strip().startswith("out_dir:") else ln for ln in lines) + "\n")


def plan_method(method, tpp: float, seeds: list[int], out: Path) -> tuple[dict, dict]:
    """The method's plan (a Method: regime_methods) growing at tpp tokens per active parameter, trained to 2x that,
    and its parameter counts."""
    from nexus.config_migration import saved_run_config
    from nexus.experiments.study_plan import plan_at_tokens_per_param

    plan = plan_at_tokens_per_param(method, tpp, seeds=seeds, out=str(out / method.name))
    first = plan["configs"][str(seeds[0])]
    return plan, {
        "small": param_counts(saved_run_config(first["small"]).model),
        "large": param_counts(saved_run_config(first["scratch"]).model),
    }


def step_seconds(cfg_dict: dict, steps: int = 20, warm: int = 5) -> float:
    """Seconds per optimizer step of this run's model, timed in this process (no eval, no logging)."""
    import tempfile

    from nexus.config_migration import saved_run_config
    from nexus.train.trainer import Trainer

    cfg = saved_run_config(json.loads(json.dumps(cfg_dict)))
    tc = cfg.train
    tc.steps = warm + steps
    tc.drop_hook("growth")
    tc.eval_every, tc.save_every, tc.sample_every, tc.log_every = 0, 0, 0, 10**9
    with tempfile.TemporaryDirectory() as tmp:
        tc.out_dir = tmp
        tr = Trainer(cfg.validate(), quiet=True)
        for _ in range(warm):
            tr.run_step()  # each a step as fit() takes it (hooks, counters); no eval, save or sample is due
        with StepTimer() as t:
            for _ in range(steps):
                m = tr.run_step()
            float(m["loss"])
        return t.elapsed.wall / steps


def estimate(plans: dict, seeds: list[int]) -> dict:
    """Idle-CPU estimate of the full setting: per-step cost of every distinct model x its steps,
    counting each distinct run once (RunCache), plus the evaluations at ~10% of a step each."""
    cost, seen, total, lines = {}, set(), 0.0, []
    for name, plan in plans.items():
        sec = 0.0
        for sd in seeds:
            for run, cfg in plan["configs"][str(sd)].items():
                if run_key(cfg) in seen:
                    continue
                seen.add(run_key(cfg))
                scratch = plan["configs"][str(sd)]["scratch"]
                big, small = (
                    run_key({**scratch, "train": {**scratch["train"], "seed": 0}}),
                    run_key(
                        {
                            **cfg,
                            "train": {
                                **cfg["train"],
                                "seed": 0,
                                "hooks": [h for h in cfg["train"]["hooks"] if h["kind"] != "growth"],
                            },
                        }
                    ),
                )
                if small not in cost:
                    cost[small] = step_seconds(cfg)
                if run == "grown" and big not in cost:
                    cost[big] = step_seconds(scratch)
                g = plan["grow_step"]
                sec += (
                    g * cost[small] + (plan["steps"] - g) * cost[big] if run == "grown" else plan["steps"] * cost[small]
                )
        sec *= 1.1  # evaluation (eval_batches 4 at ~10 points), logging and checkpoints: ~10% measured on --quick
        total += sec
        lines.append(f"  {name:20s} {plan['steps']} steps/run | {sec / 60:6.1f} min (distinct runs only)")
    return {"total_s": total, "lines": lines}


def fmt_ci(d: dict, pct: bool = False) -> str:
    if not d or d.get("n", 0) == 0:
        return "n/a"
    k, u = (100, "%") if pct else (1, "")
    if d["n"] == 1:
        return f"{k * d['mean']:+.1f}{u} (one seed, no spread)" if pct else f"{d['mean']:.4f} (one seed)"
    s = f"{k * d['mean']:+.1f}{u} ± {k * d['std']:.1f}" if pct else f"{d['mean']:.4f} ± {d['std']:.4f}"
    if d.get("ci_low") is not None:
        s += f" [{k * d['ci_low']:.1f}, {k * d['ci_high']:.1f}]" if pct else f" [{d['ci_low']:.4f}, {d['ci_high']:.4f}]"
    return s


def _p(x) -> str:
    return "-" if x is None else f"{x:.2g}"


def render_table(rows: list[dict], pair: dict | None) -> str:
    out = [
        "| method | tokens/param at growth (active / non-emb.) | grown | scratch | small only | "
        "grown − scratch [95% CI] | paired t p / Wilcoxon p | measured saved at equal loss (seeds reached) | "
        "eq. 29 at equal tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["grown_minus_scratch"]
        m = r["measured_saved"]
        out.append(
            f"| {r['method']} | {r['tpp_active']:.0f} / {r['tpp_non_embedding']:.0f} | {fmt_ci(r['grown'])} | "
            f"{fmt_ci(r['scratch'])} | {fmt_ci(r['small'])} | {fmt_ci(d['diff'])} | {_p(d['t_p'])} / "
            f"{_p(d['wilcoxon_p'])} | {fmt_ci(m, True) if m['reached'] else 'not reached'} ({m['reached']}/{m['of']}) "
            f"| {100 * r['eq29_saved']:+.1f}% |"
        )
    if pair is not None:
        sm = pair["summary"]
        a, b = pair["methods"]
        d = sm["a_minus_b_final"]
        out += [
            "",
            f"Pair {pair['pair']} ({a} vs {b}, grown runs only, same bases and tokens): "
            f"{a} {fmt_ci(sm['final_val_loss'][a])}, "
            f"{b} {fmt_ci(sm['final_val_loss'][b])}; {a} − {b} {fmt_ci(d['diff'])} (paired t p {_p(d['t_p'])}, "
            f"Wilcoxon p {_p(d['wilcoxon_p'])}); compute {a} saved to reach {b}'s final loss: "
            f"{fmt_ci(sm['saved'], True)} ({sm['reached']} of {len(pair['seeds'])} seeds reached it directly, "
            f"{sm.get('reached_before_growth', 0)} before growth; negative = {b} needed less).",
        ]
    return "\n".join(out) + "\n"


def main() -> None:
    from nexus.experiments import pair as PR
    from nexus.experiments import progressive as P
    from nexus.growth import families

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--methods", default=None, help="comma-separated (default: every method of --list whose family is installed)"
    )
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(
        "--tokens-per-param",
        type=float,
        default=TOKENS_PER_PARAM,
        help=f"D_e / small active params (default {TOKENS_PER_PARAM:g})",
    )
    ap.add_argument(
        "--quick", action="store_true", help=f"{QUICK_TOKENS_PER_PARAM:g} tokens per parameter (a smoke run)"
    )
    ap.add_argument("--estimate", action="store_true", help="time a few steps of every distinct model; train nothing")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: these 10-40k-parameter models gain nothing from intra-op threads, "
        "and on a shared CPU two threads per process ran ~6x slower per step than one)",
    )
    ap.add_argument("--out", default="runs/bench-paper-regime")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    tpp = QUICK_TOKENS_PER_PARAM if a.quick else a.tokens_per_param
    seeds = [int(s) for s in a.seeds.split(",")]
    installed = set(families())
    names = (
        a.methods.split(",")
        if a.methods
        else [n for n, m in P.methods().items() if m.family in installed and n in REGIME]
    )
    shrunk = regime_methods(names)  # the shrunk methods, in place of their namesakes
    out = Path(a.out) / ("quick" if a.quick else "full")
    plans, counts = {}, {}
    for name in names:
        plans[name], counts[name] = plan_method(shrunk[name], tpp, seeds, out)
    clock = StepTimer().start()  # progress lines and the foot say how long the study has run
    head = (
        f"paper regime: {tpp:g} tokens/active param before growth | seeds {a.seeds} | threads "
        f"{__import__('torch').get_num_threads()} | load {os.getloadavg()[0]:.1f} | "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | {platform.node()}"
    )
    print(head, flush=True)
    print_machine()  # CPU model and capability beside the figures below
    if a.estimate:
        e = estimate(plans, seeds)
        print("\n".join(e["lines"]))
        print(
            f"idle estimate (per-step cost timed here x steps, distinct runs once, +10%): {e['total_s'] / 60:.1f} min "
            f"| load now {os.getloadavg()[0]:.1f} | {clock.so_far().wall:.0f} s to measure",
            flush=True,
        )
        return

    def say(msg: str) -> None:
        if msg.startswith("["):  # one line per run (the runner's "[seed k run] what" line)
            print(f"  {clock.so_far().wall:7.0f} s  {msg}", flush=True)
        elif "skipped" in msg:
            print(f"  {clock.so_far().wall:7.0f} s  {msg.strip()} (trained earlier)", flush=True)

    cache, rows, results = RunCache(), [], {}
    for name in names:
        method_clock = StepTimer().start()
        plan = plans[name]
        copied = cache.fill(plan["configs"], Path(plan["out_dir"]))
        print(
            f"[{name}] {plan['steps']} steps/run, {plan['token_budget']:,} tokens, growth at step {plan['grow_step']}"
            f" | {copied} identical run(s) copied from earlier methods",
            flush=True,
        )
        r = P.run_progressive(plan, quiet=True, say=say)
        cache.record(plan["configs"], Path(plan["out_dir"]))
        sm = r["summary"]
        fin = sm["final_val_loss"]
        c = counts[name]
        row = {
            "method": name,
            "seeds": seeds,
            "tokens": r["token_budget"],
            "steps": plan["steps"],
            "params": c,
            "tpp_active": r["grow_at_tokens"] / c["small"]["active"],
            "tpp_non_embedding": r["grow_at_tokens"] / c["small"]["active_non_embedding"],
            "grown": fin["grown"],
            "scratch": fin["scratch"],
            "small": fin["small"],
            "grown_minus_scratch": sm["grown_minus_scratch_final"],
            "grown_minus_small": sm.get("grown_minus_small_final"),
            "measured_saved": sm["measured_flops_saved"],
            "eq29_saved": r["eq29"]["flops_saved"],
            "schedules": r["schedules"],
            "tau_rule": r["tau_rule"],
            "wall_s": method_clock.so_far().wall,
        }
        rows.append(row)
        results[name] = row
        print(
            json.dumps(
                {
                    k: row[k]
                    for k in ("method", "tokens", "steps", "params", "tpp_active", "grown_minus_scratch", "wall_s")
                },
                default=str,
            ),
            flush=True,
        )
        emit(
            f"paper regime ({tpp:g} tokens/active param): {name} grown - scratch final val loss (paired by seed)",
            [
                v["runs"]["grown"]["final_val_loss"] - v["runs"]["scratch"]["final_val_loss"]
                for v in r["per_seed"].values()
            ],
            "report (< 0: growth beat scratch)",
            unit="nats",
            seeds=seeds,
            t_p=sm["grown_minus_scratch_final"]["t_p"],
        )

    pair = None
    for pname, (pa, pb, _) in PR.PAIRS.items():
        if pa in plans and pb in plans:  # the pair from its members' grown runs (copied: nothing trains)
            pplan = PR.plan_pair(
                pname, tokens=plans[pa]["token_budget"], grow_at=0.5, seeds=seeds, out=str(out / pname), variants=shrunk
            )
            for _m, p in pplan["plans"].items():
                cache.fill(p["configs"], Path(p["out_dir"]), claim=False)
            pair = PR.run_pair(pplan, quiet=True, say=say)
    wall = clock.so_far().wall
    table = render_table(rows, pair)
    foot = f"wall {wall:.0f} s ({wall / 60:.1f} min) | load at end {os.getloadavg()[0]:.1f}"
    print(f"\n{head}\n{foot}\n{table}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(f"{' '.join(sys.argv)}\n\n{head}\n{foot}\n\n{table}")
    (out / "results.json").write_text(
        json.dumps(
            {
                "command": sys.argv,
                "head": head,
                "wall_s": wall,
                "rows": rows,
                "pair": None if pair is None else pair["summary"],
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
