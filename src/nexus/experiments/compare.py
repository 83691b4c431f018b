"""`nexus experiment compare`: presets x seeds on one budget (equal tokens or equal training FLOPs).

Reports mean +- sample std of the final validation loss per preset and Welch's t-test (scipy) of
each preset against the first one, as a table (report.md), results.json and compare.png; the same
for each chosen eval of the final checkpoints (a synthetic task's accuracy, lm-eval tasks' main
metric). Runs live in OUT/<preset>/seed<k> and are resumable like every experiment run; a finished
run's eval results are stored in its evals.json and not recomputed.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from ..config import ConfigError
from ..config_migration import saved_run_config
from ..config_overrides import merge_mapping, parse_overrides
from .curves import train_flops_per_token
from .runs import read_done, run_resumable, write_json_atomic, write_text_atomic

PLAN_FILE = "plan.json"
EVALS_FILE = "evals.json"  # per run directory: {settings key: result}, the eval cache


EVAL_TASKS = ("mqar", "khop", "induction")


def plan_compare(
    presets: list[str],
    seeds: list[int],
    equal: str = "tokens",
    tokens: int | None = None,
    overrides: list[str] | None = None,
    out: str = "runs/compare",
    eval_task: str | None = None,
    lm_eval: list[str] | None = None,
    lm_eval_include: str | None = None,
    lm_eval_limit: int | None = None,
    config_mapping: dict | None = None,
) -> dict:
    """Validate every run and return the plan; trains nothing. config_mapping: the fields a --config file
    names, merged onto each preset before `overrides`."""
    from ..presets import get_preset, preset_label
    from ..train.precision import pin_experiment_dtype

    if equal not in ("tokens", "flops"):
        raise ConfigError(f"--equal={equal!r} (valid: tokens|flops)")
    if eval_task is not None and eval_task not in EVAL_TASKS:
        raise ConfigError(f"--eval-task={eval_task!r} (valid: {'|'.join(EVAL_TASKS)})")
    labels = [preset_label(p) for p in presets]  # a preset file is named by its stem in directories and reports
    if len(set(labels)) != len(labels):
        raise ConfigError(
            f"--presets={','.join(presets)!r} names a preset twice (valid: distinct presets; preset "
            "files with distinct names)"
        )
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds={','.join(map(str, seeds))!r} names a seed twice (valid: distinct seeds)")
    cfgs = []
    for name in presets:
        cfg = get_preset(name)
        pin_experiment_dtype(cfg)  # arms of different widths in one dtype, float32 unless set
        if config_mapping:
            merge_mapping(cfg, copy.deepcopy(config_mapping))
        parse_overrides(cfg, list(overrides or []))
        cfgs.append(cfg.validate())
        if lm_eval and cfg.data.source.startswith("synthetic:"):
            # Its vocabulary is the synthetic task's tokens: text would index past the embedding, after training.
            raise ConfigError(
                f"--lm-eval with preset {name!r}: it trains on {cfg.data.source}, not text "
                f"(valid: presets trained on text, or --eval-task for synthetic accuracy)"
            )
    differences = arm_differences(presets, labels, cfgs)
    tps = [c.train.batch_size * c.train.grad_accum * c.data.seq_len for c in cfgs]
    ref_tokens = int(tokens) if tokens is not None else cfgs[0].train.steps * tps[0]
    fpt = [train_flops_per_token(c.model, c.data.seq_len) for c in cfgs]
    flops_budget = ref_tokens * fpt[0][0]
    runs = []
    for name, cfg, t, (f, source) in zip(labels, cfgs, tps, fpt):
        budget_tokens = ref_tokens if equal == "tokens" else flops_budget / f
        steps = math.ceil(budget_tokens / t)
        if steps < 1:
            raise ConfigError(f"--tokens={ref_tokens} gives preset {name!r} no training step (valid: a larger budget)")
        for seed in seeds:
            c = copy.deepcopy(cfg)
            tc = c.train
            tc.steps, tc.seed, tc.eval_every, tc.sample_every = steps, seed, 0, 0
            tc.save_every, tc.keep_last, tc.log_every = max(1, steps // 4), 1, max(1, steps // 20)
            from ..train.hooks import configured_hooks

            try:  # a bad hook entry (a growth outside the budget, a spec that does not apply)
                # fails before any run trains
                configured_hooks(c)
            except ConfigError as e:
                raise ConfigError(f"preset {name!r}: {e}") from None
            tc.out_dir = str(Path(out) / name / f"seed{seed}")
            runs.append(
                {
                    "preset": name,
                    "seed": seed,
                    "steps": steps,
                    "train_flops_per_token": f,
                    "flops_source": source,
                    "config": c.to_dict(),
                }
            )
    lm_spec = _plan_lm_eval(lm_eval, lm_eval_include, lm_eval_limit)  # after the cheap checks: it loads data
    # "presets" holds what was asked for (names or files), "labels" what runs and reports call them
    return {
        "kind": "compare",
        "presets": presets,
        "labels": labels,
        "seeds": seeds,
        "equal": equal,
        "eval_task": eval_task,
        "lm_eval": lm_spec,
        "reference_tokens": ref_tokens,
        "flops_budget": flops_budget,
        "out_dir": str(out),
        "differences": differences,
        "runs": runs,
    }


# what the plan sets itself for every run (the budget, the seed, how often to log, evaluate and save, where)
PLANNED_FIELDS = {
    "preset",
    "growth_history",
    "train.steps",
    "train.seed",
    "train.eval_every",
    "train.sample_every",
    "train.save_every",
    "train.keep_last",
    "train.log_every",
    "train.out_dir",
}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def arm_differences(presets: list[str], labels: list[str], cfgs: list) -> list[dict]:
    """For each arm after the first: the config fields in which it differs from the first arm (the plan's own
    settings left out), and those of them a preset file does not name itself (its base differs there): what the
    comparison measures besides the change the user wrote."""
    from ..config_migration import read_config_file
    from ..presets import is_preset_file

    ref = _flat(cfgs[0].to_dict())
    out = []
    for name, label, cfg in zip(presets[1:], labels[1:], cfgs[1:]):
        mine = _flat(cfg.to_dict())
        fields = [k for k in sorted(set(ref) | set(mine)) if k not in PLANNED_FIELDS and ref.get(k) != mine.get(k)]
        unnamed = []
        if is_preset_file(name):
            named = _flat({k: v for k, v in read_config_file(name, flag="--presets").items() if k != "preset"})
            unnamed = [k for k in fields if not any(k == n or k.startswith(n + ".") for n in named)]
        out.append(
            {
                "arm": label,
                "reference": labels[0],
                "fields": [[k, ref.get(k), mine.get(k)] for k in fields],
                "not_in_file": unnamed,
            }
        )
    return out


def difference_lines(plan: dict, shown: int = 12) -> list[str]:
    """What each arm changes against the reference, in lines to print before anything trains."""
    lines = []
    for d in plan.get("differences", []):
        f = d["fields"]
        if not f:
            lines.append(f"{d['arm']} vs {d['reference']}: the same config (only the seed and budget differ)")
            continue
        parts = [f"{k} {json.dumps(a)} -> {json.dumps(b)}" for k, a, b in f[:shown]]
        more = f" and {len(f) - shown} more (plan.json holds every run's config)" if len(f) > shown else ""
        lines.append(f"{d['arm']} vs {d['reference']}: {len(f)} field(s) differ: {'; '.join(parts)}{more}")
        if d["not_in_file"]:
            lines.append(
                f"  warning: {len(d['not_in_file'])} of them are not set by {d['arm']}'s preset file (its "
                f"base differs from {d['reference']} there): {', '.join(d['not_in_file'][:shown])}"
            )
    return lines


def _plan_lm_eval(tasks: list[str] | None, include: str | None, limit: int | None) -> dict | None:
    """Find every lm-eval task and load its data now: a typo or an uncached dataset must fail before training."""
    if not tasks:
        if include is not None or limit is not None:
            raise ConfigError("--lm-eval-include/--lm-eval-limit without --lm-eval (valid: --lm-eval TASKS as well)")
        return None
    from ..eval.lm_eval_adapter import check_tasks_load, task_manager

    if len(set(tasks)) != len(tasks):
        raise ConfigError(f"--lm-eval={','.join(tasks)!r} names a task twice (valid: distinct tasks)")
    check_tasks_load(tasks, task_manager(tasks, include))
    # Absolute, so a resumed comparison started from another directory still finds the task files.
    return {"tasks": list(tasks), "include": None if include is None else str(Path(include).resolve()), "limit": limit}


def _cached_eval(run_dir: Path, settings: dict, compute):
    """compute() once per run and settings: a finished run's checkpoint never changes, so a resumed or
    re-reported comparison reads the stored result instead of re-running a possibly long eval."""
    f = run_dir / EVALS_FILE
    cache = json.loads(f.read_text()) if f.is_file() else {}
    key = json.dumps(settings, sort_keys=True)
    if key not in cache:
        cache[key] = compute()
        write_json_atomic(f, cache)
    return cache[key]


def _task_accuracy(run_dir: Path, task: str) -> float:
    """Synthetic-task accuracy of a finished run's checkpoint (nexus.eval.synthetic_eval)."""

    def compute():
        from ..checkpoint import load_checkpoint
        from ..eval.synthetic_eval import evaluate_synthetic

        model, cfg, _ = load_checkpoint(run_dir / "checkpoint")
        return float(evaluate_synthetic(model, cfg, task, 8, 32)["accuracy"])

    return float(_cached_eval(run_dir, {"synthetic": task, "batches": 8, "batch_size": 32}, compute))


