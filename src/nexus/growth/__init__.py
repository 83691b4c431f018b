"""Model growth: one API for every growth family (Nexus-Rank M/A, TokenFormer tokens, SPARKLING
width, higher-order retrofit), carrying the whole training state across the change.

A family module in this package registers a grower:

    @register_grower("width")
    def grow_width(model, cfg: RunConfig, spec: dict) -> GrowthResult: ...

It returns the new model (already initialized), the new ModelConfig, and for every parameter of the
new model how the old values sit inside it (`ParamMap`). Everything else is generic and lives here:
optimizer-state surgery by parameter *name* (never list order), per-element AdamW step counts, the
re-warmup masks, the growth record in the config, and the checkpoint flow (validate everything,
then write atomically, the source untouched).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from ..config import ConfigError, ModelConfig, RunConfig
from .param_map import ParamMap

OPTIMIZER_STATE_POLICIES = ("asymmetric", "copy", "drop", "scaled")


@dataclass
class GrowthResult:
    model: nn.Module  # the grown model, initialized
    model_cfg: ModelConfig  # its config
    param_maps: dict[str, ParamMap]  # new parameter name -> how old values embed in it
    record: dict = field(default_factory=dict)  # what happened (family, sizes, init, mode, ...) for growth_history
    report: dict = field(default_factory=dict)  # diagnostics to print (RMS ratios, warnings, ...)


_GROWERS: dict[str, Callable[[nn.Module, RunConfig, dict], GrowthResult]] = {}
_loaded = False


def register_grower(family: str):
    def deco(fn):
        _GROWERS[family] = fn
        return fn
    return deco


def _load_families() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from ..plugins import import_submodules

    import_submodules(__name__, __path__)


def families() -> list[str]:
    _load_families()
    return sorted(_GROWERS)


_SPEC_CHECKS: dict[str, Callable[[dict], object]] = {}


def register_spec_check(family: str):
    """A family's cheap spec validation (no model needed), run before training starts."""
    def deco(fn):
        _SPEC_CHECKS[family] = fn
        return fn
    return deco


def check_growth_spec(spec) -> None:
    """Raise ConfigError now for a growth spec that would fail at train.grow_at."""
    _load_families()
    family = spec.get("family") if isinstance(spec, dict) else None
    if family not in _GROWERS:
        raise ConfigError(f"train.growth={spec!r} (valid: a mapping with family one of {', '.join(sorted(_GROWERS))}, "
                          "e.g. --growth '{family: width, hidden: 192}')")
    policy = spec.get("optimizer_state", "asymmetric")
    if policy not in OPTIMIZER_STATE_POLICIES:
        raise ConfigError(f"train.growth.optimizer_state={policy!r} (valid: {'|'.join(OPTIMIZER_STATE_POLICIES)})")
    if family in _SPEC_CHECKS:
        _SPEC_CHECKS[family](spec)


def check_growth_applies(cfg: RunConfig) -> None:
    """Raise ConfigError before any training when cfg.train.growth cannot apply to cfg.model (a width
    that shrinks, a family the model has no layers for, ...): the growth runs once on a weightless
    meta-device copy, where every check a grower makes runs before its first copy of data."""
    import copy

    check_growth_spec(cfg.train.growth)
    from ..models.accounting import build_on_meta

    rng = torch.get_rng_state()
    try:
        grow(build_on_meta(cfg.model), copy.deepcopy(cfg), dict(cfg.train.growth), None, cfg.train.grow_at)
    except ConfigError:
        raise
    except Exception:  # meta tensors hold no data: the grower got past its checks to the copying
        pass
    finally:
        torch.set_rng_state(rng)


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
def grow(model: nn.Module, cfg: RunConfig, spec: dict, optimizer_state: dict | None = None, step: int = 0):
    """Grow `model` per `spec` (must contain "family"). Returns (new_model, new_cfg, new_optimizer, result).

    The new optimizer is built from cfg.train and receives the transplanted state; pass
    optimizer_state=None for a fresh optimizer (no state to carry).
    """
    from ..optim.param_groups import build_optimizer

    _load_families()
    family = spec.get("family")
    if family not in _GROWERS:
        raise ConfigError(f"growth family {family!r} (valid: {', '.join(sorted(_GROWERS)) or 'none installed'})")
    result = _GROWERS[family](model, cfg, dict(spec))
    new_cfg = copy.deepcopy(cfg)
    new_cfg.model = result.model_cfg
    record = {"family": family, "step": step, **{k: v for k, v in spec.items() if k != "family"}, **result.record}
    new_cfg.growth_history.append(_jsonable(record))
    new_cfg.validate()
    new_opt = build_optimizer(result.model, new_cfg.train)
    policy = spec.get("optimizer_state", "asymmetric")
    transplant_optimizer_state(optimizer_state or {}, new_opt, result.param_maps, policy)
    if result.record.get("rewarmup_all"):  # the re-warmup baseline: every entry follows the new-entry lr
        new_opt.use_elementwise_adamw()
        for opt in new_opt.optimizers.values():
            for group in opt.param_groups:
                for p in group["params"]:
                    opt.state[p]["new_mask"] = torch.ones_like(p)
    return result.model, new_cfg, new_opt, result


