"""Issue 49 items 1 and 3 for `train.schedule`: each kind is one object holding its shape (optim/schedules/), used by
the trainer's lr, SPARKLING's re-warmup and the experiment's description alike.

* The built-in kinds compute bitwise the lr they computed before the table existed: a digest of every factor over a
  grid of configs (the trainer's `lr_factor`, the re-warmup's new-entry lr and a re-planned run's bridge), frozen from
  the code before this change (commit a14a802's optim/schedule.py and growth/rewarmup.py, run on this grid).
* Each built-in kind matches its formula, written here from its definition (not from the code), to 1e-12.
* Every registered kind, a plugin's or a new file's included, keeps the invariants the trainer and the re-warmup rely
  on: a monotone warmup to the peak, non-increasing after it, the final ratio on the horizon's last step and after,
  a decay shape from 1 to 0, and a re-planned horizon bridged from the old plan's lr to the new plan's.
* A name declared without a shape is refused at validation, in one line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math

import pytest

from nexus import config_base as C
from nexus.config import ConfigError, RunConfig, TrainConfig
from nexus.growth.rewarmup import make_rewarmup, planned_factors
from nexus.optim.schedule import lr_factor
from nexus.optim.schedules import Schedule, schedule_of, schedules

BUILT_IN = ("cosine", "wsd", "linear_warmdown", "constant")
# sha256 of the grid below as the code before the schedule table computed it (float.hex of each value, in order)
FROZEN_DIGEST = "22e4f86575db8efc98adfe929350b9410f8cbe32889a7ad33114be7fdc55833b"


def grid_values():
    """Every factor of the grid: (schedule, steps, schedule_steps, warmup, floor, decay_fraction) -> the trainer's
    factor at each step, and for longer runs the re-warmup's new-entry lr and a re-planned run's old/new lr."""
    for sched, steps, sstep, warm, floor, frac in itertools.product(
        BUILT_IN, (1, 2, 7, 120), (0, 40), (0, 1, 30), (0.0, 0.1), (0.0, 0.2, 1.0)
    ):
        t = TrainConfig(
            steps=steps,
            schedule_steps=sstep,
            warmup_steps=warm,
            min_lr_ratio=floor,
            decay_fraction=frac,
            schedule=sched,
        )
        yield from (lr_factor(s, t) for s in range(max(steps, sstep) + 3))
        if steps >= 100:
            for t_e, tau in ((steps // 2, 25), (steps - 5, 10), (3, 250)):
                fn = make_rewarmup({"step": t_e, "rewarmup": {"rho": 1.3, "tau": tau}})
                yield from (fn(s, 1.0, None, t) for s in range(steps + 3))
                old, new = planned_factors(
                    {
                        "step": t_e,
                        "rewarmup": {"rho": 1.3, "tau": tau},
                        "lr_replan": {"step": t_e + 3, "horizon_before": steps // 2},
                    }
                )
                for s in range(steps + 3):
                    yield old(s, t)
                    yield new(s, t)


def test_the_built_in_kinds_compute_bitwise_what_they_computed_before():
    h = hashlib.sha256()
    for v in grid_values():
        h.update(float.hex(v).encode())
    assert h.hexdigest() == FROZEN_DIGEST


def reference(step: int, t: TrainConfig) -> float:
    """The lr / peak of each built-in kind from its definition: linear warmup (step+1)/W for step < W; then
    cosine: floor + (1-floor)(1+cos(pi x))/2, x = (step-W)/(H-1-W) clamped to [0, 1] (H-1-W at least 1);
    wsd / linear_warmdown: 1 before D = H - max(round(H f), 1), then 1 - (1-floor) min((step-D+1)/(H-D), 1);
    constant: 1."""
    H, W, lo = t.schedule_steps or t.steps, t.warmup_steps, t.min_lr_ratio
    if step < W:
        return (step + 1) / W
    if t.schedule == "constant":
        return 1.0
    if t.schedule == "cosine":
        x = min(max((step - W) / max(H - 1 - W, 1), 0.0), 1.0)
        return lo + (1 - lo) * (1 + math.cos(math.pi * x)) / 2
    d = H - max(round(H * t.decay_fraction), 1)
    return 1.0 if step < d else 1 - (1 - lo) * min((step - d + 1) / (H - d), 1.0)


@pytest.mark.parametrize("schedule", BUILT_IN)
@pytest.mark.parametrize("steps,warm,frac", [(1, 0, 0.2), (10, 3, 0.0), (200, 30, 0.2), (200, 0, 1.0), (97, 96, 0.5)])
def test_each_built_in_kind_follows_its_formula(schedule, steps, warm, frac):
    t = TrainConfig(steps=steps, warmup_steps=warm, min_lr_ratio=0.05, decay_fraction=frac, schedule=schedule)
    for s in range(steps + 5):
        assert lr_factor(s, t) == pytest.approx(reference(s, t), rel=1e-12, abs=1e-15), s


def kinds():
    return sorted(schedules())


@pytest.mark.parametrize("name", kinds())
@pytest.mark.parametrize("steps,warm,frac", [(1, 0, 0.2), (2, 1, 0.2), (50, 10, 0.2), (300, 30, 0.1), (300, 0, 1.0)])
def test_every_registered_kind_keeps_the_invariants(name, steps, warm, frac):
    kind = schedules()[name]
    t = TrainConfig(steps=steps, warmup_steps=warm, min_lr_ratio=0.1, decay_fraction=frac, schedule=name)
    RunConfig(train=t).validate()
    f = [lr_factor(s, t) for s in range(steps + 10)]
    assert f[:warm] == sorted(f[:warm]) and all(0 < x <= 1 for x in f[:warm]), "warmup not monotone up to the peak"
    after = f[warm:]
    assert all(a >= b - 1e-15 for a, b in zip(after, after[1:])), "the lr rises after the warmup"
    assert all(t.min_lr_ratio - 1e-12 <= x <= 1 + 1e-12 for x in after)
    final = t.min_lr_ratio if kind.decays else 1.0
    if steps - warm >= 2:  # (cosine with a single step after the warmup keeps that step at the peak, by design)
        assert f[steps - 1 :] == pytest.approx([final] * len(f[steps - 1 :]), abs=1e-12), "not at the final ratio"
    # the decay shape the re-warmup runs on: 1 up to its start, non-increasing, 0 at the last step when it decays
    for start in (0, steps // 2, steps - 1):
        d = [kind.decay(s, start, t) for s in range(steps + 3)]
        assert d[: start + 1] == [1.0] * (start + 1) and all(a >= b - 1e-15 for a, b in zip(d, d[1:]))
        if kind.decays and start < steps - 1:
            assert d[steps - 1] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("name", kinds())
def test_every_registered_kind_is_re_planned_after_growth(name):
    """A grown run trained past the horizon it was grown under: every entry moves linearly from the lr the old plan
    gave at the re-plan step to the new plan's, then follows the new plan; the new entries end where the old do."""
    t = TrainConfig(steps=400, warmup_steps=20, min_lr_ratio=0.1, decay_fraction=0.2, schedule=name)
    s, before = 250, 200
    rec = {"step": 150, "rewarmup": {"rho": 1.3, "tau": 30}, "lr_replan": {"step": s, "horizon_before": before}}
    old, new = planned_factors(rec)
    was = dataclasses.replace(t, schedule_steps=before)
    assert old(s, t) == pytest.approx(lr_factor(s, was))  # continuous where the plan changes
    for k in range(t.warmup_steps + 1):
        want = lr_factor(s, was) + (lr_factor(s + t.warmup_steps, t) - lr_factor(s, was)) * k / t.warmup_steps
        assert old(s + k, t) == pytest.approx(want, rel=1e-12)
    assert [old(x, t) for x in range(s + t.warmup_steps, 400)] == [
        lr_factor(x, t) for x in range(s + t.warmup_steps, 400)
    ]
    assert new(399, t) == pytest.approx(old(399, t) if schedule_of(t).decays else 1.3 * lr_factor(150, t))


