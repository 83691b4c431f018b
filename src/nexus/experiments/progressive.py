"""`nexus experiment progressive`: does growing a trained small model save compute?

Two runs share one token budget D and one data stream:
  grown:   the small model trains for D_e tokens, grows with a named method at step grow_at
           (`nexus.growth.grow_in_training`, optimizer state and schedule carried), then continues;
  scratch: the target-size model (the grown model's own config) trains from scratch for D tokens.
The report gives the compute the grown run needed to reach the scratch run's final validation loss
(interpolated on its loss-vs-FLOPs curve) and SPARKLING's eq. 29 FLOPs saved.

Methods are one line each in METHODS: small preset (+ overrides), growth spec, description. The
target size is not written down twice: a dry-run growth of a freshly built small model yields it,
and that same dry run proves the method applies before any training starts.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError, RunConfig, apply_override, parse_overrides
from ..outdir import EXPERIMENT, claim_directory
from .runs import run_resumable, write_json_atomic

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class Method:
    name: str
    family: str  # growth family registered in nexus.growth
    preset: str  # the small model's preset
    spec: dict  # growth spec (without "family")
    description: str
    overrides: dict = field(default_factory=dict)  # dotted overrides that make the preset "small"
    needs: tuple = ()  # (dotted field, required value, why): the architectures the method applies to


# One line per method: name, family, small preset, spec, what it is, small-model overrides, needs.
# The quick defaults (`nexus experiment progressive`) grow a half-width baseline-tiny (d_model 64, 4 heads
# of 32) into the baseline-tiny width (d_model 128, FFN 352); re-warmup tau is scaled to ~300-step runs.
_HALF_WIDTH = {"model.d_model": 64, "model.n_heads": 4, "model.head_dim": 32}
_WIDTH_NEEDS = (("model.arch", "transformer", "width growth needs a transformer"),
                ("model.projection.kind", "linear", "width growth needs linear projections"))
_WIDTH = {"hidden": 128, "ffn": 352}
METHODS: dict[str, Method] = {m.name: m for m in [
    Method("sparkling", "width", "baseline-tiny", {**_WIDTH, "init": "copy,copy", "preserve": "rms", "rewarmup": "1.3,30"},
           "SPARKLING width growth d 64->128, FFN 192->352 (copy init, RMS-preserving, asymmetric state, re-warmup)",
           _HALF_WIDTH, _WIDTH_NEEDS),
    Method("sparkling-random", "width", "baseline-tiny", {**_WIDTH, "init": "random,random", "preserve": "rms", "rewarmup": "1.3,30"},
           "SPARKLING width growth d 64->128, FFN 192->352, random init of the new channels", _HALF_WIDTH, _WIDTH_NEEDS),
    Method("naive-copy", "width", "baseline-tiny", {**_WIDTH, "init": "copy,copy", "preserve": "none"},
           "width d 64->128, FFN 192->352 by copying channels, no rescale, no re-warmup (naive baseline)",
           _HALF_WIDTH, _WIDTH_NEEDS),
    Method("nexus-rank", "nexus_rank", "baseline-tiny", {"delta_m": 96, "delta_a": 256, "init": "exact", "cut": "in"},
           "Nexus-Rank dual-axis growth M 160->256, A 256->512 in Q/K/V (exact live cut)",
           {"model.projection.kind": "nexus_rank", "model.projection.rank_m": 160, "model.projection.rank_a": 256},
           (("model.projection.kind", "nexus_rank", "Nexus-Rank growth needs nexus_rank projections"),)),
    Method("tokenformer", "tokenformer", "baseline-tiny", {"add_tokens": 64, "init": "exact"},
           "TokenFormer: Q/K/V parameter tokens 64->128 (frozen sqrt(n) scale)",
           {"model.projection.kind": "pattention", "model.projection.param_tokens": 64},
           (("model.projection.kind", "pattention", "TokenFormer growth needs pattention projections"),)),
    Method("retrofit-ho", "retrofit", "baseline-tiny", {"kind": "higher-order", "mode": "lossless", "order": 2},
           "retrofit 4x128 with order-2 higher-order attention (lossless zero-gated, shared weights)", {},
           (("model.arch", "transformer", "a higher-order retrofit needs attention layers"),)),
]}
DEFAULT_METHOD = "sparkling"
# The methods' own small shapes run a quick budget (200 steps of 16x128 tokens = 409,600 tokens per run)
# so `nexus experiment progressive` finishes in minutes on a 2-core CPU; --tokens overrides it.
QUICK = {"train.steps": 200, "train.warmup_steps": 20}


def _get(cfg: RunConfig, dotted: str):
    obj = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def method_table() -> list[dict]:
    from ..growth import families

    installed = set(families())
    return [{"name": m.name, "family": m.family, "installed": m.family in installed, "description": m.description}
            for m in METHODS.values()]


def _resolve_method(name: str) -> Method:
    if name not in METHODS:
        raise ConfigError(f"--method={name!r} is not a known growth method (valid: {', '.join(METHODS)})")
    from ..growth import families

    m = METHODS[name]
    installed = families()
    if m.family not in installed:
        raise ConfigError(f"--method={name!r} needs growth family {m.family!r}, which is not installed in this build "
                          f"(installed: {', '.join(installed) or 'none'})")
    return m


def _small_config(m: Method, preset: str | None, overrides: list[str], seed: int | None) -> RunConfig:
    from ..presets import get_preset

    cfg = get_preset(preset or m.preset)
    if preset is None:  # the method's own small shape; a user preset is taken as the small model as is
        for k, v in {**QUICK, **m.overrides}.items():
            apply_override(cfg, k, v)
    parse_overrides(cfg, overrides)
    if seed is not None:
        cfg.train.seed = seed
    cfg.validate()
    for dotted, value, why in m.needs:
        have = _get(cfg, dotted)
        if have != value:
            raise ConfigError(f"--method={m.name!r} does not apply to this model: {dotted}={have!r} ({why}; "
                              f"valid: {dotted}={value!r})")
    return cfg


def _tokens_per_step(cfg: RunConfig) -> int:
    return cfg.train.batch_size * cfg.train.grad_accum * cfg.data.seq_len


def _parse_grow_at(grow_at: float, budget: int) -> int:
    """A fraction of the budget (0 < x <= 1; 1 is the end, outside) or a token count (x > 1) -> tokens."""
    if not (isinstance(grow_at, (int, float)) and math.isfinite(grow_at)) or grow_at <= 0:
        raise ConfigError(f"--grow-at={grow_at!r} (valid: a fraction in (0, 1) of the token budget, or a token count "
                          f"in (0, {budget}))")
    d_e = grow_at * budget if grow_at <= 1 else grow_at
    if d_e >= budget:
        raise ConfigError(f"--grow-at={grow_at!r} is {int(d_e)} tokens, outside the token budget of {budget} tokens "
                          f"(valid: a fraction in (0, 1), or a token count in (0, {budget}))")
    return int(d_e)


def _pick_eval_every(steps: int, grow_step: int, n_points: int) -> int:
    """About n_points evaluations; a divisor of grow_step when one is close, so the small model's
    loss right before growth is on the curve."""
    e = max(1, round(steps / n_points))
    for d in range(e, max(1, e // 2) - 1, -1):
        if grow_step % d == 0:
            return d
    return e


def dry_run_growth(cfg: RunConfig, m: Method, spec: dict):
    """Grow a freshly built small model once: proves the method applies and yields the target config."""
    import torch

    from ..growth import grow
    from ..models import build_model

    torch.manual_seed(cfg.train.seed)
    probe_cfg = copy.deepcopy(cfg)
    model = build_model(probe_cfg.model)
    try:
        _, new_cfg, _, _ = grow(model, probe_cfg, spec, None, 0)
    except ConfigError as e:
        raise ConfigError(f"--method={m.name!r} does not apply to this model: {e}") from None
    except (ValueError, KeyError, TypeError, RuntimeError, NotImplementedError) as e:
        raise ConfigError(f"--method={m.name!r} does not apply to this model ({type(e).__name__}: {e})") from None
    return new_cfg.model


def plan_progressive(method: str = DEFAULT_METHOD, preset: str | None = None, overrides: list[str] | None = None,
                     tokens: int | None = None, grow_at: float = 0.5, seed: int | None = None,
                     out: str | None = None, eval_points: int = 10) -> dict:
    """Validate everything and return the plan (configs of both runs); trains nothing."""
    m = _resolve_method(method)
    small = _small_config(m, preset, overrides or [], seed)
    tps = _tokens_per_step(small)
    budget = int(tokens) if tokens is not None else small.train.steps * tps
    if budget < 2 * tps:
        raise ConfigError(f"--tokens={budget} (valid: at least two optimizer steps = {2 * tps} tokens)")
    steps = math.ceil(budget / tps)
    d_e = _parse_grow_at(grow_at, budget)
    grow_step = round(d_e / tps)
    if not 1 <= grow_step <= steps - 1:
        raise ConfigError(f"--grow-at={grow_at!r} falls on step {grow_step} of {steps} (valid: a growth point with "
                          f"at least one step ({tps} tokens) before and after it)")
    spec = {"family": m.family, **m.spec}
    target_model = dry_run_growth(small, m, spec)

    out_dir = Path(out or f"runs/progressive-{m.name}")
    eval_every = _pick_eval_every(steps, grow_step, eval_points)
    tc = small.train
    tc.steps, tc.eval_every, tc.log_every = steps, eval_every, max(1, steps // 50)
    tc.save_every = max(1, steps // 4)  # step checkpoints make an interrupted experiment resumable
    tc.keep_last, tc.sample_every = 1, 0
    grown = copy.deepcopy(small)
    grown.train.grow_at, grown.train.growth = grow_step, spec
    scratch = copy.deepcopy(small)
    scratch.model = copy.deepcopy(target_model)
    _reset_growth_only_fields(scratch.model, small.model)
    scratch.growth_history = []
    for name, cfg in (("grown", grown), ("scratch", scratch)):
        cfg.train.out_dir = str(out_dir / name)
        cfg.preset = f"{small.preset}:{name}"
        cfg.validate()
    return {"kind": "progressive", "method": m.name, "family": m.family, "description": m.description,
            "spec": spec, "seed": small.train.seed, "token_budget": steps * tps, "tokens_per_step": tps,
            "steps": steps, "grow_step": grow_step, "grow_at_tokens": grow_step * tps, "out_dir": str(out_dir),
            "configs": {"grown": grown.to_dict(), "scratch": scratch.to_dict()}}


def _reset_growth_only_fields(model_cfg, small_model_cfg) -> None:
    """Fields that growth sets only to preserve the old function (frozen_* scales, the tied-head
    logit_scale, an adjusted norm_eps): a model trained from scratch uses its natural values."""
    import dataclasses

    proj = model_cfg.projection
    for f in dataclasses.fields(proj):
        if f.name.startswith("frozen_") or f.name.endswith("_frozen_n"):
            setattr(proj, f.name, f.default)
    if hasattr(model_cfg, "logit_scale"):
        model_cfg.logit_scale = type(model_cfg)().logit_scale
    model_cfg.norm_eps = small_model_cfg.norm_eps


def _check_same_plan(out_dir: Path, plan: dict) -> None:
    import json

    f = out_dir / PLAN_FILE
    if not f.is_file():
        return
    old = json.loads(f.read_text())
    if old.get("configs") != json.loads(json.dumps(plan["configs"])):
        raise ConfigError(f"--out={str(out_dir)!r} holds a different experiment ({old.get('method')}, "
                          f"{old.get('token_budget')} tokens) (valid: the same settings to resume it, or another --out)")


def run_progressive(plan: dict, quiet: bool = True, say=print) -> dict:
    """Run (or resume) both runs, then write results.json, report.md and the plots."""
    from .plots import plot_progressive
    from .report import build_progressive_results, render_progressive_report
    from .runs import write_text_atomic

    out_dir = Path(plan["out_dir"])
    claim_directory(out_dir, EXPERIMENT, resume=True)  # an earlier experiment here resumes; anything else is refused
    _check_same_plan(out_dir, plan)
    write_json_atomic(out_dir / PLAN_FILE, plan)
    for name in ("grown", "scratch"):
        say(f"[{name}] {_describe_run(plan, name)}")
        cfg = RunConfig.from_dict(copy.deepcopy(plan["configs"][name]))
        run_resumable(cfg, out_dir / name, quiet=quiet, say=say)
    results = build_progressive_results(plan, out_dir)
    results["plots"] = plot_progressive(results, out_dir)
    write_json_atomic(out_dir / "results.json", results)
    write_text_atomic(out_dir / "report.md", render_progressive_report(results))
    return results


def _describe_run(plan: dict, name: str) -> str:
    m = plan["configs"][name]["model"]
    shape = f"{m['n_layers']}x{m['d_model']}"
    if name == "grown":
        return (f"small {shape} for {plan['grow_at_tokens']:,} tokens, grow ({plan['method']}) at step "
                f"{plan['grow_step']}, continue to {plan['token_budget']:,} tokens")
    return f"target model from scratch for {plan['token_budget']:,} tokens"
