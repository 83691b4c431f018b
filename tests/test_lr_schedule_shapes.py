"""The learning-rate schedules step by step against their definitions (nexus/optim/schedule.py):

  warmup   f(s) = (s + 1) / W                    for s < W
  cosine   f(s) = r + (1 - r) (1 + cos(pi p)) / 2, p = min((s - W) / (T - W - 1), 1)
  wsd      f(s) = 1 before the last D = round(T * decay_fraction) steps, then
           1 - (1 - r) min((s - (T - D) + 1) / D, 1)  (linear_warmdown is the same shape)
  constant f(s) = 1

with T the horizon (schedule_steps, else steps) and r = min_lr_ratio; past T every schedule stays
at its last value."""

import math

import pytest

from nexus.config import TrainConfig
from nexus.optim.schedule import lr_factor, set_lr


def cosine_ref(s, T, W, r):
    if s < W:
        return (s + 1) / W
    p = min((s - W) / max(T - W - 1, 1), 1.0)
    return r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p))


def wsd_ref(s, T, W, r, frac):
    if s < W:
        return (s + 1) / W
    D = max(round(T * frac), 1)
    if s < T - D:
        return 1.0
    return 1 - (1 - r) * min((s - (T - D) + 1) / D, 1.0)


@pytest.mark.parametrize("T,W", [(40, 0), (40, 5), (7, 3), (5, 3), (4, 3)])  # (5, 3), (4, 3): a 1-step span
def test_cosine_follows_its_formula_at_every_step_and_stays_on_the_floor(T, W):
    t = TrainConfig(steps=T, warmup_steps=W, schedule="cosine", min_lr_ratio=0.2)
    for s in range(T + 5):
        assert lr_factor(s, t) == pytest.approx(cosine_ref(s, T, W, 0.2), rel=1e-12), s
    if T - W > 1:  # with one step after warmup that step is the peak
        assert lr_factor(T - 1, t) == pytest.approx(0.2, rel=1e-12)  # the last step sits on the floor
    assert lr_factor(W, t) == pytest.approx(1.0, rel=1e-12)  # the peak right after warmup


@pytest.mark.parametrize("schedule", ["wsd", "linear_warmdown"])
@pytest.mark.parametrize("T,W,frac", [(40, 4, 0.25), (10, 0, 0.02), (30, 2, 1 / 3)])
def test_warmdown_schedules_follow_their_formula(schedule, T, W, frac):
    t = TrainConfig(steps=T, warmup_steps=W, schedule=schedule, min_lr_ratio=0.1, decay_fraction=frac)
    for s in range(T + 5):
        assert lr_factor(s, t) == pytest.approx(wsd_ref(s, T, W, 0.1, frac), rel=1e-12), s
    assert lr_factor(T - 1, t) == pytest.approx(0.1, rel=1e-12)


def test_the_schedule_horizon_wins_over_the_step_count():
    """A resumed run with more steps keeps its old horizon: the factor is that of the horizon."""
    t = TrainConfig(steps=100, schedule_steps=30, warmup_steps=3, schedule="cosine", min_lr_ratio=0.1)
    for s in (3, 10, 29, 50):
        assert lr_factor(s, t) == pytest.approx(cosine_ref(s, 30, 3, 0.1), rel=1e-12)
    w = TrainConfig(steps=100, schedule_steps=30, warmup_steps=0, schedule="wsd", min_lr_ratio=0.1, decay_fraction=0.2)
    assert [lr_factor(s, w) for s in (23, 24, 29)] == pytest.approx([wsd_ref(s, 30, 0, 0.1, 0.2) for s in (23, 24, 29)])


def test_constant_is_one_after_warmup():
    t = TrainConfig(steps=20, warmup_steps=4, schedule="constant")
    assert [lr_factor(s, t) for s in range(25)] == pytest.approx([(s + 1) / 4 for s in range(4)] + [1.0] * 21)


class _Groups:
    def __init__(self, *base):
        self.param_groups = [{"base_lr": b, "lr": 0.0} for b in base]


def test_set_lr_scales_every_groups_own_base_lr_and_sets_the_new_entries_lr_by_the_rule():
    t = TrainConfig(steps=40, warmup_steps=5, schedule="cosine", min_lr_ratio=0.1)
    opt = _Groups(1e-3, 0.02)
    f = set_lr(opt, 17, t)
    assert f == lr_factor(17, t)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-3 * f, 0.02 * f], rel=1e-15)
    assert all(g["lr_new"] is None for g in opt.param_groups)
    seen = []

    def rule(step, base, factor, tcfg):
        seen.append((step, base, factor, tcfg))
        return 3 * base

    set_lr(opt, 17, t, rule)
    assert [g["lr_new"] for g in opt.param_groups] == pytest.approx([3e-3, 0.06], rel=1e-15)
    assert seen == [(17, 1e-3, f, t), (17, 0.02, f, t)]
