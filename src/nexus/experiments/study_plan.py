"""A growth study's plan: arms x seeds x growth points x horizons, built on `nexus experiment progressive`'s planner.

Every arm's runs come from `progressive.plan_progressive` (its recipe, growth spec, tuned scratch, dry-run growth);
this module adds what a study needs beyond one experiment:
  - a regime (`Scale`): the batch shape, the evaluation, and where growth happens (a fixed step, or tokens per
    parameter of the arm's own small model);
  - branching: arms whose small models are the same form one base; per seed the base trains one prefix up to the
    growth point, and the small run and every grown arm of that base continue from its checkpoint (paired by
    construction). A base other than the default one is named by its first arm (prefix, small run and runs are
    prefixed with it);
  - lrs per shape (a tuning's choice, or none: each method's own), and `<method>@wide-lr`, the grown run moved to
    its wide shape's tuned lr at growth;
  - an lr grid (every lr x seed x shape the arms use, each trained alone for its base's full budget), the study's
    tuning;
  - one name per run, so plans of one study share a ledger (nexus.experiments.ledger) without sharing names.
The study scripts (benchmarks/studies/) name their arms, seeds and regimes as data and call these functions.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from . import progressive as P

WIDE_LR = "@wide-lr"
# an lr grid's run names and directories (below the study's out): the tuning's layout
GRID_NAME = "{ns}{shape}/lr{lr:.3g}/seed{seed}"


@dataclass(frozen=True)
class Scale:
    """A study's regime: tokens per step (batch x seq), the evaluation (eval_batches per evaluation, about `evals`
    evaluations per run), and the growth point: a fixed step (grow_steps) or tokens per parameter of the small
    model (tokens_per_param). min_val_tokens: the validation split a corpus must hold (0: any)."""

    name: str
    batch: int
    seq: int
    eval_batches: int
    evals: int
    tokens_per_param: float | None = None
    grow_steps: int | None = None
    min_val_tokens: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq


def run_overrides(scale: Scale, data: str, lr: float | None) -> list[str]:
    """The regime's settings of every run, as command-line overrides over each method's small model."""
    o = [
        "--train.batch_size",
        str(scale.batch),
        "--data.seq_len",
        str(scale.seq),
        "--train.eval_batches",
        str(scale.eval_batches),
        "--data.source",
        data,
        "--train.sample_tokens",
        "1",
        "--train.grad_accum",
        "1",
        "--train.dtype",
        "float32",
    ]  # pinned: a study keeps its numerics if a default moves
    return o + (["--train.lr", repr(lr)] if lr is not None else [])


def shape_key(model: dict) -> str:
    """A model shape's name; a projection other than nn.Linear adds its kind and sizes (two architectures of
    one width are different shapes, each with its own scratch run and tuned lr)."""
    key = f"d{model['d_model']}-ffn{model['ffn_hidden'] or 'auto'}"
    proj = model.get("projection") or {}
    if proj.get("kind", "linear") != "linear":
        sizes = [f"{k}{v}" for k, v in sorted(proj.items()) if type(v) is int and v]
        key += "-" + "-".join([proj["kind"], *sizes])
    return key


def lr_mult(arm: str) -> float | None:
    """K of an arm named `<name>@lr<K>x` (its lr multiplied by K at growth, the branch point), else None."""
    import re

    m = re.search(r"@lr(\d+(?:\.\d+)?)x$", arm)
    return float(m.group(1)) if m else None


def base_method(arm: str) -> str:
    """The method behind an arm's name: `<method>@wide-lr` is that method's growth with the grown run moved to the
    wide (scratch) shape's tuned lr at growth, instead of keeping the small model's; `<method>@lr<K>x` moves it to K
    times the small model's lr at growth (the lr-matched partner of the small model continued at K times its lr)."""
    if arm.endswith(WIDE_LR):
        return arm[: -len(WIDE_LR)]
    return arm[: arm.rindex("@lr")] if lr_mult(arm) is not None else arm


def resolve(arm: str, variants: dict | None = None):
    """An arm's Method: a study's own variant of that name, else the registered method (ConfigError if unknown)."""
    name = base_method(arm)
    return P.resolve_method((variants or {}).get(name, name))


def growth_step(active_params: int, tokens_per_param: float, tokens_per_step: int) -> int:
    """The first step at which a small model of `active_params` (the tied embedding counted once:
    curves.active_params) has seen tokens_per_param tokens per parameter, rounded up."""
    return math.ceil(tokens_per_param * active_params / tokens_per_step)


