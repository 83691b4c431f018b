"""Head-to-head growth of two methods from same-size bases at equal tokens (`nexus experiment
progressive --method PAIR`), the comparison behind Nexusformer's "matches TokenFormer's perplexity with
41.5% less training compute" (Nexusformer Sec. 4.3).

Per seed both methods' grown runs share the token budget, the growth point, the recipe and the data
order. The reference (the pair's second method, TokenFormer) sets the target: its final validation
loss. The measured number is the compute the first method's grown run needed to first reach that
loss (interpolated on its loss-vs-FLOPs curve), as a saving against the reference run's total FLOPs;
where it never reaches it, the reference's compute to reach the first method's final loss is given
instead (a negative saving). Statistics over seeds: nexus.experiments.stats.
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..config import ConfigError
from ..config_migration import saved_run_config
from .curves import first_crossing
from .runs import run_resumable, write_json_atomic, write_text_atomic

# name -> (method, reference method, description)
PAIRS = {
    "nexus-vs-tokenformer": (
        "nexus-rank-matched",
        "tokenformer-matched",
        "Nexusformer (Nexus-Rank M 144->192, A 160->320) vs TokenFormer (Q/K/V parameter tokens "
        "242->496): the same parameter count per projection before and after growth",
    ),
}


def plan_pair(
    name: str,
    overrides: list[str] | None = None,
    tokens: int | None = None,
    grow_at: float = 0.5,
    seeds: list[int] | None = None,
    out: str | None = None,
    recipe: str = "paper",
    tau=None,
    eval_points: int = 10,
    config_mapping: dict | None = None,
    variants: dict | None = None,
) -> dict:
    """variants: a study's own methods by name (progressive.method_variant), used in place of the registered ones."""
    from .progressive import plan_progressive

    if name not in PAIRS:
        raise ConfigError(f"--method={name!r} is not a method pair (valid: {', '.join(PAIRS)})")
    a, b, description = PAIRS[name]
    out_dir = Path(out or f"runs/progressive-{name}")
    plans = {
        m: plan_progressive(
            (variants or {}).get(m, m),
            None,
            list(overrides or []),
            tokens,
            grow_at,
            None,
            str(out_dir / m),
            eval_points,
            seeds,
            recipe,
            tau,
            config_mapping=config_mapping,
        )
        for m in (a, b)
    }
    pa, pb = plans[a], plans[b]
    for key in ("token_budget", "grow_step", "tokens_per_step"):
        if pa[key] != pb[key]:
            raise ConfigError(
                f"method pair {name!r}: {a} and {b} differ in {key} ({pa[key]} vs {pb[key]}) "
                f"(valid: methods on the same batch shape)"
            )
    for p in plans.values():  # only the grown runs: the two methods' scratch targets are different architectures
        p["configs"] = {sd: {"grown": c["grown"]} for sd, c in p["configs"].items()}
        p["schedules"] = {"grown": p["schedules"]["grown"]}
    return {
        "kind": "pair",
        "pair": name,
        "description": description,
        "methods": [a, b],
        "seeds": pa["seeds"],
        "out_dir": str(out_dir),
        "plans": plans,
    }


def run_pair(plan: dict, quiet: bool = True, say=print) -> dict:
    from .runs import experiment_dir

    with experiment_dir(Path(plan["out_dir"])):
        return _run_pair(plan, quiet, say)


def _run_pair(plan: dict, quiet: bool, say) -> dict:
    from .progressive import _check_same_plan
    from .runs import record_outputs

    out_dir = Path(plan["out_dir"])
    for _m, p in plan["plans"].items():
        _check_same_plan(Path(p["out_dir"]), p)
    out_dir.mkdir(parents=True, exist_ok=True)
    for m, p in plan["plans"].items():
        Path(p["out_dir"]).mkdir(parents=True, exist_ok=True)
        write_json_atomic(Path(p["out_dir"]) / "plan.json", p)
        for sd in plan["seeds"]:
            say(f"[{m} seed {sd}] grown run")
            cfg = saved_run_config(copy.deepcopy(p["configs"][str(sd)]["grown"]))
            run_resumable(cfg, Path(p["out_dir"]) / f"seed{sd}" / "grown", quiet=quiet, say=say)
            record_outputs(
                out_dir, [Path(p["out_dir"]) / "plan.json"], runs=[Path(p["out_dir"]) / f"seed{sd}" / "grown"]
            )
    results = build_pair_results(plan)
    results["plots"] = [plot_pair(results, out_dir / "pair_loss_vs_flops.png")]
    write_json_atomic(out_dir / "results.json", results)
    write_text_atomic(out_dir / "report.md", render_pair_report(results))
    record_outputs(out_dir, ["results.json", "report.md", *results["plots"]])
    return results