def _lm_eval_results(run_dir: Path, spec: dict) -> dict:
    """{task: {metric: value}} of a finished run's checkpoint, through nexus.eval.lm_eval_adapter (which
    looks the tasks up again: cheap for local YAMLs, cached per process for lm-eval's bundled ones)."""

    def compute():
        from ..eval.lm_eval_adapter import NexusLM, evaluate_tasks

        return evaluate_tasks(
            NexusLM.from_checkpoint(run_dir / "checkpoint"), spec["tasks"], spec["include"], limit=spec["limit"]
        )

    return _cached_eval(run_dir, {"lm_eval": spec}, compute)


def main_metric(metrics: dict) -> str:
    """The number a task is compared on: acc when it reports one, else its first metric (lm-eval also
    reports sample_len, the number of examples scored, which is no score)."""
    scores = [k for k in metrics if k != "sample_len"]
    return "acc" if "acc" in scores else scores[0]


def eval_summaries(per_run: list[dict], order: list[str], task: str | None, lm_spec: dict | None) -> list[dict]:
    """One {metric, rows} per chosen eval; every value in its rows is a per-run number in results.json."""
    evals = []

    def add(metric: str, value_of, **extra):
        values = {p: [float(value_of(r)) for r in per_run if r["preset"] == p] for p in order}
        seeds = [r["seed"] for r in per_run if r["preset"] == order[0]]
        evals.append({"metric": metric, **extra, "rows": summarize(values, order, seeds)})

    if task:
        add(f"{task} accuracy", lambda r: r[f"{task}_accuracy"])
    if lm_spec:
        # Every task lm-eval reports a number for: the requested ones, and a group's subtasks too.
        for name, metrics in per_run[0]["lm_eval"].items():
            if set(metrics) - {"sample_len"}:
                m = main_metric(metrics)
                add(
                    f"lm-eval {name} {m}",
                    lambda r, name=name, m=m: r["lm_eval"][name][m],
                    lm_eval_task=name,
                    lm_eval_metric=m,
                )
    return evals