def grow_checkpoint(src: str | Path, out: str | Path, spec: dict, probe_verify: bool = True) -> dict:
    """Load a checkpoint, grow it, verify, and write the grown checkpoint atomically to `out`."""
    from ..checkpoint import load_checkpoint, load_trainer_state, save_checkpoint

    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ConfigError(f"--out={str(out)!r} equals --checkpoint (valid: a different directory; the source stays untouched)")
    model, cfg, tok = load_checkpoint(src)
    tstate = load_trainer_state(src) or {}
    step = int(tstate.get("step", 0))
    new_model, new_cfg, new_opt, result = grow(model, cfg, spec, tstate.get("optimizer"), step)
    report = dict(result.report)
    if probe_verify:
        from .verification import verify

        report["verify"] = verify(model, new_model, result.param_maps, vocab_size=new_cfg.model.vocab_size,
                                  train_cfg=new_cfg.train)
    new_tstate = dict(tstate)
    new_tstate["optimizer"] = new_opt.state_dict()
    new_tstate["step"] = step
    save_checkpoint(out, new_model, new_cfg, tok, new_tstate if tstate else None)
    return report


def grow_in_training(trainer, spec: dict) -> dict:
    """Grow the trainer's model at the current step, carrying optimizer state, schedule and RNG."""
    spec = dict(spec)
    rng = torch.get_rng_state()
    # Under FSDP2 the model and optimizer state are gathered whole on every rank first; the growth
    # itself is the single-process code, and the trainer shards the grown model again (set_model).
    old_model, old_state = trainer.full_model_and_optimizer_state()
    new_model, new_cfg, new_opt, result = grow(old_model, trainer.cfg, spec, old_state, trainer.step)
    torch.set_rng_state(rng)  # growth's random init must not shift the training RNG stream
    from .diagnostics import PostGrowthMonitor, probe_batch, residual_rms, rms_ratio_report

    x, y = next(iter(trainer.data.val_batches(1, trainer.cfg.train.batch_size)))
    probe = torch.cat([x, y[:, -1:]], dim=1) if bool((y[:, :-1] == x[:, 1:]).all()) else None  # real text (LM data)
    result.report.update(rms_ratio_report(old_model, new_model, new_cfg.model.vocab_size, probe))
    trainer.callbacks = [cb for cb in trainer.callbacks if not isinstance(cb, PostGrowthMonitor)]
    # a few rows of the same probe, kept for the post-growth RMS ratio (cheap enough to run every logged step)
    ids = (probe if probe is not None else probe_batch(new_cfg.model.vocab_size))[:4]
    ids = ids[:, :min(ids.shape[1], new_cfg.model.max_seq_len + 1, trainer.cfg.model.max_seq_len + 1)]
    trainer.callbacks.append(PostGrowthMonitor(result.param_maps, ids, residual_rms(old_model, ids)))
    trainer.cfg = new_cfg
    trainer.set_model(new_model, new_opt)
    restore_training_extras(trainer)
    trainer.log({"step": trainer.step, "event": "growth", **_jsonable(result.report)})
    trainer.say(f"grew at step {trainer.step}: {new_cfg.growth_history[-1]}")
    trainer.say(f"  activation RMS ratio per layer (grown/original) {result.report['rms_ratio_per_layer']}, "
                f"validation-batch loss jump {result.report['loss_jump']:+.4f}")
    return result.report


def restore_training_extras(trainer) -> None:
    """Re-create what a grown run needs beyond weights and optimizer state (the re-warmup schedule)."""
    rec = next((r for r in reversed(trainer.cfg.growth_history) if r.get("rewarmup")), None)
    if rec is None:
        trainer.rewarmup = None
        return
    from .rewarmup import make_rewarmup

    trainer.rewarmup = make_rewarmup(rec)


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


__all__ = ["ParamMap", "GrowthResult", "register_grower", "families", "check_growth_spec", "check_growth_applies", "register_spec_check", "grow", "grow_checkpoint", "grow_in_training",
           "transplant_optimizer_state", "restore_training_extras", "OPTIMIZER_STATE_POLICIES"]
