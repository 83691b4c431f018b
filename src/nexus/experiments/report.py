"""results.json (every measured number, with the curves it came from) and report.md (rendered only
from results.json, so every figure in the report can be recomputed from the JSON)."""
from __future__ import annotations

from pathlib import Path

from ..config import ModelConfig, RunConfig
from .curves import (active_params, cumulative_flops, first_crossing, read_metrics, train_curve, train_flops_per_token, val_curve,
                     value_at)
from .runs import read_done


def eq29(n_small: float, n_large: float, d_e: float, d: float) -> dict:
    """SPARKLING eq. 29 via nexus.analysis.compute (owned by the SPARKLING engineer)."""
    from ..analysis.compute import flops_saved

    e = flops_saved(n_small, n_large, d_e, d)
    return {"n_small": n_small, "n_large": n_large, "d_e": d_e, "d": d, "c_star": e["c_star"],
            "c_scratch": e["c_scratch"], "flops_saved": e["saved"]}


def _model_summary(model_cfg: ModelConfig, seq_len: int) -> dict:
    fpt, source = train_flops_per_token(model_cfg, seq_len)
    return {"shape": f"{model_cfg.n_layers}x{model_cfg.d_model}", "active_params": active_params(model_cfg),
            "train_flops_per_token": fpt, "flops_source": source}


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