def summarize(values_by_preset: dict[str, list[float]], order: list[str], seeds: list[int] | None = None) -> list[dict]:
    """Per preset: mean, std, 95% t-interval (nexus.experiments.stats), Welch's t-test against the first
    preset, and, when both were run on the same seeds, the paired t-test and Wilcoxon test by seed."""
    from .stats import describe, paired, welch

    rows = []
    ref = values_by_preset[order[0]]
    for i, name in enumerate(order):
        vals = values_by_preset[name]
        d = describe(vals)
        row = {
            "preset": name,
            "values": vals,
            "mean": d["mean"],
            "std": d["std"],
            "ci_low": d["ci_low"],
            "ci_high": d["ci_high"],
            "p_value_vs_reference": None if i == 0 else welch(vals, ref),
        }
        if i and seeds is not None and len(vals) == len(ref) == len(seeds):
            pt = paired(vals, ref)
            row.update(paired_t_p=pt["t_p"], wilcoxon_p=pt["wilcoxon_p"], diff_vs_reference=pt["diff"])
        rows.append(row)
    return rows


def run_compare(plan: dict, quiet: bool = True, say=print) -> dict:
    from .runs import experiment_dir

    with experiment_dir(Path(plan["out_dir"])):
        return _run_compare(plan, quiet, say)