def plan_at_tokens_per_param(
    method, tokens_per_param: float, post_mult: int = 1, overrides: list[str] | None = None, **kw
) -> dict:
    """plan_progressive with growth after tokens_per_param tokens per active parameter of the small model and
    post_mult times as many steps after growth as before it."""
    from .curves import active_params

    m = P.resolve_method(method)
    small = P.small_config(m, None, list(overrides or []), None)
    tps = P.tokens_per_step(small)
    g = growth_step(active_params(small.model), tokens_per_param, tps)
    return P.plan_progressive(m, overrides=overrides, tokens=(1 + post_mult) * g * tps, grow_at=g * tps, **kw)


def _sans_dir(cfg: dict) -> str:
    c = copy.deepcopy(cfg)
    c["train"].pop("out_dir", None)
    return json.dumps(c, sort_keys=True)


def _finish(cfg: dict, run_dir: Path, steps: int) -> dict:
    """Run-level settings: where it writes, checkpoints every ~10% (resumable), the full schedule horizon."""
    c = copy.deepcopy(cfg)
    tc = c["train"]
    tc["out_dir"], tc["schedule_steps"] = str(run_dir), steps
    tc["save_every"], tc["keep_last"], tc["sample_every"] = max(1, steps // 10), 1, 0
    return c


def plan_branched(
    arms: list[str],
    seeds: list[int],
    scale: Scale,
    data: str,
    out: Path,
    lrs: dict | None,
    tokens_per_param: float | None = None,
    post_mult: int = 1,
    ns: str = "",
    variants: dict | None = None,
    small_lr_mults: tuple = (),
) -> dict:
    """Every run of every seed (configs as dicts), the branch points and the shapes; trains nothing.
    Arms whose small models differ (Nexus-Rank, TokenFormer, SPARKLING's FFN axis) form separate bases: each base
    has its own prefix, small run, growth step and scratch. lrs: a tuned lr per base's small model ("small",
    "<base>-small") and per scratch shape, or None (untuned). tokens_per_param: the growth point where the scale
    has no fixed step (default the scale's); post_mult: steps after growth as a multiple of the steps before it;
    ns: a prefix of every run's name and directory; variants: the study's own methods by name; small_lr_mults: for
    each K, a no-growth control per base and seed, `<small>@lr<K>x`, the small model continued from the prefix with its
    lr multiplied by K at the growth step (the lr-matched control of an arm that changes the lr at growth)."""
    from .curves import active_params

    tps = scale.tokens_per_step

    def small_of(m: str):
        return P.small_config(resolve(m, variants), None, run_overrides(scale, data, None), None)

    groups: dict[str, list[str]] = {}  # small model (as JSON) -> its arms, in the order given
    small_cfgs: dict = {}  # the same JSON -> that small config (its parameters are the unit of tokens per parameter)
    for m in arms:
        cfg = small_of(m)
        key = _sans_dir(cfg.to_dict())
        groups.setdefault(key, []).append(m)
        small_cfgs.setdefault(key, cfg)
    default_small = _sans_dir(small_of(P.DEFAULT_METHOD).to_dict())
    runs: dict[str, dict] = {}
    bases: dict[str, dict] = {}
    plans: dict = {}
    for small_json, ms in groups.items():
        # the default FFN-axis base keeps the plain names; any other base is named by its first arm (sorted, so
        # the name does not depend on the order of the arms and a rerun finds its runs)
        label = "" if small_json == default_small else sorted(ms)[0]
        pre = f"{label}-" if label else ""
        n_small = active_params(small_cfgs[small_json].model)
        grow_step = scale.grow_steps or growth_step(n_small, tokens_per_param or scale.tokens_per_param, tps)
        steps = (1 + post_mult) * grow_step
        small_lr = None
        if lrs is not None:
            if f"{pre}small" not in lrs:
                raise ConfigError(
                    f"the lr sweep has no lr for the small model of base {label or 'small'!r} (valid: run "
                    f"--lr-sweep with the same methods, it sweeps every base and shape they use)"
                )
            small_lr = lrs[f"{pre}small"]
        for m in ms:
            plans[m] = P.plan_progressive(
                resolve(m, variants),
                overrides=run_overrides(scale, data, small_lr),
                tokens=steps * tps,
                grow_at=grow_step * tps,
                seeds=seeds,
                out=str(out),
                eval_points=scale.evals * (1 + post_mult) // 2,
            )
        bases[label or "small"] = {
            "methods": ms,
            "small_params": n_small,
            "grow_step": grow_step,
            "steps": steps,
            "token_budget": steps * tps,
            "tokens_per_param_at_growth": grow_step * tps / n_small,
            "small_run": f"{pre}small",
            "prefix_run": f"{pre}prefix",
        }
        for sd in seeds:
            first = plans[ms[0]]["configs"][str(sd)]
            where = dict(base=label or "small", grow_step=grow_step, steps=steps)
            small = _finish(first["small"], out / f"{ns}seed{sd}" / f"{pre}small", steps)
            prefix = _finish(first["small"], out / f"{ns}seed{sd}" / f"{pre}prefix", steps)
            prefix["train"]["steps"] = grow_step  # the shared first half; the schedule keeps the full horizon
            runs[f"{ns}seed{sd}/{pre}prefix"] = {"cfg": prefix, "after": None, "kind": "prefix", "seed": sd, **where}
            runs[f"{ns}seed{sd}/{pre}small"] = {
                "cfg": small,
                "after": f"{ns}seed{sd}/{pre}prefix",
                "kind": "small",
                "seed": sd,
                **where,
            }
            for k in small_lr_mults:  # the no-growth control of an lr change at growth
                ctl = _finish(first["small"], out / f"{ns}seed{sd}" / f"{pre}small@lr{k:g}x", steps)
                ctl["train"]["lr"] = k * first["small"]["train"]["lr"]
                runs[f"{ns}seed{sd}/{pre}small@lr{k:g}x"] = {
                    "cfg": ctl,
                    "after": f"{ns}seed{sd}/{pre}prefix",
                    "kind": "small",
                    "seed": sd,
                    "lr_mult": k,
                    **where,
                }
            for m in ms:
                c = plans[m]["configs"][str(sd)]
                key = shape_key(c["scratch"]["model"])
                grown = _finish(c["grown"], out / f"{ns}seed{sd}" / m, steps)
                if m.endswith(WIDE_LR):  # the grown run moves to the wide shape's lr at growth (the branch point)
                    grown["train"]["lr"] = lrs[key] if lrs is not None else c["scratch"]["train"]["lr"]
                elif lr_mult(m) is not None:  # K times the small model's lr from the growth step on
                    grown["train"]["lr"] = lr_mult(m) * first["small"]["train"]["lr"]
                runs[f"{ns}seed{sd}/{m}"] = {
                    "cfg": grown,
                    "after": f"{ns}seed{sd}/{pre}prefix",
                    "kind": "grown",
                    "seed": sd,
                    "method": m,
                    "shape": key,
                    **where,
                }
                name = f"{ns}seed{sd}/scratch-{key}"
                if name not in runs:
                    sc = _finish(c["scratch"], out / f"{ns}seed{sd}" / f"scratch-{key}", steps)
                    if lrs is not None:
                        if key not in lrs:
                            raise ConfigError(
                                f"the lr sweep has no scratch lr for shape {key} (valid: run --lr-sweep "
                                f"with the same methods, it sweeps every shape they use)"
                            )
                        sc["train"]["lr"] = lrs[key]
                    runs[name] = {"cfg": sc, "after": None, "kind": "scratch", "seed": sd, "shape": key, **where}
    b0 = bases[next(iter(bases))]
    return {
        "scale": scale.name,
        "data": data,
        "methods": arms,
        "seeds": seeds,
        "tokens_per_step": tps,
        "grow_step": b0["grow_step"],
        "steps": b0["steps"],
        "token_budget": max(b["token_budget"] for b in bases.values()),
        "small_params": b0["small_params"],
        "tokens_per_param_at_growth": b0["tokens_per_param_at_growth"],
        "bases": bases,
        "tau_rule": plans[arms[0]]["tau_rule"],
        "ns": ns,
        "post_mult": post_mult,
        "eval_tokens": scale.eval_batches * tps,
        "tuned": lrs is not None,
        "lrs": lrs,
        "specs": {m: plans[m]["spec"] for m in arms},
        "runs": runs,
    }


def plan_lr_grid(
    arms: list[str],
    seeds: list[int],
    lrs: list[float],
    scale: Scale,
    data: str,
    out: Path,
    ns: str = "",
    tokens_per_param: float | None = None,
    variants: dict | None = None,
    name: str = GRID_NAME,
    where: str = GRID_NAME,
) -> dict:
    """Every lr x seed x shape (the small model of every base and the scratch model of every shape the arms grow
    to), each trained alone for its base's full budget, lr by lr (the grid's first lrs first). name / where: each
    run's name and directory below `out`, formatted with ns, shape, lr and seed."""
    base = plan_branched(
        list(arms),
        [seeds[0]],
        scale,
        data,
        out / ns / "probe",
        None,
        tokens_per_param=tokens_per_param,
        variants=variants,
    )
    shapes = {b["small_run"]: base["runs"][f"seed{seeds[0]}/{b['small_run']}"] for b in base["bases"].values()}
    shapes.update({r["shape"]: r for r in base["runs"].values() if r["kind"] == "scratch"})
    runs = {}
    for lr in lrs:
        for sd in seeds:
            for shape, r in shapes.items():
                c = copy.deepcopy(r["cfg"])
                c["train"]["lr"], c["train"]["seed"] = lr, sd
                c["train"]["out_dir"] = str(out / where.format(ns=ns, shape=shape, lr=lr, seed=sd))
                runs[name.format(ns=ns, shape=shape, lr=lr, seed=sd)] = {
                    **r,
                    "cfg": c,
                    "after": None,
                    "kind": "scratch",
                    "seed": sd,
                    "shape": shape,
                    "lr": lr,
                }
    return {**base, "runs": runs, "ns": ns, "seeds": list(seeds), "lrs_swept": list(lrs)}


def merge_runs(run_dicts) -> dict:
    """One run dict from several plans; a name two plans share must be the same run (the ablations' prefixes are the
    headline's)."""
    from .ledger import config_key

    out: dict = {}
    for runs in run_dicts:
        for k, r in runs.items():
            if k in out and config_key(out[k]["cfg"]) != config_key(r["cfg"]):
                raise ConfigError(f"two parts plan run {k!r} with different configs (valid: one config per run name)")
            out.setdefault(k, r)
    return out


def describe_run(run: dict, plan: dict) -> dict:
    """What a run trains: its shape, lr, and the steps and tokens it trains itself (a branch not its prefix's)."""
    from .ledger import own_start

    m = run["cfg"]["model"]
    tc = run["cfg"]["train"]
    start = own_start(run)
    row = {
        "layers": m["n_layers"],
        "d_model": m["d_model"],
        "ffn": m["ffn_hidden"],
        "lr": tc["lr"],
        "steps": tc["steps"] - start,
        "tokens": (tc["steps"] - start) * plan["tokens_per_step"],
    }
    if run["kind"] == "grown":
        g = next(h for h in tc["hooks"] if h["kind"] == "growth")["spec"]
        row["grows_to"] = {"d_model": g.get("hidden") or m["d_model"], "ffn": g.get("ffn") or m["ffn_hidden"]}
    return row


def timed_config(run: dict, plan: dict) -> dict:
    """The config whose step a run pays for: a grown run trains the grown model, which is its shape's scratch model."""
    if run["kind"] == "grown":  # any seed's scratch run of the shape (a plan may run scratch on fewer seeds)
        if run["shape"] in plan.get("shape_cfgs", {}):
            return plan["shape_cfgs"][run["shape"]]
        return next(
            r["cfg"] for r in plan["runs"].values() if r["kind"] == "scratch" and r.get("shape") == run["shape"]
        )
    return run["cfg"]


def wsd_decay_start(steps: int, decay_fraction: float) -> int:
    """The first decaying step of `train.schedule: wsd` over a horizon of `steps` (optim/schedules/wsd.py's window)."""
    from types import SimpleNamespace

    from ..optim.schedules.wsd import decay_window

    return decay_window(SimpleNamespace(schedule_steps=steps, steps=steps, decay_fraction=decay_fraction))[0]


def plan_horizon(
    arms: list[str],
    seeds: list[int],
    scale: Scale,
    data: str,
    out: Path,
    lrs: dict | None,
    horizons: tuple = (1, 2, 4),
    decay_fraction: float = 0.2,
    ns: str = "horizon/",
    variants: dict | None = None,
    small_lr_mults: tuple = (),
    controls: tuple = ("small",),
    tokens_per_param: float | None = None,
) -> dict:
    """A horizon scan at low cost (issue 47 item 4): per seed and arm, one WSD stable-phase run and a decay branched
    from it for each post-growth budget k x the pre-growth steps (k in `horizons`); trains nothing.

    The 1x plan of plan_branched (the same arms, lrs, warmup, re-warmup tau, evaluation cadence and growth step g) is
    moved to `train.schedule: wsd` with `decay_fraction`, nothing else changed. Horizon k ends at T_k = (1 + k) g
    steps, its decay taking the last `decay_fraction` of T_k (from D_k, wsd_decay_start): the budget of each horizon
    is T_k steps in all, decay included, so the grown, small and scratch runs of one horizon train on equal tokens.
    Per seed: the prefix (the small model, stable to g); per arm (the grown arms, the small runs named in `controls`
    of plan_branched's, and scratch from step 0) a chain `<arm>/stable-<k>x` of stable-phase segments, each continuing
    the one before from its checkpoint up to D_k, planned over the longest horizon (flat up to its last D); and
    `<arm>/<k>x`, the single run with its decay at D_k, branched from `<arm>/stable-<k>x`'s checkpoint. Each run's
    config is the single run it stands for (nexus.experiments.branch holds each branch to it: the lr it gives every step
    before its branch point equals its segment's, bit for bit). Runs carry start_step (where they start training
    themselves), phase (stable / decay), horizon (k) and arm."""
    ks = tuple(sorted(set(int(k) for k in horizons)))
    if not ks or ks[0] < 1 or not 0 < decay_fraction < 1:
        raise ConfigError(
            f"horizons={horizons!r}, decay_fraction={decay_fraction!r} (valid: ks >= 1, 0 < fraction < 1)"
        )
    one = plan_branched(
        list(arms),
        list(seeds),
        scale,
        data,
        out,
        lrs,
        tokens_per_param=tokens_per_param,
        post_mult=1,
        ns=ns,
        variants=variants,
        small_lr_mults=small_lr_mults,
    )
    if len(one["bases"]) != 1:
        raise ConfigError(f"a horizon scan of arms {list(arms)} with {len(one['bases'])} bases (valid: one base)")
    g = one["grow_step"]
    total = {k: (1 + k) * g for k in ks}
    start = {k: wsd_decay_start(total[k], decay_fraction) for k in ks}
    longest = total[ks[-1]]
    if start[ks[0]] <= g:
        raise ConfigError(
            f"decay_fraction={decay_fraction!r}: the {ks[0]}x horizon's decay would start at step {start[ks[0]]}, not "
            f"after the growth step {g} (valid: a smaller fraction)"
        )

    def wsd(cfg: dict, run_dir: Path, steps: int, horizon: int) -> dict:
        c = copy.deepcopy(cfg)
        tc = c["train"]
        tc["schedule"], tc["decay_fraction"], tc["schedule_steps"], tc["steps"] = "wsd", decay_fraction, horizon, steps
        tc["out_dir"], tc["save_every"] = str(run_dir), max(1, steps // 10)
        return c

    keep = {"small": set(controls)}
    runs: dict[str, dict] = {}
    for sd in seeds:
        root = out / f"{ns}seed{sd}"
        prefix = f"{ns}seed{sd}/prefix"
        r = one["runs"][prefix]
        runs[prefix] = {
            **r,
            "cfg": wsd(r["cfg"], root / "prefix", g, longest),
            "steps": g,
            "start_step": 0,
            "phase": "stable",
        }
        for name, r in one["runs"].items():
            arm = name.split("/")[-1]
            if r["seed"] != sd or r["kind"] == "prefix" or (r["kind"] == "small" and arm not in keep["small"]):
                continue
            after, at = (prefix, g) if r["after"] else (None, 0)
            for k in ks:
                seg = f"{ns}seed{sd}/{arm}/stable-{k}x"
                where = root / arm
                common = {**r, "arm": arm, "horizon": k}
                runs[seg] = {
                    **common,
                    "cfg": wsd(r["cfg"], where / f"stable-{k}x", start[k], longest),
                    "steps": start[k],
                    "after": after,
                    "start_step": at,
                    "phase": "stable",
                }
                runs[f"{ns}seed{sd}/{arm}/{k}x"] = {
                    **common,
                    "cfg": wsd(r["cfg"], where / f"{k}x", total[k], total[k]),
                    "steps": total[k],
                    "after": seg,
                    "start_step": start[k],
                    "phase": "decay",
                }
                after, at = seg, start[k]
    return {
        **{k: v for k, v in one.items() if k not in ("runs", "post_mult")},
        "steps": longest,
        "token_budget": longest * one["tokens_per_step"],
        "schedule": f"wsd, linear decay over the last {decay_fraction:g} of each horizon to min_lr_ratio",
        "decay_fraction": decay_fraction,
        "horizons": {
            k: {
                "post_mult": k,
                "steps": total[k],
                "post_steps": total[k] - g,
                "decay_start": start[k],
                "decay_steps": total[k] - start[k],
                "tokens": total[k] * one["tokens_per_step"],
            }
            for k in ks
        },
        "controls": list(controls),
        "runs": runs,
    }
