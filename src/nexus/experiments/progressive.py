"""`nexus experiment progressive`: does growing a trained small model save compute?

Per seed, runs that share one token budget D and one data stream (SPARKLING Table 1's rows):
  grown:   the small model trains for D_e tokens, grows with a named method at step grow_at
           (`nexus.growth.hook.GrowthHook`, the growth hook, optimizer state and schedule carried), then continues;
  scratch: the target-size model (the grown model's own config) trains from scratch for D tokens;
  small:   the small model alone for all D tokens ("Baseline (small)": how much of the gap growth closed);
  scratch-steplaw (optional): scratch at its own step-law learning rate, as SPARKLING trains its
           from-scratch baselines (growth keeps the small model's lr).
The report gives, over seeds (mean, std, 95% interval, paired tests: nexus.experiments.stats), the
compute the grown run needed to reach the scratch run's final validation loss (interpolated on its
loss-vs-FLOPs curve), the loss at equal FLOPs, and SPARKLING's eq. 29 FLOPs saved at equal tokens.

Recipes: `paper` (the default) is SPARKLING's schedule (App. B.2, Sec. 4.2.2): cosine, linear warmup
over 3% of the steps, final lr ratio 0.01, re-warmup rho = 1.3 with tau_w scaled to the paper's ratio
(250 of ~31,800 post-growth steps) or a literal step count; `preset` keeps the preset's schedule.

Methods are registered by their growth family (growth/methods.py: small preset (+ overrides), growth
spec, description), so a new family's methods appear here without an edit. The target size is not
written down twice: a dry-run growth of a freshly built small model yields it,
and that same dry run proves the method applies before any training starts.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ConfigError, RunConfig
from ..config_migration import saved_run_config
from ..config_overrides import apply_override, mapping_sets, merge_mapping, parse_overrides
from ..optim.schedules import schedule_of
from .runs import run_resumable, write_json_atomic

if TYPE_CHECKING:
    from ..growth.methods import Method

PLAN_FILE = "plan.json"
RECIPES = ("paper", "preset")
# SPARKLING: tau_w = 250 re-warmup steps out of ~31,800 post-growth steps (100B tokens at 768 x 4096 per step)
PAPER_TAU_RATIO = 250 / 31_800
PAPER_REWARMUP_RHO = 1.3
PAPER_WARMUP_FRACTION = 0.03  # App. B.2: linear warmup over 3% of the steps
PAPER_FINAL_LR_RATIO = 0.01  # App. B.2: decay to 1% of the peak
# Step law (Li et al. 2025, SPARKLING's ref. [18], Table 5): eta = 1.79 N^-0.713 D^0.307 with N the total
# parameters. At equal D and batch the D and batch terms cancel: eta_large = eta_small (N_large/N_small)^-0.713.
STEP_LAW_N_EXPONENT = -0.713
RUN_NAMES = ("grown", "scratch", "small", "scratch-steplaw")
DEFAULT_SEEDS = (0, 1, 2)


def methods() -> dict:
    """Every registered method, name -> growth.methods.Method: each growth family registers its own
    beside its grower (growth/methods.py), so this module lists none."""
    from ..growth.methods import PROGRESSIVE_METHODS

    return dict(PROGRESSIVE_METHODS.items())


DEFAULT_METHOD = "sparkling"
# The methods' own small shapes run a quick budget (150 steps of 16x128 tokens = 307,200 tokens per run)
# so the main job (3 seeds x grown, scratch, small) finishes in about 3 minutes on an idle 2-core CPU;
# --tokens overrides it.
QUICK = {"train.steps": 150, "train.warmup_steps": 15}
# where Method.lrs come from: 5 log-spaced lrs, one seed, the small and the scratch shape at the quick budget
# where the FFN-axis methods' lrs come from (report.md prints it beside the scratch lr)
MAIN_JOB_SWEEP = "leak-free tuning on seeds 100, 101: study progressive-main, benchmarks/results/progressive-main"


def method_table() -> list[dict]:
    from ..growth import families

    installed = set(families())
    return [
        {"name": m.name, "family": m.family, "installed": m.family in installed, "description": m.description}
        for m in methods().values()
    ]


def method_variant(
    base,
    name: str | None = None,
    spec: dict | None = None,
    overrides: dict | None = None,
    lrs: dict | None = None,
    note: str = "",
):
    """A study's own method: a registered one (name or Method) with its growth spec and small-model overrides
    changed (each merged over the base's), e.g. the same growth at another shape. Passed to plan_progressive as
    a Method, so the library's methods (and `--list`) stay as they are."""
    import dataclasses

    m = resolve_method(base) if isinstance(base, str) else base
    return dataclasses.replace(
        m,
        name=name or m.name,
        spec={**m.spec, **(spec or {})},
        overrides={**m.overrides, **(overrides or {})},
        lrs=m.lrs if lrs is None else lrs,
        description=m.description + (f" [{note}]" if note else ""),
    )


def resolve_method(name):
    """A registered method by name, or a Method given as it is (a study's variant); its family must be installed."""
    from ..growth.methods import Method

    known = methods()
    if not isinstance(name, Method) and name not in known:
        raise ConfigError(f"--method={name!r} is not a known growth method (valid: {', '.join(known)})")
    from ..growth import families

    m = name if isinstance(name, Method) else known[name]
    installed = families()
    if m.family not in installed:
        raise ConfigError(
            f"--method={name!r} needs growth family {m.family!r}, which is not installed in this build "
            f"(installed: {', '.join(installed) or 'none'})"
        )
    return m


def small_config(
    m, preset: str | None, overrides: list[str], seed: int | None, config_mapping: dict | None = None
) -> RunConfig:
    """Method m's small model: its preset with its own overrides and tuned lr (or a user preset as it is), a
    --config file's fields, then the command line's overrides; refused unless m's growth applies to it."""
    from ..presets import get_preset
    from ..train.precision import pin_experiment_dtype

    cfg = get_preset(preset or m.preset)
    pin_experiment_dtype(cfg)  # float32 unless the preset or the command line says otherwise (README's figures)
    if preset is None:  # the method's own small shape; a user preset is taken as the small model as is
        tuned = {"train.lr": m.lrs["small"]} if m.lrs else {}
        for k, v in {**QUICK, **m.overrides, **tuned}.items():
            apply_override(cfg, k, v)
    if config_mapping:  # a --config file's fields: over the preset, under the command line
        merge_mapping(cfg, copy.deepcopy(config_mapping))
    parse_overrides(cfg, overrides)
    if seed is not None:
        cfg.train.seed = seed
    cfg.validate()
    from ..growth import parse_growth_spec

    try:  # the family's spec is the one place that says which models it applies to
        parse_growth_spec({"family": m.family, **m.spec}, f"--method={m.name!r} growth").applies_to(cfg.model)
    except ConfigError as e:
        raise ConfigError(f"--method={m.name!r} does not apply to this model: {e}") from None
    return cfg


def tokens_per_step(cfg: RunConfig) -> int:
    """Tokens of one optimizer step."""
    return cfg.train.batch_size * cfg.train.grad_accum * cfg.data.seq_len


def _parse_grow_at(grow_at: float, budget: int) -> int:
    """A fraction of the budget (0 < x <= 1; 1 is the end, outside) or a token count (x > 1) -> tokens."""
    if not (isinstance(grow_at, (int, float)) and math.isfinite(grow_at)) or grow_at <= 0:
        raise ConfigError(
            f"--grow-at={grow_at!r} (valid: a fraction in (0, 1) of the token budget, or a token count "
            f"in (0, {budget}))"
        )
    d_e = grow_at * budget if grow_at <= 1 else grow_at
    if d_e >= budget:
        raise ConfigError(
            f"--grow-at={grow_at!r} is {int(d_e)} tokens, outside the token budget of {budget} tokens "
            f"(valid: a fraction in (0, 1), or a token count in (0, {budget}))"
        )
    return int(d_e)


def _pick_eval_every(steps: int, grow_step: int, n_points: int) -> int:
    """About n_points evaluations; a divisor of grow_step when one is close, so the small model's
    loss right before growth is on the curve."""
    e = max(1, round(steps / n_points))
    for d in range(e, max(1, e // 2) - 1, -1):
        if grow_step % d == 0:
            return d
    return e


def dry_run_growth(cfg: RunConfig, m, spec: dict):
    """Grow a freshly built small model once: proves the method applies and yields the target config."""
    import torch

    from ..growth import grow
    from ..models import build_model

    torch.manual_seed(cfg.train.seed)
    probe_cfg = copy.deepcopy(cfg)
    model = build_model(probe_cfg.model)
    try:
        _, new_cfg, _, _ = grow(model, probe_cfg, spec, None, 0)
    except ConfigError as e:  # anything else is an internal fault and keeps its traceback
        raise ConfigError(f"--method={m.name!r} does not apply to this model: {e}") from None
    return new_cfg.model


def parse_tau(tau, post_growth_steps: int) -> tuple[int, str]:
    """--tau: 'ratio' (the paper's 250/31,800 of the post-growth steps) or a step count -> (steps, rule)."""
    if tau in (None, "ratio"):
        t = max(1, round(PAPER_TAU_RATIO * post_growth_steps))
        return t, f"250/31,800 of the {post_growth_steps} post-growth steps (SPARKLING's ratio) = {t}"
    try:
        t = int(tau)
    except (TypeError, ValueError):
        t = -1
    if t < 0 or str(tau).strip() != str(t):
        raise ConfigError(
            f"--tau={tau!r} (valid: 'ratio' for SPARKLING's 250/31,800 of the post-growth steps, or a "
            f"step count >= 0, e.g. 250 for the paper's literal value)"
        )
    return t, f"{t} steps (literal)"


def apply_paper_recipe(cfg: RunConfig, steps: int) -> None:
    """SPARKLING App. B.2: cosine, linear warmup over 3% of the steps, final lr ratio 0.01."""
    tc = cfg.train
    tc.schedule, tc.min_lr_ratio = "cosine", PAPER_FINAL_LR_RATIO
    tc.warmup_steps = max(1, round(PAPER_WARMUP_FRACTION * steps))


def describe_schedule(tc) -> str:
    """One line naming a run's lr schedule (the report states it for every run)."""
    s = f"{tc.schedule}, peak lr {tc.lr:.3g}, warmup {tc.warmup_steps} steps, final lr ratio {tc.min_lr_ratio}"
    s += schedule_of(tc).describe(tc)  # the kind's own words for the fields its shape reads
    return s + f", {tc.steps} steps"


def _total_params(model_cfg) -> int:
    from ..models.accounting import build_on_meta

    return sum(p.numel() for p in build_on_meta(model_cfg).parameters())


def plan_progressive(
    method: str | Method = DEFAULT_METHOD,
    preset: str | None = None,
    overrides: list[str] | None = None,
    tokens: int | None = None,
    grow_at: float = 0.5,
    seed: int | None = None,
    out: str | None = None,
    eval_points: int = 10,
    seeds: list[int] | None = None,
    recipe: str = "paper",
    tau=None,
    steplaw_scratch: bool = False,
    scratch_lr: float | None = None,
    config_mapping: dict | None = None,
) -> dict:
    """Validate everything and return the plan (configs of every run of every seed); trains nothing.
    method: a registered method's name, or a Method (a study's variant: method_variant).
    config_mapping: the fields a --config file names, merged onto the small model's preset before `overrides`."""
    if recipe not in RECIPES:
        raise ConfigError(f"--recipe={recipe!r} (valid: {'|'.join(RECIPES)})")
    if seed is not None and seeds is not None:
        raise ConfigError("--seed and --seeds given together (valid: one of them)")
    seeds = [seed] if seed is not None else list(seeds if seeds is not None else DEFAULT_SEEDS)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds={','.join(map(str, seeds))!r} (valid: distinct integers, e.g. 0,1,2)")
    m = resolve_method(method)
    small = small_config(m, preset, overrides or [], None, config_mapping)
    tps = tokens_per_step(small)
    budget = int(tokens) if tokens is not None else small.train.steps * tps
    if budget < 2 * tps:
        raise ConfigError(f"--tokens={budget} (valid: at least two optimizer steps = {2 * tps} tokens)")
    steps = math.ceil(budget / tps)
    d_e = _parse_grow_at(grow_at, budget)
    grow_step = round(d_e / tps)
    if not 1 <= grow_step <= steps - 1:
        raise ConfigError(
            f"--grow-at={grow_at!r} falls on step {grow_step} of {steps} (valid: a growth point with "
            f"at least one step ({tps} tokens) before and after it)"
        )
    spec = {"family": m.family, **m.spec}
    tau_steps, tau_rule = None, None
    if "rewarmup" in spec and (recipe == "paper" or tau is not None):
        tau_steps, tau_rule = parse_tau(tau, steps - grow_step)
        spec["rewarmup"] = f"{PAPER_REWARMUP_RHO if recipe == 'paper' else spec['rewarmup'].split(',')[0]},{tau_steps}"
    elif tau is not None:
        raise ConfigError(
            f"--tau={tau!r} with --method={m.name!r}, which has no re-warmup (valid: a method with one, e.g. sparkling)"
        )
    if recipe == "paper":
        apply_paper_recipe(small, steps)
    target_model = dry_run_growth(small, m, spec)

    out_dir = Path(out or f"runs/progressive-{m.name}")
    eval_every = _pick_eval_every(steps, grow_step, eval_points)
    tc = small.train
    tc.steps, tc.eval_every, tc.log_every = steps, eval_every, max(1, steps // 50)
    tc.save_every = max(1, steps // 4)  # step checkpoints make an interrupted experiment resumable
    tc.keep_last, tc.sample_every = 1, 0
    small.validate()
    scratch = copy.deepcopy(small)
    scratch.model = copy.deepcopy(target_model)
    _reset_growth_only_fields(scratch.model, small.model)
    scratch.growth_history = []
    user_lr = any(o.lstrip("-").split("=")[0] == "train.lr" for o in (overrides or [])) or mapping_sets(
        config_mapping, "train.lr"
    )
    scratch_lr_rule = "the small model's lr (untuned)"
    if scratch_lr is None and preset is None and m.lrs and not user_lr:
        scratch_lr, scratch_lr_rule = m.lrs["scratch"], f"tuned: {m.lrs['scratch']:.3g} ({MAIN_JOB_SWEEP})"
    elif scratch_lr is not None:
        scratch_lr_rule = f"given: {scratch_lr:.3g}"
    if scratch_lr is not None:  # a tuned from-scratch lr (growth keeps the small model's, as the paper does)
        if not (isinstance(scratch_lr, (int, float)) and math.isfinite(scratch_lr) and scratch_lr > 0):
            raise ConfigError(f"--scratch-lr={scratch_lr!r} (valid: a learning rate > 0)")
        scratch.train.lr = float(scratch_lr)
    templates = {"grown": copy.deepcopy(small), "scratch": scratch, "small": copy.deepcopy(small)}
    templates["grown"].train.set_hook("growth", at=grow_step, spec=spec)
    n_small, n_large = _total_params(small.model), _total_params(scratch.model)
    if steplaw_scratch:
        sl = copy.deepcopy(scratch)
        sl.train.lr = small.train.lr * (n_large / n_small) ** STEP_LAW_N_EXPONENT
        templates["scratch-steplaw"] = sl
    configs = {}
    for sd in seeds:
        per = {}
        for name, tmpl in templates.items():
            cfg = copy.deepcopy(tmpl)
            cfg.train.seed = sd
            cfg.train.out_dir = str(out_dir / f"seed{sd}" / name)
            cfg.preset = f"{small.preset}:{name}"
            per[name] = cfg.validate().to_dict()
        configs[str(sd)] = per
    return {
        "kind": "progressive",
        "method": m.name,
        "family": m.family,
        "description": m.description,
        "spec": spec,
        "seeds": seeds,
        "recipe": recipe,
        "tau": tau_steps,
        "tau_rule": tau_rule,
        "token_budget": steps * tps,
        "tokens_per_step": tps,
        "steps": steps,
        "grow_step": grow_step,
        "grow_at_tokens": grow_step * tps,
        "out_dir": str(out_dir),
        "total_params": {"small": n_small, "large": n_large},
        "scratch_lr_rule": scratch_lr_rule,
        "schedules": {
            name: describe_schedule(t.train)
            + (
                f" (step law: small lr x (N_large/N_small)^{STEP_LAW_N_EXPONENT}"
                f" = {n_large:,}/{n_small:,} total params)"
                if name == "scratch-steplaw"
                else ""
            )
            for name, t in templates.items()
        },
        "configs": configs,
    }


def _reset_growth_only_fields(model_cfg, small_model_cfg) -> None:
    """Fields that growth sets only to preserve the old function (frozen_* scales, the tied-head
    logit_scale, an adjusted norm_eps): a model trained from scratch uses its natural values."""
    model_cfg.growth_state = {}
    if hasattr(model_cfg, "logit_scale"):
        model_cfg.logit_scale = type(model_cfg)().logit_scale
    model_cfg.norm_eps = small_model_cfg.norm_eps


def _check_same_plan(out_dir: Path, plan: dict) -> None:
    import json

    f = out_dir / PLAN_FILE
    if not f.is_file():
        return
    old = json.loads(f.read_text())
    if _current_form(old.get("configs")) != json.loads(json.dumps(plan["configs"])):
        raise ConfigError(
            f"--out={str(out_dir)!r} holds a different experiment ({old.get('method')}, "
            f"{old.get('token_budget')} tokens) (valid: the same settings to resume it, or another --out)"
        )


def _current_form(configs):
    """A stored plan's run configs as today's code writes them: a plan.json written before a config section
    changed form (model.moe -> model.mlp, ...) still names the same experiment. Unreadable ones stay as
    they are (and differ)."""
    try:
        return {sd: {name: saved_run_config(c).to_dict() for name, c in per.items()} for sd, per in configs.items()}
    except (ConfigError, AttributeError, TypeError):
        return configs


def run_progressive(plan: dict, quiet: bool = True, say=print) -> dict:
    """Run (or resume) every run of every seed, then write results.json, report.md and the plots."""
    from .plots import plot_progressive
    from .report import build_progressive_results, render_progressive_report
    from .runs import experiment_dir, record_outputs, write_text_atomic

    with experiment_dir(Path(plan["out_dir"])) as out_dir:
        _check_same_plan(out_dir, plan)
        write_json_atomic(out_dir / PLAN_FILE, plan)
        record_outputs(out_dir, [PLAN_FILE])
        runs = []
        for sd in plan["seeds"]:
            for name, cfg_dict in plan["configs"][str(sd)].items():
                say(f"[seed {sd} {name}] {_describe_run(plan, name)}")
                cfg = saved_run_config(copy.deepcopy(cfg_dict))
                runs.append(out_dir / f"seed{sd}" / name)
                run_resumable(cfg, runs[-1], quiet=quiet, say=say)
                record_outputs(out_dir, runs=[runs[-1]])
        results = build_progressive_results(plan, out_dir)
        results["plots"] = plot_progressive(results, out_dir)
        write_json_atomic(out_dir / "results.json", results)
        write_text_atomic(out_dir / "report.md", render_progressive_report(results))
        record_outputs(out_dir, ["results.json", "report.md", *results["plots"]])
    return results


def _describe_run(plan: dict, name: str) -> str:
    m = plan["configs"][str(plan["seeds"][0])][name]["model"]
    shape = f"{m['n_layers']}x{m['d_model']}"
    if name == "grown":
        return (
            f"small {shape} for {plan['grow_at_tokens']:,} tokens, grow ({plan['method']}) at step "
            f"{plan['grow_step']}, continue to {plan['token_budget']:,} tokens"
        )
    if name == "small":
        return f"small model {shape} alone for {plan['token_budget']:,} tokens"
    return f"target model {shape} from scratch for {plan['token_budget']:,} tokens ({plan['schedules'][name]})"
