"""results.json (every measured number, with the curves it came from) and report.md (rendered only
from results.json, so every figure in the report can be recomputed from the JSON)."""

from __future__ import annotations

from pathlib import Path

from ..config import ModelConfig
from ..config_migration import saved_run_config
from .curves import (
    active_params,
    cumulative_flops,
    first_crossing,
    read_metrics,
    train_curve,
    train_flops_per_token,
    val_curve,
    value_at,
)
from .runs import read_done


def eq29(n_small: float, n_large: float, d_e: float, d: float) -> dict:
    """SPARKLING eq. 29 via nexus.analysis.compute (owned by the SPARKLING engineer)."""
    from ..analysis.compute import flops_saved

    e = flops_saved(n_small, n_large, d_e, d)
    return {
        "n_small": n_small,
        "n_large": n_large,
        "d_e": d_e,
        "d": d,
        "c_star": e["c_star"],
        "c_scratch": e["c_scratch"],
        "flops_saved": e["saved"],
    }


def _model_summary(model_cfg: ModelConfig, seq_len: int) -> dict:
    fpt, source = train_flops_per_token(model_cfg, seq_len)
    return {
        "shape": f"{model_cfg.n_layers}x{model_cfg.d_model}",
        "active_params": active_params(model_cfg),
        "train_flops_per_token": fpt,
        "flops_source": source,
    }


def config_changes(before: ModelConfig, after: ModelConfig) -> list[str]:
    """["projection.rank_m: 96 -> 192", ...]: what growth changed in the model config."""
    from ..config import to_dict

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
        return out

    a, b = flat(to_dict(before)), flat(to_dict(after))
    # 0 means "derived" for these sizes; show the size the model really had, not the placeholder
    for d, cfg in ((a, before), (b, after)):
        for key, value in (("ffn_hidden", cfg.ffn), ("head_dim", cfg.hd), ("n_kv_heads", cfg.kv_heads)):
            d[key] = value
    return [f"{k}: {a.get(k)} -> {b[k]}" for k in b if a.get(k) != b[k]]


def _with_flops(points: list[dict], segments: list[dict]) -> list[dict]:
    return [{**p, "flops": cumulative_flops(p["tokens"], segments)} for p in points]


RUN_LABELS = {
    "grown": "grown",
    "scratch": "scratch (target width)",
    "small": "small only (whole budget)",
    "scratch-steplaw": "scratch at its step-law lr",
}


def _run_summary(out_dir: Path, name: str, tps: int, segments: list[dict]) -> dict:
    rows = read_metrics(out_dir / name / "metrics.jsonl")
    done = read_done(out_dir / name)
    tokens = int(done["step"]) * tps
    return {
        "segments": segments,
        "val_curve": _with_flops(val_curve(rows, tps), segments),
        "train_curve": _with_flops(train_curve(rows, tps), segments),
        "final_val_loss": float(done["val_loss"]),
        "tokens": tokens,
        "scored_tokens": int(done["tokens_seen"]),
        "total_flops": cumulative_flops(tokens, segments),
        "wall_s": done.get("wall_s"),
        "resumed_from": done.get("resumed_from"),
        "growth_events": [r for r in rows if r.get("event") == "growth"],
        "diagnostics": post_growth_diagnostics(rows),
    }


def post_growth_diagnostics(rows: list[dict]) -> dict:
    """The symmetry-lock metric and the per-layer activation RMS ratio logged after growth
    (nexus.growth.diagnostics.PostGrowthMonitor), one point per logged step."""
    lock = [
        {"step": int(r["step"]), "mean": r["symmetry_lock_mean"], "min": r["symmetry_lock_min"]}
        for r in rows
        if "symmetry_lock_mean" in r
    ]
    rms = [
        {"step": int(r["step"]), "per_layer": r["rms_ratio_per_layer"]}
        for r in rows
        if "rms_ratio_per_layer" in r and r.get("event") is None
    ]
    return {"symmetry_lock": lock, "rms_ratio": rms}


