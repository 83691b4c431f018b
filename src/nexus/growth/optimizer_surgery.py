"""Optimizer-state surgery across a growth: each new parameter's state is built, by parameter *name*
(never list order), from the old state of the tensor it grew from, under one of the policies
(asymmetric, copy, drop, scaled); AdamW's step becomes per-element where old and new entries share a
tensor, and `new_mask` marks the new entries for the re-warmup."""

from __future__ import annotations

import torch

from ..config import ConfigError
from ..optim.base import state_growth_of
from .param_map import ParamMap
from .spec import OPTIMIZER_STATE_POLICIES


def transplant_optimizer_state(
    old_state: dict, new_optimizer, maps: dict[str, ParamMap], policy: str = "asymmetric", mark_new: bool = True
) -> None:
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
        declared = state_growth_of(opt)  # the optimizer says which state tensors grow, and how (optim/base.py)
        for group in opt.param_groups:
            for p in group["params"]:
                name = new_optimizer.param_names[id(p)]
                pm = maps.get(name, ParamMap(old_name=name))
                # only grown/new tensors get a mask:
                # a full-size zero mask per unchanged tensor costs ~1 GB at 100M params
                has_new = pm.old_name is None or (
                    pm.old_slices is not None and tuple(sl.stop for sl in pm.old_slices) != tuple(p.shape)
                )
                mask = pm.new_mask(p.shape).to(p.device) if has_new else None
                # a new tensor duplicating a whole old one (ParamMap.copy_of) starts from its state under `copy` only
                source = pm.old_name if pm.old_name is not None else (pm.copy_of if policy == "copy" else None)
                st_old = old.get(source) if source is not None else None
                st: dict = {}
                if policy != "drop" and st_old is not None:
                    for key, val in st_old.items():
                        if key in ("new_mask",):
                            continue
                        if key == "step":
                            st[key] = _grow_step(val, p, pm, policy)
                            continue
                        if not torch.is_tensor(val) or val.shape == ():
                            st[key] = val
                            continue
                        if key not in declared:
                            raise RuntimeError(
                                f"{type(opt).__name__} keeps state {key!r} of {name} that its "
                                f"state_growth does not declare (declared: {sorted(declared)}; "
                                "optim/base.py GrowableOptimizer)"
                            )
                        st[key] = _grow_tensor_state(val, p, pm, policy, declared[key])
                if mark_new and mask is not None:  # has_new: the mask has new entries (no full scan)
                    st["new_mask"] = mask
                if st:
                    opt.state[p] = st


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
            # where, not out[new] = ...: boolean indexing costs a host sync (nonzero) on an accelerator
            new = pm.new_mask(p.shape).to(p.device).bool()
            out = torch.where(new, _copied_state(val, p, pm), out)
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


def _grow_step(val, p: torch.Tensor, pm: ParamMap, policy: str):
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