def test_a_name_declared_without_its_shape_is_refused_and_a_declared_kind_runs(monkeypatch):
    monkeypatch.setitem(C._DECLARED, "train.schedule", dict(schedules() and C._DECLARED["train.schedule"]))
    C.declare_choice("train.schedule", "inverse_sqrt", "1/sqrt(step) after warmup")  # a name, no shape
    cfg = RunConfig()
    cfg.train.schedule = "inverse_sqrt"
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    assert "train.schedule='inverse_sqrt'" in str(e.value) and "inverse_sqrt" not in str(e.value).split("valid:")[1]
    assert "\n" not in str(e.value)

    class Halving(Schedule):  # a kind with its shape: halves once at the horizon's middle
        name, reason = "halving_test", "test"

        def decay(self, step, start, tcfg):
            return 1.0 if step < max(start, tcfg.steps // 2) else 0.0

    monkeypatch.setitem(C._DECLARED, "train.schedule", dict(C._DECLARED["train.schedule"]))
    C.declare_choice("train.schedule", "halving_test", "test", implementation=Halving())
    cfg.train.schedule, cfg.train.warmup_steps, cfg.train.min_lr_ratio = "halving_test", 0, 0.5
    cfg.validate()
    assert [lr_factor(s, cfg.train) for s in (0, cfg.train.steps // 2)] == [1.0, 0.5]