def build_progressive_results(plan: dict, out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    grown_cfg = RunConfig.from_dict(plan["configs"]["grown"])
    scratch_cfg = RunConfig.from_dict(plan["configs"]["scratch"])
    seq = grown_cfg.data.seq_len
    small, large = _model_summary(grown_cfg.model, seq), _model_summary(scratch_cfg.model, seq)
    runs = {}
    for name in ("grown", "scratch"):
        rows = read_metrics(out_dir / name / "metrics.jsonl")
        done = read_done(out_dir / name)
        tps = int(plan["tokens_per_step"])
        tokens = int(done["step"]) * tps
        if name == "grown":
            d_e = plan["grow_step"] * tps
            segments = [{"start_tokens": 0.0, "flops_per_token": small["train_flops_per_token"]},
                        {"start_tokens": d_e, "flops_per_token": large["train_flops_per_token"]}]
        else:
            segments = [{"start_tokens": 0.0, "flops_per_token": large["train_flops_per_token"]}]
        vc = _with_flops(val_curve(rows, tps), segments)
        runs[name] = {"segments": segments, "val_curve": vc, "train_curve": _with_flops(train_curve(rows, tps), segments),
                      "final_val_loss": float(done["val_loss"]), "tokens": tokens,
                      "scored_tokens": int(done["tokens_seen"]), "total_flops": cumulative_flops(tokens, segments),
                      "wall_s": done.get("wall_s"), "resumed_from": done.get("resumed_from"), "growth_events": [r for r in rows if r.get("event") == "growth"]}
    g, s = runs["grown"], runs["scratch"]
    target = s["final_val_loss"]
    xs_f = [p["flops"] for p in g["val_curve"]]
    xs_t = [p["tokens"] for p in g["val_curve"]]
    ys = [p["val_loss"] for p in g["val_curve"]]
    flops_to_target = first_crossing(xs_f, ys, target)
    tokens_to_target = first_crossing(xs_t, ys, target)
    d_e = g["segments"][1]["start_tokens"]
    eq = eq29(small["active_params"], large["active_params"], d_e, g["tokens"])
    return {
        "kind": "progressive", "method": plan["method"], "family": plan["family"], "description": plan["description"],
        "spec": plan["spec"], "seed": plan["seed"], "token_budget": g["tokens"], "grow_step": plan["grow_step"],
        "grow_at_tokens": d_e, "grow_at_flops": cumulative_flops(d_e, g["segments"]),
        "small": small, "large": large, "growth_changes": config_changes(grown_cfg.model, scratch_cfg.model),
        "runs": runs,
        "target_val_loss": target,
        "grown_flops_to_target": flops_to_target, "grown_tokens_to_target": tokens_to_target,
        "measured_flops_saved": None if flops_to_target is None else 1.0 - flops_to_target / s["total_flops"],
        "final_val_loss_gap": g["final_val_loss"] - target,
        # equal compute the other way round: the scratch run's val loss when it had spent the grown run's FLOPs
        "scratch_val_loss_at_grown_flops": value_at([p["flops"] for p in s["val_curve"]],
                                                    [p["val_loss"] for p in s["val_curve"]], g["total_flops"]),
        "eq29": eq,
    }


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def render_progressive_report(r: dict) -> str:
    g, s = r["runs"]["grown"], r["runs"]["scratch"]
    eq = r["eq29"]
    lines = [
        f"# Progressive experiment: {r['method']}",
        "",
        f"{r['description']} (growth family `{r['family']}`, seed {r['seed']}).",
        "",
        f"- token budget D = {r['token_budget']:,} tokens; growth at D_e = {r['grow_at_tokens']:,.0f} tokens "
        f"(step {r['grow_step']})",
        f"- small model {r['small']['shape']}: {r['small']['active_params']:,} active params, "
        f"{r['small']['train_flops_per_token']:.4g} training FLOPs/token",
        f"- target model {r['large']['shape']}: {r['large']['active_params']:,} active params, "
        f"{r['large']['train_flops_per_token']:.4g} training FLOPs/token",
        f"- growth changed: {'; '.join(r['growth_changes']) or 'no config field (same shapes)'}",
        f"- FLOPs per token from: {r['large']['flops_source']}",
        "",
        "| run | final val loss | tokens | training FLOPs | wall time (s) |",
        "|---|---|---|---|---|",
        f"| grown | {g['final_val_loss']:.4f} | {g['tokens']:,} | {g['total_flops']:.3e} | {_secs(g['wall_s'], g)} |",
        f"| scratch | {s['final_val_loss']:.4f} | {s['tokens']:,} | {s['total_flops']:.3e} | {_secs(s['wall_s'], s)} |",
        "",
        "## Compute to reach the from-scratch model's final validation loss",
        "",
        f"- target: scratch final val loss {r['target_val_loss']:.4f}",
        _reach_line(r),
        f"- measured FLOPs saved: {_pct(r['measured_flops_saved'])} of the scratch run's {s['total_flops']:.3e} FLOPs",
        f"- final val loss gap (grown - scratch): {r['final_val_loss_gap']:+.4f}",
        _equal_flops_line(r),
        "",
        "## FLOPs saved at equal tokens (SPARKLING eq. 29)",
        "",
        f"C* = 6(N_small D_e + N_large (D - D_e)) = {eq['c_star']:.3e}; C_scratch = 6 N_large D = {eq['c_scratch']:.3e}; "
        f"FLOPs saved = 1 - C*/C_scratch = {_pct(eq['flops_saved'])}",
        "",
        "This is what growing saves at the same token budget; whether it is worth it depends on the loss gap above.",
    ]
    if r.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in r["plots"]]
    return "\n".join(lines) + "\n"


def _reach_line(r: dict) -> str:
    if r["grown_flops_to_target"] is None:
        return "- the grown run never reaches it within the budget"
    return (f"- the grown run reaches it after {r['grown_flops_to_target']:.3e} FLOPs "
            f"({r['grown_tokens_to_target']:,.0f} tokens), interpolated linearly between evaluations")


def _equal_flops_line(r: dict) -> str:
    v = r.get("scratch_val_loss_at_grown_flops")
    if v is None:
        return "- at the grown run's total FLOPs the scratch run has no evaluation in range"
    return (f"- at equal compute ({r['runs']['grown']['total_flops']:.3e} FLOPs, the grown run's total) the scratch run's "
            f"val loss was {v:.4f} (interpolated) vs the grown run's {r['runs']['grown']['final_val_loss']:.4f}")


def _secs(x, run: dict) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" + (f" (since resuming from {run['resumed_from']})" if run.get("resumed_from") else "")
