"""`nexus experiment progressive|compare`: growth vs from-scratch at equal tokens, and preset x seed
comparisons. Everything is validated (methods, budgets, growth point, presets) before any training;
interrupted experiments resume when the same command is run again."""

from __future__ import annotations

import argparse
import time

from .common import add_config_file_arg, config_file_mapping, nonneg_float, positive_int


def _csv(name: str, item=str):
    def parse(s: str):
        try:
            vals = [item(v) for v in s.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: a comma-separated list)") from None
        if not vals:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: a non-empty comma-separated list)")
        return vals

    return parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "experiment",
        help="progressive growth vs scratch; presets x seeds comparisons",
        description="Experiments: `progressive` (grow vs scratch, compute saved) and `compare` "
        "(presets x seeds, mean +- std, significance).",
    )
    esub = p.add_subparsers(dest="experiment", metavar="EXPERIMENT", parser_class=type(p))
    p.set_defaults(func=_no_experiment, accepts_overrides=True)

    pp = esub.add_parser(
        "progressive",
        help="train small, grow, continue; compare with the target from scratch",
        description="Train a small model, grow it at --grow-at with --method, continue; train the "
        "target model from scratch on the same token budget. Writes report.md, "
        "results.json, loss_vs_flops.png, loss_vs_tokens.png into --out. Dotted overrides "
        "(--train.lr 1e-3) apply to both runs.",
    )
    pp.add_argument("--method", default=None, help="growth method (see --list; default sparkling)")
    pp.add_argument("--list", action="store_true", help="list the growth methods and whether their family is installed")
    pp.add_argument(
        "--preset",
        default=None,
        metavar="NAME|FILE.yaml",
        help="small-model preset, a name or a YAML file of your own (default: the method's own small shape)",
    )
    add_config_file_arg(pp)
    pp.add_argument(
        "--tokens",
        type=positive_int("--tokens"),
        default=None,
        help="token budget D of each run (default: 307,200 = 150 steps for a method's own small shape; "
        "with --preset: its steps x batch x seq_len)",
    )
    pp.add_argument(
        "--grow-at",
        type=nonneg_float("--grow-at"),
        default=0.5,
        help="growth point: a fraction of --tokens in (0, 1), or a token count > 1 (default 0.5)",
    )
    pp.add_argument(
        "--seeds",
        type=_csv("--seeds", int),
        default=None,
        help="comma-separated seeds; every run is repeated per seed (default 0,1,2)",
    )
    pp.add_argument("--seed", type=int, default=None, help="one seed (same as --seeds N)")
    pp.add_argument(
        "--recipe",
        choices=["paper", "preset"],
        default="paper",
        help="paper (default): SPARKLING's schedule - cosine, warmup 3%% of the steps, final lr ratio 0.01, "
        "re-warmup rho 1.3; preset: the preset's own schedule",
    )
    pp.add_argument(
        "--tau",
        default=None,
        metavar="ratio|STEPS",
        help="re-warmup steps of the new entries: 'ratio' (paper recipe default: 250/31,800 of the "
        "post-growth steps, the paper's ratio) or a step count (250 = the paper's literal value)",
    )
    pp.add_argument(
        "--steplaw-scratch",
        action="store_true",
        help="also train scratch at its own step-law lr (small lr x (N_large/N_small)^-0.713), as "
        "SPARKLING trains its from-scratch baselines",
    )
    pp.add_argument(
        "--scratch-lr",
        type=float,
        default=None,
        metavar="LR",
        help="peak lr of the from-scratch run, e.g. the best of an lr sweep (default: the method's swept "
        "lr where it has one, 2e-3 for the FFN-axis methods; else the small model's lr, untuned); the "
        "grown run keeps the small model's lr, as SPARKLING does",
    )
    pp.add_argument("--out", default=None, metavar="DIR", help="experiment directory (default runs/progressive-METHOD)")
    pp.add_argument("--quiet", action="store_true", help="no per-run training output")
    pp.set_defaults(func=run_progressive_cmd, accepts_overrides=True)

    pc = esub.add_parser(
        "compare",
        help="presets x seeds at equal tokens or equal FLOPs",
        description="Train every preset with every seed on the same budget; report mean +- std of "
        "the final validation loss (and of any chosen eval: --eval-task, --lm-eval), "
        "Welch's t-test of each preset against the first, a table (report.md) and a plot "
        "(compare.png).",
    )
    pc.add_argument(
        "--presets",
        required=True,
        type=_csv("--presets"),
        help="comma-separated presets (names or YAML files); the first is the reference",
    )
    add_config_file_arg(pc)
    pc.add_argument(
        "--seeds", type=_csv("--seeds", int), default=[0, 1, 2], help="comma-separated seeds (default 0,1,2)"
    )
    pc.add_argument(
        "--equal", choices=["tokens", "flops"], default="tokens", help="what is held equal (default tokens)"
    )
    pc.add_argument(
        "--tokens",
        type=positive_int("--tokens"),
        default=None,
        help="token budget per run (--equal tokens), or the reference preset's budget that sets the "
        "FLOPs budget (--equal flops); default: the first preset's steps x batch x seq_len",
    )
    pc.add_argument(
        "--eval-task",
        default=None,
        metavar="TASK",
        help="also compare synthetic-task accuracy (mqar|khop|induction) of every final checkpoint",
    )
    pc.add_argument(
        "--lm-eval",
        default=None,
        metavar="TASKS",
        type=_csv("--lm-eval"),
        help="also compare comma-separated lm-evaluation-harness tasks' main metric (acc, else the "
        "task's first) of every final checkpoint (needs `pip install 'nexus[eval]'`)",
    )
    pc.add_argument(
        "--lm-eval-include", default=None, metavar="DIR", help="directory of local lm-eval task YAMLs (works offline)"
    )
    pc.add_argument(
        "--lm-eval-limit",
        type=positive_int("--lm-eval-limit"),
        default=None,
        metavar="N",
        help="at most N examples per lm-eval task (faster, noisier)",
    )
    pc.add_argument("--out", default="runs/compare", metavar="DIR", help="experiment directory (default runs/compare)")
    pc.add_argument("--quiet", action="store_true", help="no per-run training output")
    pc.set_defaults(func=run_compare_cmd, accepts_overrides=True)


