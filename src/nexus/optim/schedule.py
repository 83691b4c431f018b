"""Learning-rate schedules as a multiplier of the peak lr at a given step (warmup first). The kinds and their
shapes are the table in optim/schedules/ (one module per kind); this module applies the configured one."""

from __future__ import annotations

from ..config import TrainConfig
from .schedules import schedule_of


def lr_factor(step: int, tcfg: TrainConfig) -> float:
    """Multiplier for optimizer step `step` (0-based) of a schedule over tcfg.schedule_steps (0: tcfg.steps).
    Past the horizon the factor stays at its final value (a run resumed with more steps continues at
    the floor instead of jumping back up)."""
    return schedule_of(tcfg).factor(step, tcfg)


def set_lr(optimizer, step: int, tcfg: TrainConfig, lr_rule=None) -> float:
    """Set every group's lr from its base lr; `lr_rule(step, base_lr, factor, tcfg) -> lr_new` sets the
    learning rate of the entries the optimizer state marks new (SPARKLING's re-warmup of freshly grown
    entries), and its optional `lr_rule.old` (same arguments) that of the other entries where it departs
    from base_lr x factor (the bridge after a grown run's horizon is re-planned, growth/rewarmup.py).
    Returns the factor the old entries' lr was set to (lr / base lr: the schedule's own factor, or the
    re-plan bridge's where `lr_rule.old` departs from it), so what is logged is what was applied."""
    f = lr_factor(step, tcfg)
    old = getattr(lr_rule, "old", None)
    for g in optimizer.param_groups:
        g["lr"] = old(step, g["base_lr"], f, tcfg) if old is not None else g["base_lr"] * f
        g["lr_new"] = lr_rule(step, g["base_lr"], f, tcfg) if lr_rule is not None else None
    return old(step, 1.0, f, tcfg) if old is not None else f  # base_lr x factor at base_lr 1: the factor
