"""Learning-rate schedules as a multiplier of the peak lr at a given step (warmup first)."""
from __future__ import annotations

import math

from ..config import TrainConfig
from ..config_base import declare_choice

declare_choice("train.schedule", "cosine", "cosine decay to min_lr_ratio x lr over the horizon")
declare_choice("train.schedule", "wsd", "warmup-stable-decay: flat, then linear decay over the last decay_fraction")
declare_choice("train.schedule", "linear_warmdown", "flat, then linear decay over the last decay_fraction (the same "
               "curve as wsd, ExoFormer's name for it)")
declare_choice("train.schedule", "constant", "the peak lr after warmup, no decay")


def lr_factor(step: int, tcfg: TrainConfig) -> float:
    """Multiplier for optimizer step `step` (0-based) of a schedule over tcfg.schedule_steps (0: tcfg.steps).
    Past the horizon the factor stays at its final value (a run resumed with more steps continues at
    the floor instead of jumping back up)."""
    total, warm, floor = tcfg.schedule_steps or tcfg.steps, tcfg.warmup_steps, tcfg.min_lr_ratio
    if warm and step < warm:
        return (step + 1) / warm
    if tcfg.schedule == "constant":
        return 1.0
    if tcfg.schedule == "cosine":
        span = max(total - warm - 1, 1)  # the last step sits on the floor (with one step after the warmup, that step is the peak)
        progress = min(max(step - warm, 0) / span, 1.0)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    # wsd and linear_warmdown: flat, then a linear decay over the last decay_fraction of steps
    decay_steps = max(int(round(total * tcfg.decay_fraction)), 1)
    decay_start = total - decay_steps
    if step < decay_start:
        return 1.0
    progress = min((step - decay_start + 1) / decay_steps, 1.0)
    return 1.0 + (floor - 1.0) * progress


def set_lr(optimizer, step: int, tcfg: TrainConfig, lr_rule=None) -> float:
    """Set every group's lr from its base lr; `lr_rule(step, base_lr, factor, tcfg) -> lr_new` sets the
    learning rate of the entries the optimizer state marks new (SPARKLING's re-warmup of freshly grown
    entries), and its optional `lr_rule.old` (same arguments) that of the other entries where it departs
    from base_lr x factor (the bridge after a grown run's horizon is re-planned, growth/rewarmup.py).
    Returns the schedule factor."""
    f = lr_factor(step, tcfg)
    old = getattr(lr_rule, "old", None)
    for g in optimizer.param_groups:
        g["lr"] = old(step, g["base_lr"], f, tcfg) if old is not None else g["base_lr"] * f
        g["lr_new"] = lr_rule(step, g["base_lr"], f, tcfg) if lr_rule is not None else None
    return f