def _no_experiment(args, extra) -> int:
    from ..config import ConfigError

    raise ConfigError("which experiment? (valid: `nexus experiment progressive` or `nexus experiment compare`)")


def run_progressive_cmd(args, extra) -> int:
    from ..experiments.pair import PAIRS
    from ..experiments.progressive import DEFAULT_METHOD, method_table, plan_progressive, run_progressive

    if args.list:
        for row in method_table():
            mark = "" if row["installed"] else f"  [family {row['family']!r} not installed]"
            print(f"{row['name']:18s} {row['description']}{mark}")
        for name, (a, b, description) in PAIRS.items():
            print(f"{name:18s} method pair: {a} vs {b} - {description}")
        return 0
    if args.method in PAIRS:
        return _run_pair_cmd(args, extra)
    from ..experiments.report import gap_headline, savings_headline
    from ..experiments.stats import fmt

    t0 = time.perf_counter()
    plan = plan_progressive(
        args.method or DEFAULT_METHOD,
        args.preset,
        extra,
        args.tokens,
        args.grow_at,
        args.seed,
        args.out,
        seeds=args.seeds,
        recipe=args.recipe,
        tau=args.tau,
        steplaw_scratch=args.steplaw_scratch,
        scratch_lr=args.scratch_lr,
        config_mapping=config_file_mapping(args),
    )
    runs = list(plan["configs"][str(plan["seeds"][0])])
    print(
        f"progressive experiment: {plan['method']} | recipe {plan['recipe']} | {plan['token_budget']:,} tokens per run "
        f"| grow at step {plan['grow_step']}/{plan['steps']} | seeds {','.join(map(str, plan['seeds']))} | runs "
        f"{', '.join(runs)} | out {plan['out_dir']}"
    )
    r = run_progressive(plan, quiet=args.quiet)
    sm = r["summary"]
    print(f"final val loss over seeds {', '.join(map(str, r['seeds']))} (mean +- std, 95% CI):")
    for name, d in sm["final_val_loss"].items():
        print(f"  {name:16s} {fmt(d)}")
    pg = sm["grown_minus_scratch_final"]
    tp = "-" if pg["t_p"] is None else f"{pg['t_p']:.3g}"
    print(f"  grown - scratch  {fmt(pg['diff'])} | paired t p={tp}")
    if "scratch_val_loss_at_grown_flops" in sm:
        print(
            f"loss at equal FLOPs (the grown run's total): scratch {fmt(sm['scratch_val_loss_at_grown_flops'])} "
            f"vs grown {sm['final_val_loss']['grown']['mean']:.4f}"
        )
    print(savings_headline(r))
    print(f"eq. 29 FLOPs saved at equal tokens (not at equal loss): {100 * r['eq29']['flops_saved']:+.1f}%")
    print(gap_headline(r))
    print(f"report: {plan['out_dir']}/report.md | plots: {', '.join(r['plots'])} | {time.perf_counter() - t0:.0f} s")
    return 0


