"""SPARKLING asymmetric learning-rate re-warmup (eq. 25-28) for freshly grown entries.

Old parameters stay exactly on the baseline schedule eta(t) (the trainer's `set_lr`). Entries marked
new in the optimizer state (`state["new_mask"]`) follow

    eta_new(t) = eta_e + (rho*eta_e - eta_e) * (t - t_e) / tau_w            for t_e <= t < t_e + tau_w
               = eta_min + (rho*eta_e - eta_min) * psi((t - t_e - tau_w) / (T - t_e - tau_w))   after

with eta_e = eta(t_e), psi(x) = (1 + cos(pi x)) / 2 and eta_min the baseline's final lr. The optimizers
apply this per-element lr to the *update* (after Adam's normalisation / Muon's orthogonalisation),
so it works under both. The `rewarmup-all` baseline uses the same curve with every entry marked new
(`mark_all_new`, done by `nexus.growth.grow` when the record says `rewarmup_all`).
"""
from __future__ import annotations

import math

from ..config import ConfigError
from ..train.schedule import lr_factor


def rewarmup_factor(step: int, t_e: int, rho: float, tau: int, tcfg) -> float:
    """eta_new(step) / peak lr, for step >= t_e (before t_e the baseline factor is returned)."""
    base_e = lr_factor(t_e, tcfg)
    if step < t_e:
        return lr_factor(step, tcfg)
    floor = tcfg.min_lr_ratio
    peak = rho * base_e
    if step < t_e + tau:
        return base_e + (peak - base_e) * (step - t_e) / tau
    span = max(tcfg.steps - t_e - tau, 1)
    progress = min((step - t_e - tau) / span, 1.0)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_rewarmup(record: dict):
    """Growth record (with "step" and "rewarmup": {"rho", "tau"}) -> callable(step, base_lr, factor, tcfg) -> lr_new."""
    rw = record.get("rewarmup")
    if not isinstance(rw, dict) or "rho" not in rw or "tau" not in rw:
        raise ConfigError(f"growth record rewarmup={rw!r} (valid: a mapping with rho and tau)")
    t_e, rho, tau = int(record.get("step", 0)), float(rw["rho"]), int(rw["tau"])

    def lr_new(step: int, base_lr: float, factor: float, tcfg) -> float:
        return base_lr * rewarmup_factor(step, t_e, rho, tau, tcfg)

    lr_new.t_e, lr_new.rho, lr_new.tau = t_e, rho, tau
    return lr_new