def build_pair_results(plan: dict) -> dict:
    from .progressive import dry_run_growth, resolve_method
    from .report import _model_summary, _run_summary
    from .stats import describe, paired

    a, b = plan["methods"]
    methods, curves = {}, {}
    for m in (a, b):
        p = plan["plans"][m]
        first = plan["plans"][m]["configs"][str(plan["seeds"][0])]["grown"]
        cfg = saved_run_config(first)
        meth = resolve_method(m)
        small = _model_summary(cfg.model, cfg.data.seq_len)
        growth = cfg.train.hook("growth")
        assert growth is not None  # the grown run's config: the growth it planned
        large = _model_summary(dry_run_growth(cfg, meth, growth["spec"]), cfg.data.seq_len)
        d_e = p["grow_step"] * p["tokens_per_step"]
        segs = [
            {"start_tokens": 0.0, "flops_per_token": small["train_flops_per_token"]},
            {"start_tokens": d_e, "flops_per_token": large["train_flops_per_token"]},
        ]
        curves[m] = {
            str(sd): _run_summary(Path(p["out_dir"]) / f"seed{sd}", "grown", p["tokens_per_step"], segs)
            for sd in plan["seeds"]
        }
        methods[m] = {
            "small": small,
            "large": large,
            "total_params": p["total_params"],
            "schedule": p["schedules"]["grown"],
        }
    per_seed = {}
    grow_step = plan["plans"][a]["grow_step"]
    grow_flops = grow_step * plan["plans"][a]["tokens_per_step"] * methods[a]["small"]["train_flops_per_token"]
    for sd in map(str, plan["seeds"]):
        ra, rb = curves[a][sd], curves[b][sd]
        target = rb["final_val_loss"]
        hit = first_crossing([q["flops"] for q in ra["val_curve"]], [q["val_loss"] for q in ra["val_curve"]], target)
        # a target reached before growth measures the two bases, not the two growth methods
        row = {
            "runs": {a: ra, b: rb},
            "target_val_loss": target,
            "flops_to_target": hit,
            "reached_before_growth": hit is not None and hit <= grow_flops,
            "val_loss_at_growth": {m: _loss_at_step(r["val_curve"], grow_step) for m, r in ((a, ra), (b, rb))},
            "saved": None if hit is None else 1.0 - hit / rb["total_flops"],
        }
        if hit is None:  # the reference reaches the first method's final loss earlier: a negative saving
            back = first_crossing(
                [q["flops"] for q in rb["val_curve"]], [q["val_loss"] for q in rb["val_curve"]], ra["final_val_loss"]
            )
            row["reference_flops_to_first_final"] = back
            row["saved"] = None if back is None else back / ra["total_flops"] - 1.0
        per_seed[sd] = row
    fa = [per_seed[sd]["runs"][a]["final_val_loss"] for sd in per_seed]
    fb = [per_seed[sd]["runs"][b]["final_val_loss"] for sd in per_seed]
    saved = [r["saved"] for r in per_seed.values()]
    return {
        "kind": "pair",
        "pair": plan["pair"],
        "description": plan["description"],
        "methods": plan["methods"],
        "seeds": plan["seeds"],
        "token_budget": plan["plans"][a]["token_budget"],
        "grow_step": plan["plans"][a]["grow_step"],
        "sizes": methods,
        "per_seed": per_seed,
        "summary": {
            "final_val_loss": {a: describe(fa), b: describe(fb)},
            "a_minus_b_final": paired(fa, fb),
            "saved": {"values": saved, **describe([v for v in saved if v is not None])},
            "reached": sum(r["flops_to_target"] is not None for r in per_seed.values()),
            "reached_before_growth": sum(r["reached_before_growth"] for r in per_seed.values()),
        },
    }