def seed_results(plan: dict, seed_dir: Path, configs: dict, small: dict, large: dict) -> dict:
    """Every measured number of one seed: curves, final losses, compute to reach the scratch loss."""
    tps = int(plan["tokens_per_step"])
    d_e = plan["grow_step"] * tps
    grown_segments = [
        {"start_tokens": 0.0, "flops_per_token": small["train_flops_per_token"]},
        {"start_tokens": d_e, "flops_per_token": large["train_flops_per_token"]},
    ]
    segs = {
        "grown": grown_segments,
        "small": [grown_segments[0]],
        "scratch": [{"start_tokens": 0.0, "flops_per_token": large["train_flops_per_token"]}],
    }
    segs["scratch-steplaw"] = segs["scratch"]
    runs = {name: _run_summary(seed_dir, name, tps, segs[name]) for name in configs}
    g, s = runs["grown"], runs["scratch"]
    target = s["final_val_loss"]
    ys = [p["val_loss"] for p in g["val_curve"]]
    flops_to_target = first_crossing([p["flops"] for p in g["val_curve"]], ys, target)
    tokens_to_target = first_crossing([p["tokens"] for p in g["val_curve"]], ys, target)
    return {
        "runs": runs,
        "target_val_loss": target,
        "grown_flops_to_target": flops_to_target,
        "grown_tokens_to_target": tokens_to_target,
        "measured_flops_saved": None if flops_to_target is None else 1.0 - flops_to_target / s["total_flops"],
        "final_val_loss_gap": g["final_val_loss"] - target,
        # equal compute the other way round: the scratch run's val loss when it had spent the grown run's FLOPs
        "scratch_val_loss_at_grown_flops": value_at(
            [p["flops"] for p in s["val_curve"]], [p["val_loss"] for p in s["val_curve"]], g["total_flops"]
        ),
    }


def summarize_seeds(per_seed: dict) -> dict:
    """Mean, std, 95% interval and paired tests over seeds (nexus.experiments.stats)."""
    from .stats import describe, gap_closed, paired

    seeds = list(per_seed)
    finals = {
        name: [per_seed[sd]["runs"][name]["final_val_loss"] for sd in seeds] for name in per_seed[seeds[0]]["runs"]
    }
    g, sc = finals["grown"], finals["scratch"]
    at_equal = [per_seed[sd]["scratch_val_loss_at_grown_flops"] for sd in seeds]
    saved = [per_seed[sd]["measured_flops_saved"] for sd in seeds]
    reached = [v for v in saved if v is not None]
    out = {
        "seeds": seeds,
        "final_val_loss": {name: describe(v) for name, v in finals.items()},
        "grown_minus_scratch_final": paired(g, sc),
        "measured_flops_saved": {"values": saved, "reached": len(reached), "of": len(saved), **describe(reached)},
    }
    if all(v is not None for v in at_equal):
        out["scratch_val_loss_at_grown_flops"] = describe(at_equal)
        out["grown_minus_scratch_at_equal_flops"] = paired(g, at_equal)
    if "small" in finals:
        # share of the small-to-scratch loss gap the grown run closed (1 = as good as scratch), the paper's
        # comparable number, with Fieller's interval over seeds (stats.gap_closed says why that method)
        out["gap_closed"] = gap_closed(finals["small"], g, sc)
        out["grown_minus_small_final"] = paired(g, finals["small"])
    if "scratch-steplaw" in finals:
        out["grown_minus_scratch_steplaw_final"] = paired(g, finals["scratch-steplaw"])
    return out


