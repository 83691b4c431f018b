"""Model growth: one API for every growth family (Nexus-Rank M/A, TokenFormer tokens, SPARKLING
width, higher-order retrofit), carrying the whole training state across the change.

A family module in this package declares its typed spec (`spec.GrowthSpec` subclass with `validate`
and `applies_to`) and registers a grower for it:

    @register_grower("width", WidthSpec)
    def grow_width(model, cfg: RunConfig, spec: WidthSpec) -> GrowthResult: ...

It returns the new model (already initialized, built by `inherit.inherit`), the new ModelConfig, and
for every parameter of the new model how the old values sit inside it (`ParamMap`). Everything else is
generic and lives here: optimizer-state surgery by parameter *name* (never list order), per-element
AdamW step counts, the re-warmup masks, the growth record in the config, and the checkpoint flow
(validate everything, then write atomically, the source untouched). Growth inside a training run is
`growth.training.GrowthHook`, registered on the trainer by whoever builds it (the trainer never imports growth).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from ..config import ConfigError, ModelConfig, RunConfig
from ..plugins import Registry
from .param_map import ParamMap
from .spec import OPTIMIZER_STATE_POLICIES, GrowthSpec, register_spec, spec_classes, spec_from_dict


@dataclass
class GrowthResult:
    model: nn.Module  # the grown model, initialized
    model_cfg: ModelConfig  # its config
    param_maps: dict[str, ParamMap]  # new parameter name -> how old values embed in it
    record: dict = field(default_factory=dict)  # what happened (family, sizes, init, mode, ...) for growth_history
    report: dict = field(default_factory=dict)  # diagnostics to print (RMS ratios, warnings, ...)


# The same extension pattern as presets, projections and analyses: a family module registers itself,
# and the first lookup imports every module of this package.
GROWERS: Registry[Callable[[nn.Module, RunConfig, GrowthSpec], GrowthResult]] = Registry("train.growth.family", __name__)


def register_grower(family: str, spec_cls: type[GrowthSpec]):
    """The one registration line of a growth family: its name, its spec dataclass and its grower."""
    def deco(fn):
        register_spec(family, spec_cls)
        return GROWERS.register(family)(fn)
    return deco


def _load_families() -> None:
    GROWERS.load()


def families() -> list[str]:
    return sorted(GROWERS.names())


def parse_growth_spec(spec, where: str = "train.growth") -> GrowthSpec:
    """A growth spec (mapping with "family", or a spec dataclass) -> its validated dataclass."""
    _load_families()
    return spec_from_dict(spec, where)


def check_growth_applies(cfg: RunConfig) -> GrowthSpec:
    """Raise ConfigError before any training when cfg.train.growth is malformed (the family's
    `validate`) or cannot apply to cfg.model (its `applies_to`). Growers check nothing else: whatever
    fails inside one is an internal fault (RuntimeError)."""
    spec = parse_growth_spec(cfg.train.growth)
    spec.applies_to(cfg.model)
    return spec


# ----------------------------------------------------------------------------- optimizer surgery
def transplant_optimizer_state(old_state: dict, new_optimizer, maps: dict[str, ParamMap], policy: str = "asymmetric",
                               mark_new: bool = True) -> None:
    """Move optimizer state from `old_state` (an OptimizerSet.state_dict()) into `new_optimizer`.

    asymmetric: old entries keep their state, new entries start at zero with their own step count 0
    copy: new entries copy the state of the entry they were copied from (ParamMap.copy_source), else zero
    drop: every state is discarded (fresh optimizer)
    scaled: SPARKLING's "asymmetric reset + scaled opt." ablation (Fig. 2): asymmetric, and the old state
        of every tensor growth rescaled (ParamMap.fan_in_scale, the fan-in factor alpha) gets the same
        scaling as its parameter: first moments (AdamW exp_avg, Muon momentum) by alpha, second moments
        (exp_avg_sq) by alpha^2, so Adam's update m/sqrt(v) keeps its size relative to the weights.
        Tensors growth did not rescale (fan-out, gains, other families) keep their state as is.
    AdamW's step becomes a per-element tensor wherever old and new entries share a tensor, so new
    entries get Adam's bias correction from their own first step (torch keeps one step per tensor).
    `mark_new` stores `new_mask` so a re-warmup schedule can address the new entries.
    """
    if policy not in OPTIMIZER_STATE_POLICIES:
        raise ConfigError(f"--optimizer-state={policy!r} (valid: {'|'.join(OPTIMIZER_STATE_POLICIES)})")
    old = old_state.get("state", {}) if old_state else {}
    # per-element steps and re-warmup masks need the hand-written AdamW (torch's keeps one step per tensor)
    new_optimizer.use_elementwise_adamw()
    for opt in new_optimizer.optimizers.values():
        for group in opt.param_groups:
            for p in group["params"]:
                name = new_optimizer.param_names[id(p)]
                pm = maps.get(name, ParamMap(old_name=name))
                # only grown/new tensors get a mask: a full-size zero mask per unchanged tensor costs ~1 GB at 100M params
                has_new = pm.old_name is None or (pm.old_slices is not None and
                                                  tuple(sl.stop for sl in pm.old_slices) != tuple(p.shape))
                mask = pm.new_mask(p.shape).to(p.device) if has_new else None
                st_old = old.get(pm.old_name) if pm.old_name is not None else None
                st: dict = {}
                if policy != "drop" and st_old is not None:
                    for key, val in st_old.items():
                        if key in ("new_mask",):
                            continue
                        if key == "step":
                            st[key] = _grow_step(val, p, pm, policy)
                            continue
                        if not torch.is_tensor(val) or val.shape == () :
                            st[key] = val
                            continue
                        st[key] = _grow_tensor_state(val, p, pm, policy, _STATE_POWER.get(key, 0))
                if mark_new and mask is not None:  # has_new: the mask has new entries (no full scan)
                    st["new_mask"] = mask
                if st:
                    opt.state[p] = st


# How a state tensor scales with its parameter: first moments linearly, second moments quadratically.
_STATE_POWER = {"exp_avg": 1, "momentum_buffer": 1, "exp_avg_sq": 2, "max_exp_avg_sq": 2}


def _grow_tensor_state(val: torch.Tensor, p: torch.Tensor, pm: ParamMap, policy: str, power: int) -> torch.Tensor:
    if policy == "scaled" and power:
        factor = pm.scale_of_old(val.shape)
        if factor is not None:
            val = val * factor.to(val.device, val.dtype) ** power
    if pm.old_slices is None and tuple(val.shape) == tuple(p.shape):
        out = val.to(p.device)  # the old state is a snapshot (state_dict / file) owned by us: no second copy
    else:
        out = torch.zeros(p.shape, dtype=val.dtype, device=p.device)
        out[pm.old_slices] = val.to(p.device)
        if policy == "copy" and pm.copy_source:
            new = pm.new_mask(p.shape).to(p.device).bool()
            out[new] = _copied_state(val, p, pm)[new]
    return out


def _copied_state(val: torch.Tensor, p: torch.Tensor, pm: ParamMap) -> torch.Tensor:
    """Param-shaped state where every entry holds the state of the entry it was copied from; zero
    along dims that grew without a copy source (e.g. random fan-in columns of a copied row)."""
    src = val.to(p.device)
    for dim, idx in sorted(pm.copy_source.items()):
        src = src.index_select(dim, idx.to(p.device))
    full = torch.zeros(p.shape, dtype=val.dtype, device=p.device)
    full[tuple(slice(0, s) for s in src.shape)] = src
    return full


def _grow_step(val, p: torch.Tensor, pm: ParamMap, policy: str = "asymmetric"):
    t = val if torch.is_tensor(val) else torch.tensor(float(val))
    if pm.old_slices is None:
        return t.clone()
    full = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
    if policy == "copy" and pm.copy_source:
        # copied moments need the step count they were accumulated over: restarting it at 0 would
        # divide them by Adam's bias correction 1 - b^t ~ 0.1 and blow up the first update ~10x
        src = t.expand(tuple(s.stop - (s.start or 0) for s in pm.old_slices)) if t.ndim == 0 else t.to(p.device)
        full.copy_(_copied_state(src.float(), p, pm))  # entries grown without a copy source restart at 0
        full[pm.old_slices] = t.item() if t.ndim == 0 else t.to(p.device)
        return full
    if t.ndim == 0:
        full[pm.old_slices] = t.item()
    else:
        full[pm.old_slices] = t.to(p.device)
    return full


# ----------------------------------------------------------------------------- the API
def grow(model: nn.Module, cfg: RunConfig, spec, optimizer_state: dict | None = None, step: int = 0):
    """Grow `model` per `spec` (a spec dataclass, or a mapping with "family"). Returns (new_model,
    new_cfg, new_optimizer, result).

    The new optimizer is built from cfg.train and receives the transplanted state; pass
    optimizer_state=None for a fresh optimizer (no state to carry).
    """
    from ..optim.param_groups import build_optimizer

    spec = parse_growth_spec(spec, "growth spec")
    spec.applies_to(cfg.model)
    result = GROWERS.get(spec.family)(model, cfg, spec)
    new_cfg = copy.deepcopy(cfg)
    new_cfg.model = result.model_cfg
    record = {**spec.to_dict(), "step": step, **result.record}
    new_cfg.growth_history.append(_jsonable(record))
    new_cfg.validate()
    new_opt = build_optimizer(result.model, new_cfg.train)
    transplant_optimizer_state(optimizer_state or {}, new_opt, result.param_maps, spec.optimizer_state)
    if result.record.get("rewarmup_all"):  # the re-warmup baseline: every entry follows the new-entry lr
        new_opt.use_elementwise_adamw()
        for opt in new_opt.optimizers.values():
            for group in opt.param_groups:
                for p in group["params"]:
                    opt.state[p]["new_mask"] = torch.ones_like(p)
    return result.model, new_cfg, new_opt, result


def grow_checkpoint(src: str | Path, out: str | Path, spec: dict, probe_verify: bool = True,
                    train_overrides: list[str] = ()) -> dict:
    """Load a checkpoint, grow it, verify, and write the grown checkpoint atomically to `out`.
    `train_overrides` (dotted `--train.*` arguments, e.g. --train.steps 600) are recorded in the grown
    checkpoint's config: the continued run's length and so its LR schedule after the growth."""
    from ..checkpoint import load_checkpoint, load_trainer_state, save_checkpoint
    from ..config import parse_overrides

    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ConfigError(f"--out={str(out)!r} equals --checkpoint (valid: a different directory; the source stays untouched)")
    model, cfg, tok = load_checkpoint(src)
    tstate = load_trainer_state(src) or {}
    step = int(tstate.get("step", 0))
    if train_overrides:
        from ..train.run_dir import carry_schedule_and_lr

        before = copy.deepcopy(cfg.train)
        parse_overrides(cfg, list(train_overrides))
        cfg.validate()
        carry_schedule_and_lr(before, cfg.train, grown=True)
    new_model, new_cfg, new_opt, result = grow(model, cfg, spec, tstate.get("optimizer"), step)
    report = dict(result.report)
    if probe_verify:
        from .verification import verify

        report["verify"] = verify(model, new_model, result.param_maps, vocab_size=new_cfg.model.vocab_size,
                                  train_cfg=new_cfg.train)
    # The post-growth monitor of an earlier growth describes the model before *that* growth: it is replaced
    # by this growth's, built as GrowthHook builds it in training, so the continued run logs the
    # symmetry lock and RMS ratio as a run grown in training does.
    hooks = {k: v for k, v in (tstate.get("hooks") or {}).items() if k != "growth"}
    if tstate:
        from ..data.loader import DataModule
        from .diagnostics import monitor_after_growth

        data = DataModule(cfg.data, seed=cfg.train.seed, tokenizer=tok, quiet=True)
        monitor, rms_report = monitor_after_growth(model, new_model, cfg.model.max_seq_len, new_cfg.model,
                                                   result.param_maps, next(iter(data.val_batches(1, cfg.train.batch_size))))
        report.update(rms_report)
        hooks["growth"] = {"n_growths": len(new_cfg.growth_history), "monitor": monitor.state_dict()}
    report["continued run"] = continued_run_plan(new_cfg, step, out)
    new_tstate = {k: v for k, v in tstate.items() if k != "hooks"} | ({"hooks": hooks} if hooks else {})
    new_tstate["optimizer"] = new_opt.state_dict()
    new_tstate["step"] = step
    save_checkpoint(out, new_model, new_cfg, tok, new_tstate if tstate else None)
    return report


def continued_run_plan(cfg: RunConfig, step: int, out) -> str:
    """What `nexus train --resume OUT` will do with the LR after this growth, in one line."""
    from .rewarmup import lr_plan

    if cfg.train.steps <= step:
        return (f"the run ended at step {step}: continue with `nexus train --resume {out} --train.steps N` (N > {step}); "
                "its LR schedule is then re-planned over N steps, the new entries re-warmed as recorded (or give "
                "--train.steps N here)")
    plan, at_floor = lr_plan(cfg.train, step, cfg.growth_history[-1])
    floor = (" WARNING: every remaining step is at the LR floor (train.min_lr_ratio); set --train.schedule_steps"
             if at_floor else "")
    return f"`nexus train --resume {out}` trains steps {step}->{cfg.train.steps}; {plan}{floor}"


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if torch.is_tensor(obj):
        return obj.tolist()
    if isinstance(obj, (int, float, str, bool)) or obj is None:
        return obj
    return str(obj)




__all__ = ["ParamMap", "GrowthResult", "GrowthSpec", "register_grower", "families", "parse_growth_spec",
           "check_growth_applies", "spec_classes", "grow", "grow_checkpoint",
           "transplant_optimizer_state", "OPTIMIZER_STATE_POLICIES"]