def _run_compare(plan: dict, quiet: bool, say) -> dict:
    from .plots import plot_compare
    from .runs import record_outputs

    out = Path(plan["out_dir"])
    f = out / PLAN_FILE
    if f.is_file() and json.loads(f.read_text()).get("runs") != json.loads(json.dumps(plan["runs"])):
        raise ConfigError(
            f"--out={str(out)!r} holds a different comparison (valid: the same settings to resume it, or another --out)"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(f, plan)
    labels = compare_labels(plan)
    finals: dict[str, list[float]] = {p: [] for p in labels}
    task, lm_spec = plan.get("eval_task"), plan.get("lm_eval")
    per_run = []
    for run in plan["runs"]:
        say(f"[{run['preset']} seed {run['seed']}] {run['steps']} steps")
        run_dir = Path(run["config"]["train"]["out_dir"])
        res = run_resumable(saved_run_config(copy.deepcopy(run["config"])), run_dir, quiet=quiet, say=say)
        record_outputs(out, [PLAN_FILE], runs=[run_dir])
        done = read_done(run_dir)
        finals[run["preset"]].append(float(done["val_loss"]))
        tc = run["config"]["train"]
        tokens = int(done["step"]) * tc["batch_size"] * tc["grad_accum"] * run["config"]["data"]["seq_len"]  # processed
        per_run.append(
            {
                "preset": run["preset"],
                "seed": run["seed"],
                "val_loss": float(done["val_loss"]),
                "tokens": tokens,
                "flops": tokens * run["train_flops_per_token"],
                "wall_s": res.get("wall_s"),
            }
        )
        if task:
            per_run[-1][f"{task}_accuracy"] = _task_accuracy(run_dir, task)
        if lm_spec:
            per_run[-1]["lm_eval"] = _lm_eval_results(run_dir, lm_spec)
    rows = summarize(finals, labels, plan["seeds"])
    results = {
        "kind": "compare",
        "equal": plan["equal"],
        "metric": "final validation loss",
        "rows": rows,
        "runs": per_run,
        "flops_source": plan["runs"][0]["flops_source"],
        "evals": eval_summaries(per_run, labels, task, lm_spec),
    }
    results["plot"] = plot_compare(rows, "final validation loss", out / "compare.png")
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "report.md", render_compare_report(results))
    record_outputs(out, [PLAN_FILE, "results.json", "report.md", results["plot"]])
    return results


def compare_labels(plan: dict) -> list[str]:
    """The presets as runs are labelled (a file by its stem); plans written before labels were stored
    name them again from "presets"."""
    from ..presets import preset_label

    return plan.get("labels") or [preset_label(p) for p in plan["presets"]]


def _p(p) -> str:
    return "-" if p is None else f"{p:.3g}"


def _stats_table(rows: list[dict]) -> list[str]:
    lines = [
        "| preset | mean | std | 95% CI | seeds | Welch p | paired t p | Wilcoxon p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ci = "-" if row.get("ci_low") is None else f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}]"
        lines.append(
            f"| {row['preset']} | {row['mean']:.4f} | {row['std']:.4f} | {ci} | {len(row['values'])} | "
            f"{_p(row['p_value_vs_reference'])} | {_p(row.get('paired_t_p'))} | {_p(row.get('wilcoxon_p'))} |"
        )
    return lines


def render_compare_report(r: dict) -> str:
    ref = r["rows"][0]["preset"]
    lines = [
        f"# Comparison at equal {r['equal']}",
        "",
        f"Final validation loss, mean +- sample std over seeds, 95% Student-t interval of the mean; p: two-sided "
        f"tests against `{ref}` (Welch: independent samples; paired t and Wilcoxon signed-rank: by seed). "
        f"Training FLOPs per token from: {r['flops_source']}.",
        "",
        *_stats_table(r["rows"]),
    ]
    for ev in r.get("evals", []):
        lines += [
            "",
            f"{ev['metric']} of the final checkpoints, mean +- sample std; p: Welch's t-test against `{ref}`.",
            "",
            *_stats_table(ev["rows"]),
        ]
    lines += ["", "| preset | seed | val loss | tokens | FLOPs |", "|---|---|---|---|---|"]
    for run in r["runs"]:
        lines.append(
            f"| {run['preset']} | {run['seed']} | {run['val_loss']:.4f} | {run['tokens']:,} | {run['flops']:.3e} |"
        )
    lines += ["", f"![compare]({Path(r['plot']).name})"]
    return "\n".join(lines) + "\n"