def build_progressive_results(plan: dict, out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    first = plan["configs"][str(plan["seeds"][0])]
    grown_cfg = saved_run_config(first["grown"])
    scratch_cfg = saved_run_config(first["scratch"])
    seq = grown_cfg.data.seq_len
    small, large = _model_summary(grown_cfg.model, seq), _model_summary(scratch_cfg.model, seq)
    per_seed = {
        str(sd): seed_results(plan, out_dir / f"seed{sd}", plan["configs"][str(sd)], small, large)
        for sd in plan["seeds"]
    }
    d_e = plan["grow_step"] * int(plan["tokens_per_step"])
    eq = eq29(small["active_params"], large["active_params"], d_e, plan["token_budget"])
    return {
        "kind": "progressive",
        "method": plan["method"],
        "family": plan["family"],
        "description": plan["description"],
        "spec": plan["spec"],
        "seeds": plan["seeds"],
        "recipe": plan.get("recipe"),
        "tau_rule": plan.get("tau_rule"),
        "schedules": plan.get("schedules", {}),
        "scratch_lr_rule": plan.get("scratch_lr_rule"),
        "token_budget": plan["token_budget"],
        "grow_step": plan["grow_step"],
        "grow_at_tokens": d_e,
        "grow_at_flops": d_e * small["train_flops_per_token"],
        "small": small,
        "large": large,
        "growth_changes": config_changes(grown_cfg.model, scratch_cfg.model),
        "per_seed": per_seed,
        "summary": summarize_seeds(per_seed),
        "eq29": eq,
    }


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def _ci(d: dict, digits: int = 4, pct: bool = False) -> str:
    """'mean +- std [95% CI lo, hi]' of a stats.describe() result."""
    if not d or d.get("n", 0) == 0:
        return "n/a"
    f = (lambda x: f"{100 * x:+.1f}%") if pct else (lambda x: f"{x:.{digits}f}")
    sd = f"{100 * d['std']:.1f}%" if pct else f"{d['std']:.{digits}f}"
    s = f"{f(d['mean'])} +- {sd}"
    return s + (f" [95% CI {f(d['ci_low'])}, {f(d['ci_high'])}]" if d.get("ci_low") is not None else "")


def _p(x) -> str:
    return "-" if x is None else f"{x:.3g}"


PAPER_GAP_CLOSED = "0.84-0.90"  # SPARKLING Table 1: grown ends +0.006/+0.014/+0.019 nats above scratch


def gap_headline(r: dict) -> str:
    """The main job's headline: the share of the small-to-scratch gap the grown run closed, with its interval."""
    from .stats import fmt_gap

    g = r["summary"].get("gap_closed")
    if g is None:
        return "share of the small-to-scratch gap closed: n/a (no small-only run)"
    return (
        f"share of the small-to-scratch gap closed, (small - grown) / (small - scratch) over seeds "
        f"{', '.join(map(str, r['seeds']))}: {fmt_gap(g)} (Fieller; SPARKLING's own: {PAPER_GAP_CLOSED})"
    )


def savings_headline(r: dict) -> str:
    """The one savings number the main job prints: measured, at equal loss, where it was reached."""
    ms = r["summary"]["measured_flops_saved"]
    n, k = ms["of"], ms["reached"]
    if k == 0:
        return (
            f"measured compute saved at equal loss: none - the grown run did not reach the scratch run's final "
            f"loss in any of {n} seeds (seeds {', '.join(map(str, r['seeds']))})"
        )
    if k == 1:  # one value has no spread: say so instead of printing +- 0
        s = (
            f"measured compute saved at equal loss: {_pct(ms['mean'])} "
            f"in the only one of {n} seeds that reached it (no spread)"
        )
    else:
        s = f"measured compute saved at equal loss: {_ci(ms, pct=True)} over the {k} of {n} seeds that reached it"
    return s + ("" if k == n else f" ({n - k} seed(s) never reached the scratch loss: no saving there)")


def render_progressive_report(r: dict) -> str:
    sm, eq = r["summary"], r["eq29"]
    fin = sm["final_val_loss"]
    seeds = ", ".join(map(str, r["seeds"]))
    lines = [
        f"# Progressive experiment: {r['method']}",
        "",
        f"{r['description']} (growth family `{r['family']}`; seeds {seeds}; recipe `{r.get('recipe')}`).",
        "",
        f"- token budget D = {r['token_budget']:,} tokens per run; growth at D_e = {r['grow_at_tokens']:,.0f} tokens "
        f"(step {r['grow_step']})",
        f"- small model {r['small']['shape']}: {r['small']['active_params']:,} active params, "
        f"{r['small']['train_flops_per_token']:.4g} training FLOPs/token",
        f"- target model {r['large']['shape']}: {r['large']['active_params']:,} active params, "
        f"{r['large']['train_flops_per_token']:.4g} training FLOPs/token",
        f"- growth changed: {'; '.join(r['growth_changes']) or 'no config field (same shapes)'}",
        f"- FLOPs per token from: {r['large']['flops_source']}",
    ]
    if r.get("tau_rule"):
        lines.append(
            f"- re-warmup of the new entries: rho and tau from the growth spec `{r['spec'].get('rewarmup')}`; "
            f"tau = {r['tau_rule']}"
        )
    if r.get("scratch_lr_rule"):
        lines.append(f"- from-scratch peak lr: {r['scratch_lr_rule']} (the grown run keeps the small model's lr)")
    lines += ["", "## Schedules", "", "| run | lr schedule |", "|---|---|"]
    lines += [f"| {RUN_LABELS.get(n, n)} | {d} |" for n, d in r.get("schedules", {}).items()]
    lines += [
        "",
        f"## Final validation loss over {len(r['seeds'])} seed(s)",
        "",
        "mean +- sample std, 95% Student-t interval of the mean (nexus.experiments.stats).",
        "",
        "| run | final val loss |",
        "|---|---|",
    ]
    lines += [f"| {RUN_LABELS.get(n, n)} | {_ci(d)} |" for n, d in fin.items()]
    pg = sm["grown_minus_scratch_final"]
    lines += [
        "",
        f"- grown - scratch (paired by seed): {_ci(pg['diff'])}; paired t p = {_p(pg['t_p'])}, "
        f"Wilcoxon p = {_p(pg['wilcoxon_p'])}",
    ]
    if "grown_minus_small_final" in sm:
        ps = sm["grown_minus_small_final"]
        lines.append(f"- grown - small only (paired): {_ci(ps['diff'])}; paired t p = {_p(ps['t_p'])}")
        lines.append(f"- {gap_headline(r)}")
    if "grown_minus_scratch_steplaw_final" in sm:
        pl = sm["grown_minus_scratch_steplaw_final"]
        lines.append(f"- grown - scratch at its step-law lr (paired): {_ci(pl['diff'])}; paired t p = {_p(pl['t_p'])}")
    lines += [
        "",
        "## Compute to reach the from-scratch model's final validation loss (measured)",
        "",
        f"- {savings_headline(r)}",
        "- per seed: the grown run's FLOPs when its validation curve first reaches that seed's scratch final "
        "loss (linear interpolation between evaluations), as a saving against the scratch run's FLOPs",
    ]
    if "scratch_val_loss_at_grown_flops" in sm:
        pe = sm["grown_minus_scratch_at_equal_flops"]
        lines += [
            f"- loss at equal FLOPs: the scratch run at the grown run's total FLOPs had val loss "
            f"{_ci(sm['scratch_val_loss_at_grown_flops'])} vs the grown run's {_ci(fin['grown'])}; grown - "
            f"scratch {_ci(pe['diff'])}, paired t p = {_p(pe['t_p'])}"
        ]
    lines += [
        "",
        "| seed | grown | scratch | small | scratch at grown FLOPs | measured saved |",
        "|---|---|---|---|---|---|",
    ]
    for sd, ps in r["per_seed"].items():
        ru = ps["runs"]
        sml = f"{ru['small']['final_val_loss']:.4f}" if "small" in ru else "-"
        eqf = ps["scratch_val_loss_at_grown_flops"]
        lines.append(
            f"| {sd} | {ru['grown']['final_val_loss']:.4f} | {ru['scratch']['final_val_loss']:.4f} | {sml} | "
            f"{'-' if eqf is None else f'{eqf:.4f}'} | "
            f"{'not reached' if ps['measured_flops_saved'] is None else _pct(ps['measured_flops_saved'])} |"
        )
    lines += [
        "",
        "## FLOPs saved at equal tokens (SPARKLING eq. 29)",
        "",
        f"C* = 6(N_small D_e + N_large (D - D_e)) = {eq['c_star']:.3e}; "
        f"C_scratch = 6 N_large D = {eq['c_scratch']:.3e}; "
        f"eq. 29 FLOPs saved at equal tokens = {_pct(eq['flops_saved'])}",
        "",
        "This is what growing saves at the same token budget, whatever the loss; the measured number above is "
        "the saving at equal loss.",
    ]
    diag = _diagnostics_lines(r)
    if diag:
        lines += ["", "## Symmetry and activation scale after growth (SPARKLING Sec. 4.1, Fig. 4 / App. C)", ""] + diag
    if r.get("plots"):
        lines += ["", "## Plots", "", "Every seed faint, the mean over seeds bold.", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in r["plots"]]
    return "\n".join(lines) + "\n"


def _diagnostics_lines(r: dict) -> list[str]:
    from .stats import describe

    lines = []
    locks = [ps["runs"]["grown"]["diagnostics"]["symmetry_lock"] for ps in r["per_seed"].values()]
    if all(locks):
        first, last = describe([lk[0]["mean"] for lk in locks]), describe([lk[-1]["mean"] for lk in locks])
        lines.append(
            f"- symmetry lock (mean cosine between each copied channel and its source; 1 = still locked): "
            f"{_ci(first, 3)} at step {locks[0][0]['step']}, {_ci(last, 3)} at the end (step {locks[0][-1]['step']})"
        )
    rms = [ps["runs"]["grown"]["diagnostics"]["rms_ratio"] for ps in r["per_seed"].values()]
    if all(rms):
        dev = describe([max(abs(x - 1) for x in rr[-1]["per_layer"]) for rr in rms])
        lines.append(
            f"- activation RMS ratio per layer (grown model / the model just before growth, same probe batch): "
            f"largest deviation from 1 at the end {_ci(dev, 3)}"
        )
    return lines