def _loss_at_step(curve: list[dict], step: int) -> float | None:
    """The validation loss evaluated at `step` (None when no evaluation fell on it)."""
    return next((q["val_loss"] for q in curve if q["step"] == step), None)


def pair_headline(r: dict) -> str:
    from .report import _ci

    a, b = r["methods"]
    return (
        f"{a} vs {b}: compute saved to reach {b}'s final validation loss (measured, per seed): "
        f"{_ci(r['summary']['saved'], pct=True)} ({r['summary']['reached']} of {len(r['seeds'])} seeds reached it "
        f"directly, {r['summary']['reached_before_growth']} of them before the growth step, where it measures the "
        f"bases, not growth; negative = {b} needed less)"
    )


def render_pair_report(r: dict) -> str:
    from .report import _ci, _p

    a, b = r["methods"]
    sm = r["summary"]
    lines = [
        f"# Growth head-to-head: {r['pair']}",
        "",
        f"{r['description']}; seeds {', '.join(map(str, r['seeds']))}; "
        f"{r['token_budget']:,} tokens per run, growth at step {r['grow_step']}.",
        "",
        "| method | base total params | grown total params | training FLOPs/token before -> after | schedule |",
        "|---|---|---|---|---|",
    ]
    for m in (a, b):
        z = r["sizes"][m]
        lines.append(
            f"| {m} | {z['total_params']['small']:,} | {z['total_params']['large']:,} | "
            f"{z['small']['train_flops_per_token']:.4g} -> "
            f"{z['large']['train_flops_per_token']:.4g} | {z['schedule']} |"
        )
    lines += ["", "| method | final val loss (mean +- std, 95% CI) |", "|---|---|"]
    lines += [f"| {m} | {_ci(sm['final_val_loss'][m])} |" for m in (a, b)]
    d = sm["a_minus_b_final"]
    lines += [
        "",
        f"- {a} - {b} (paired by seed): {_ci(d['diff'])}; "
        f"paired t p = {_p(d['t_p'])}, Wilcoxon p = {_p(d['wilcoxon_p'])}",
        f"- {pair_headline(r)}",
        "",
        f"| seed | {a} at growth | {b} at growth | {a} final | {b} final | saved | target reached before growth |",
        "|---|---|---|---|---|---|---|",
    ]
    for sd, row in r["per_seed"].items():
        sv = "n/a" if row["saved"] is None else f"{100 * row['saved']:+.1f}%"
        at = [row["val_loss_at_growth"][m] for m in (a, b)]
        at = ["n/a" if v is None else f"{v:.4f}" for v in at]
        lines.append(
            f"| {sd} | {at[0]} | {at[1]} | {row['runs'][a]['final_val_loss']:.4f} | "
            f"{row['runs'][b]['final_val_loss']:.4f} | {sv} | {'yes' if row['reached_before_growth'] else 'no'} |"
        )
    lines += ["", *[f"![{Path(p).stem}]({Path(p).name})" for p in r.get("plots", [])]]
    return "\n".join(lines) + "\n"


def plot_pair(r: dict, path: Path) -> str:
    from ..figures import pyplot, save_figure
    from .plots import mean_curve

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for m, color in zip(r["methods"], ("tab:blue", "tab:orange")):
        cs = [row["runs"][m]["val_curve"] for row in r["per_seed"].values()]
        for c in cs:
            ax.plot([q["flops"] for q in c], [q["val_loss"] for q in c], color=color, alpha=0.25, lw=1)
        xs, ys = mean_curve(cs, "flops", "val_loss")
        ax.plot(xs, ys, "o-", color=color, ms=3, lw=2, label=f"{m}, mean of {len(cs)} seeds")
    vals = [
        q["val_loss"] for row in r["per_seed"].values() for run in row["runs"].values() for q in run["val_curve"][1:]
    ]
    if vals:
        ax.set_ylim(min(vals) - 0.02, max(vals) + 0.05)
    ax.set(xlabel="training FLOPs", ylabel="validation loss (faint: each seed)", title=r["pair"])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    return str(path)
