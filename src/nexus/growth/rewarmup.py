"""SPARKLING asymmetric learning-rate re-warmup (eq. 25-28) for freshly grown entries, under every
baseline schedule.

Old parameters stay exactly on the baseline schedule eta(t) (the trainer's `set_lr`). Entries marked
new in the optimizer state (`state["new_mask"]`) follow eq. 28, eta_new(t) = f(t - t_e; tau_w, ...):
the baseline schedule's own function f, restarted at the growth step t_e with a warmup of tau_w steps
from eta_e = eta(t_e) to rho*eta_e, then the baseline's decay *shape* down to the same final lr at the
same last step as the old entries:

    eta_new(t) = eta_e + (rho*eta_e - eta_e) * (t - t_e) / tau_w         for t_e <= t < t_e + tau_w
               = eta_min + (rho*eta_e - eta_min) * d(t)                  after

where d(t) is the baseline schedule's own decay shape (`Schedule.decay` of optim/schedules/, the table the
trainer's lr uses too), falling from 1 to 0 over the baseline's decay window, started no earlier than t_e + tau_w.
For the built-in kinds:
  cosine           d = psi((t - t_e - tau_w) / (T_last - t_e - tau_w)), psi(x) = (1 + cos(pi x)) / 2
                   (the paper's eq. 28: the decay window is everything after the warmup)
  wsd, linear_warmdown  flat (d = 1) up to the baseline's last flat step D - 1 (D: start of the last
                   decay_fraction of the steps), then linear to 0 at T_last, the same window as the old
                   entries; linear from t_e + tau_w instead when the re-warmup ends inside that window
  constant         d = 1: no decay, the new entries stay at rho*eta_e
T_last = horizon - 1 is the step on which the baseline itself reaches its final lr (optim.schedule.lr_factor;
horizon = train.schedule_steps, or train.steps when 0).
A grown checkpoint trained past the horizon it was grown under (`nexus grow` then `nexus train --resume
--train.steps N`) has its schedule re-planned over the new horizon (train/run_dir.py), and the record
says where: `lr_replan = {step: s, horizon_before: H}`. The re-planned baseline at s is not the lr the
old entries trained with (a cosine that ended sits at its floor, 3e-4; re-planned over twice the steps it
is 1.7e-3 at s): jumping there in one step is the instability a warmup exists to prevent, on weights
whose Adam moments are tuned to the floor. So every entry, old and new, moves linearly over
train.warmup_steps steps (the run's own warmup length; at least 1) from its lr at s under the old plan
to its lr at s + warmup_steps under the new one; after that old entries follow the re-planned baseline
and new ones eq. 28 over it. (Not tau_w: SPARKLING's 250 often exceeds the whole continuation, and the
bridge would then aim at the new plan's last step, its floor.) \
Without a re-plan (growth inside a run planned over its whole length, SPARKLING's
setting) old entries stay exactly on the baseline.
The optimizers apply this per-element lr to the *update* (after Adam's normalisation / Muon's
orthogonalisation), so it works under both. The `rewarmup-all` baseline uses the same curve with every
entry marked new (done by `nexus.growth.grow` when the record says `rewarmup_all`).
"""

from __future__ import annotations

import dataclasses
import numbers

from ..config import ConfigError
from ..optim.schedule import lr_factor
from ..optim.schedules import schedule_of


def rewarmup_factor(step: int, t_e: int, rho: float, tau: int, tcfg) -> float:
    """eta_new(step) / peak lr, for step >= t_e (before t_e the baseline factor is returned)."""
    if step < t_e:
        return lr_factor(step, tcfg)
    base_e = lr_factor(t_e, tcfg)
    peak = rho * base_e
    if step < t_e + tau:
        return base_e + (peak - base_e) * (step - t_e) / tau
    floor = tcfg.min_lr_ratio
    return floor + (peak - floor) * schedule_of(tcfg).decay(step, t_e + tau, tcfg)