def _run_pair_cmd(args, extra) -> int:
    from ..config import ConfigError
    from ..experiments.pair import pair_headline, plan_pair, run_pair
    from ..experiments.stats import fmt

    if args.preset is not None or args.steplaw_scratch or args.scratch_lr is not None:
        raise ConfigError(
            f"--preset/--steplaw-scratch/--scratch-lr with the method pair {args.method!r} (valid: a pair uses its "
            f"methods' own same-size bases and compares grown runs only)"
        )
    t0 = time.perf_counter()
    seeds = [args.seed] if args.seed is not None else args.seeds
    plan = plan_pair(
        args.method,
        extra,
        args.tokens,
        args.grow_at,
        seeds,
        args.out,
        args.recipe,
        args.tau,
        config_mapping=config_file_mapping(args),
    )
    print(
        f"method pair {plan['pair']}: {' vs '.join(plan['methods'])} | seeds {','.join(map(str, plan['seeds']))} "
        f"| out {plan['out_dir']}"
    )
    r = run_pair(plan, quiet=args.quiet)
    for m in plan["methods"]:
        print(f"  {m:20s} final val loss {fmt(r['summary']['final_val_loss'][m])}")
    print(pair_headline(r))
    print(f"report: {plan['out_dir']}/report.md | {time.perf_counter() - t0:.0f} s")
    return 0


def run_compare_cmd(args, extra) -> int:
    from ..experiments.compare import difference_lines, plan_compare, run_compare

    t0 = time.perf_counter()
    plan = plan_compare(
        args.presets,
        args.seeds,
        args.equal,
        args.tokens,
        extra,
        args.out,
        args.eval_task,
        args.lm_eval,
        args.lm_eval_include,
        args.lm_eval_limit,
        config_mapping=config_file_mapping(args),
    )
    print(f"compare: {len(args.presets)} presets x {len(args.seeds)} seeds at equal {args.equal} | out {args.out}")
    for line in difference_lines(plan):  # what the comparison measures, said before anything trains
        print(line)
    r = run_compare(plan, quiet=args.quiet)
    for row in r["rows"]:
        p, pp = row.get("p_value_vs_reference"), row.get("paired_t_p")
        sig = (
            ""
            if p is None
            else f" | Welch p={p:.3g}"
            + ("" if pp is None else f", paired t p={pp:.3g}")
            + f" vs {r['rows'][0]['preset']}"
        )
        ci = "" if row.get("ci_low") is None else f" [95% CI {row['ci_low']:.4f}, {row['ci_high']:.4f}]"
        print(f"{row['preset']:24s} val loss {row['mean']:.4f} +- {row['std']:.4f}{ci} (n={len(row['values'])}){sig}")
    for ev in r.get("evals", []):
        for row in ev["rows"]:
            p = row.get("p_value_vs_reference")
            sig = "" if p is None else f" | p={p:.3g}"
            print(f"{row['preset']:24s} {ev['metric']} {row['mean']:.4f} +- {row['std']:.4f}{sig}")
    print(f"report: {args.out}/report.md | plot: {r['plot']} | {time.perf_counter() - t0:.0f} s")
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("experiment", __name__)