def make_rewarmup(record: dict):
    """Growth record (with "step" and "rewarmup": {"rho", "tau"}, optionally "lr_replan") ->
    callable(step, base_lr, factor, tcfg) -> lr_new; with a re-plan also `.old` (same arguments) -> the
    old entries' lr (optim.schedule.set_lr)."""
    rw = record.get("rewarmup")
    if rw is not None and (not isinstance(rw, dict) or "rho" not in rw or "tau" not in rw):
        raise ConfigError(f"growth record rewarmup={rw!r} (valid: a mapping with rho and tau)")
    if rw is None and record.get("lr_replan") is None:
        raise ConfigError(f"growth record rewarmup={rw!r} (valid: a mapping with rho and tau)")
    if not isinstance(record.get("step"), numbers.Integral) or isinstance(record.get("step"), bool):
        raise ConfigError(f"growth record step={record.get('step')!r} (valid: the integer step the growth happened at)")
    t_e = int(record["step"])
    rho, tau = (float(rw["rho"]), int(rw["tau"])) if rw else (1.0, 0)
    old_f, new_f = planned_factors(record)
    if rw and (not 0 < rho < float("inf") or tau < 0):  # a record written before --rewarmup refused nan
        raise ConfigError(
            f"growth record rewarmup={rw!r} (valid: a finite rho > 0 and tau >= 0; grow the checkpoint "
            "again with a valid --rewarmup RHO,TAU)"
        )

    def lr_new(step: int, base_lr: float, factor: float, tcfg) -> float:
        return base_lr * new_f(step, tcfg)

    lr_new.t_e, lr_new.rho, lr_new.tau = t_e, rho, tau
    if record.get("lr_replan"):
        lr_new.old = lambda step, base_lr, factor, tcfg: base_lr * old_f(step, tcfg)
    return lr_new


def planned_factors(record: dict | None):
    """(old(step, tcfg), new(step, tcfg)): the lr / peak lr of the old and the new entries after the growth
    `record` (None: no growth, both the baseline), with the bridge of a re-planned horizon (module docstring)."""
    rw = (record or {}).get("rewarmup") if isinstance((record or {}).get("rewarmup"), dict) else None

    def old(step: int, tcfg) -> float:
        return lr_factor(step, tcfg)

    def new(step: int, tcfg) -> float:
        if not rw:
            return old(step, tcfg)
        assert record is not None  # rw is set only from a record
        return rewarmup_factor(step, int(record["step"]), float(rw["rho"]), int(rw["tau"]), tcfg)

    replan = (record or {}).get("lr_replan")
    if not replan:
        return old, new
    s, before = int(replan["step"]), int(replan["horizon_before"])

    def bridged(plan):
        def f(step: int, tcfg) -> float:
            tau = max(tcfg.warmup_steps, 1)
            if not s <= step < s + tau:
                return plan(step, tcfg)
            start = plan(s, dataclasses.replace(tcfg, schedule_steps=before))  # what the old plan gave at s
            return start + (plan(s + tau, tcfg) - start) * (step - s) / tau

        return f

    return bridged(old), bridged(new)


def lr_plan(tcfg, start: int, record: dict | None = None) -> tuple[str, bool]:
    """(one line with the planned lr from step `start` to the run's last step: the first step, the growth
    step of `record` (old and new entries), the peak and the last step; whether the old entries sit at the
    schedule's floor on every one of those steps). Printed before training, so the schedule is seen first."""
    last = max(tcfg.steps - 1, start)
    rw = (record or {}).get("rewarmup") if isinstance((record or {}).get("rewarmup"), dict) else None
    t_e = int(record["step"]) if record else None
    old_f, new_f = planned_factors(record)

    def old(t: int) -> float:
        return tcfg.lr * old_f(t, tcfg)

    def new(t: int) -> float:
        return tcfg.lr * new_f(t, tcfg)

    # every schedule here is monotone between these steps, so its peak over [start, last] is at one of them
    marks = {start, last, tcfg.warmup_steps - 1, tcfg.warmup_steps}
    if t_e is not None:
        marks |= {t_e, t_e + int(rw["tau"]) - 1, t_e + int(rw["tau"])} if rw else {t_e}
    replan = (record or {}).get("lr_replan")
    if replan:  # the bridge's ends
        tau = max(tcfg.warmup_steps, 1)
        marks |= {int(replan["step"]), int(replan["step"]) + tau - 1, int(replan["step"]) + tau}
    marks = sorted(t for t in marks if start <= t <= last)
    parts = [  # t_e is set whenever rw is (both come from record)
        f"first step {start}: {old(start):.3g}"
        + (f" (new entries {new(start):.3g})" if rw and t_e is not None and start > t_e else "")
    ]
    if t_e is not None and start <= t_e <= last:
        parts.append(f"growth step {t_e}: old entries {old(t_e):.3g}, new {new(t_e):.3g}")
    p_old = max(marks, key=old)
    parts.append(f"peak {old(p_old):.3g} at step {p_old}")
    if rw:
        p_new = max((t for t in marks if t >= t_e), key=new, default=None)
        if p_new is not None:
            parts[-1] += f" (new entries {new(p_new):.3g} at step {p_new})"
    parts.append(f"last step {last}: {old(last):.3g}" + (f" (new entries {new(last):.3g})" if rw else ""))
    floor = tcfg.lr * tcfg.min_lr_ratio
    at_floor = schedule_of(tcfg).decays and last > start and all(abs(old(t) - floor) <= 1e-12 * tcfg.lr for t in marks)
    return "lr plan: " + " | ".join(parts), at_floor
