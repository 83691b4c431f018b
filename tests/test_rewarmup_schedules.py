"""Re-warmup under every baseline schedule (SPARKLING eq. 27-28 generalised: rise from eta(t_e) to
rho*eta(t_e) over tau steps, then the baseline's own decay shape to the same final lr at the same last
step). The expected curve is written here from the paper's equations, not from nexus.growth.rewarmup."""

import math

import pytest

from nexus.config import TrainConfig
from nexus.growth.rewarmup import make_rewarmup
from nexus.optim.schedule import lr_factor

SCHEDULES = ("cosine", "wsd", "linear_warmdown", "constant")


def paper_new_lr(t, t_e, rho, tau, tcfg, eta_e):
    """eta_new(t)/eta_max. Eq. 27: peak rho*eta_e after a linear rise over tau steps. Eq. 28: then the
    baseline's decay. Cosine: psi over [t_e + tau, T_last]. WSD / linear warm-down: flat, then linear
    over the baseline's decay window (the last decay_fraction of the steps). Constant: no decay."""
    peak, eta_min, last = rho * eta_e, tcfg.min_lr_ratio, tcfg.steps - 1
    if t < t_e + tau:
        return eta_e + (peak - eta_e) * (t - t_e) / tau
    if tcfg.schedule == "constant":
        return peak
    if tcfg.schedule == "cosine":
        x = (t - t_e - tau) / (last - t_e - tau)
        return eta_min + (peak - eta_min) * 0.5 * (1 + math.cos(math.pi * x))
    # the baseline is flat through step D - 1 and reaches eta_min at T_last; the new entries decay on
    # that window, or from the re-warmup's peak when it ends inside the window
    last_flat = max(tcfg.steps - round(tcfg.steps * tcfg.decay_fraction) - 1, t_e + tau)
    if t <= last_flat:
        return peak
    return peak + (eta_min - peak) * (t - last_flat) / (last - last_flat)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("t_e,tau", [(500, 250), (300, 30), (850, 20)])
def test_new_entry_lr_curve_matches_the_formula(schedule, t_e, tau):
    tcfg = TrainConfig(steps=1000, warmup_steps=30, schedule=schedule, min_lr_ratio=0.01, decay_fraction=0.2)
    rho = 1.3
    fn = make_rewarmup({"step": t_e, "rewarmup": {"rho": rho, "tau": tau}})
    eta_e = lr_factor(t_e, tcfg)
    for t in range(t_e, tcfg.steps):
        want = paper_new_lr(t, t_e, rho, tau, tcfg, eta_e)
        assert fn(t, 1.0, None, tcfg) == pytest.approx(want, rel=1e-12, abs=1e-15), f"step {t}"
        # the failure: new entries dropping below the old ones (0.53x under WSD, 0.13x constant)
        assert fn(t, 1.0, None, tcfg) >= lr_factor(t, tcfg) * (1 - 1e-12), f"step {t}: new below old"
    assert fn(t_e, 1.0, None, tcfg) == pytest.approx(eta_e)  # starts exactly at eta(t_e)
    assert fn(t_e + tau, 1.0, None, tcfg) == pytest.approx(rho * eta_e)  # peak rho * eta(t_e)
    end = fn(tcfg.steps - 1, 1.0, None, tcfg)
    if schedule == "constant":
        assert end == pytest.approx(rho * eta_e)
    else:  # the same end as the old entries
        assert end == pytest.approx(lr_factor(tcfg.steps - 1, tcfg)) == pytest.approx(tcfg.min_lr_ratio)


def test_wsd_new_entries_share_the_baseline_decay_window():
    tcfg = TrainConfig(steps=1000, warmup_steps=30, schedule="wsd", min_lr_ratio=0.0, decay_fraction=0.2)
    fn = make_rewarmup({"step": 500, "rewarmup": {"rho": 1.3, "tau": 250}})
    assert fn(799, 1.0, None, tcfg) == pytest.approx(1.3)  # flat at rho*eta_e until the decay starts
    for t in (800, 900, 950, 999):  # then new/old = 1.3 exactly (both linear to 0 over the same window)
        assert fn(t, 1.0, None, tcfg) / max(lr_factor(t, tcfg), 1e-30) == pytest.approx(1.3) or lr_factor(t, tcfg) == 0


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_new_entries_follow_the_schedule_horizon_not_the_step_count(schedule):
    """A resumed run that adds steps keeps its lr horizon in schedule_steps: the new entries must end
    where the baseline ends (its horizon), not at the new step count."""
    tcfg = TrainConfig(steps=1500, schedule_steps=1000, warmup_steps=30, schedule=schedule, min_lr_ratio=0.01)
    fn = make_rewarmup({"step": 500, "rewarmup": {"rho": 1.3, "tau": 50}})
    assert fn(999, 1.0, None, tcfg) == pytest.approx(lr_factor(999, tcfg)) == pytest.approx(0.01)
    ref = TrainConfig(steps=1000, warmup_steps=30, schedule=schedule, min_lr_ratio=0.01)
    for t in (520, 600, 800, 950):
        assert fn(t, 1.0, None, tcfg) == pytest.approx(paper_new_lr(t, 500, 1.3, 50, ref, lr_factor(500, ref)))


@pytest.mark.parametrize("schedule", ["cosine", "wsd", "linear_warmdown"])
def test_new_entries_stay_on_the_floor_past_the_horizon(schedule):
    """A run resumed with more steps than its schedule: the baseline stays at its final lr, and so do the
    new entries (eq. 28 ends at eta_min on T_last; nothing rises or falls after it)."""
    tcfg = TrainConfig(steps=100, warmup_steps=5, schedule=schedule, min_lr_ratio=0.05, decay_fraction=0.2)
    fn = make_rewarmup({"step": 40, "rewarmup": {"rho": 1.3, "tau": 10}})
    for t in (99, 100, 130, 199, 250):
        assert fn(t, 1.0, None, tcfg) == pytest.approx(0.05, rel=1e-12), f"step {t}"


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_new_entries_reach_the_floor_on_the_last_step_of_a_tight_horizon(schedule):
    """The re-warmup ends one step before T_last (a one-step decay window) and the baseline's decay
    fraction rounds to a single step: the new entries are still at eta_min exactly on T_last, from
    rho*eta_e one step earlier."""
    tcfg = TrainConfig(steps=20, warmup_steps=0, schedule=schedule, min_lr_ratio=0.1, decay_fraction=0.04)
    t_e, tau, rho = 10, 8, 1.3  # warmup ends at 18 = T_last - 1
    fn = make_rewarmup({"step": t_e, "rewarmup": {"rho": rho, "tau": tau}})
    eta_e = lr_factor(t_e, tcfg)
    assert fn(18, 1.0, None, tcfg) == pytest.approx(rho * eta_e, rel=1e-12)
    assert fn(19, 1.0, None, tcfg) == pytest.approx(0.1, rel=1e-12)
    assert lr_factor(19, tcfg) == pytest.approx(0.1, rel=1e-12)  # the same end as the old entries


def test_wsd_one_step_decay_window_is_the_baselines():
    """decay_fraction rounding to one step: the baseline is flat through T_last - 1 and at eta_min on
    T_last; new entries whose re-warmup ended long before follow the same window."""
    tcfg = TrainConfig(steps=50, warmup_steps=0, schedule="wsd", min_lr_ratio=0.0, decay_fraction=0.01)
    fn = make_rewarmup({"step": 10, "rewarmup": {"rho": 1.5, "tau": 5}})
    assert [lr_factor(t, tcfg) for t in (48, 49)] == [1.0, 0.0]
    assert fn(48, 1.0, None, tcfg) == pytest.approx(1.5) and fn(49, 1.0, None, tcfg) == pytest.approx(0.0, abs=1e-15)


def test_before_the_growth_step_the_factor_is_the_baseline_schedule():
    """rewarmup_factor for t < t_e is the baseline cosine-with-warmup written from its definition."""
    from nexus.growth.rewarmup import rewarmup_factor

    tcfg = TrainConfig(steps=100, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    for t in (0, 4, 9, 10, 37, 59):
        want = (t + 1) / 10 if t < 10 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (t - 10) / 89))
        assert rewarmup_factor(t, 60, 1.3, 20, tcfg) == pytest.approx(want, rel=1e-12), t


@pytest.mark.parametrize("rw", [None, {"rho": 1.3}, {"tau": 250}, [1.3, 250]])
def test_a_record_without_rho_and_tau_is_refused(rw):
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match="rewarmup"):
        make_rewarmup({"step": 10, "rewarmup": rw})


def test_a_record_without_its_growth_step_is_refused():
    """The re-warmup restarts at the growth step t_e: a record that lost it cannot be placed (it used to
    default to step 0, re-warming from the start of training)."""
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match="step"):
        make_rewarmup({"rewarmup": {"rho": 1.3, "tau": 250}})


def _cosine(t, tcfg):
    """The baseline's factor from its definition: linear warmup to 1, then cosine to min_lr_ratio on T_last."""
    w, floor, last = tcfg.warmup_steps, tcfg.min_lr_ratio, (tcfg.schedule_steps or tcfg.steps) - 1
    if t < w:
        return (t + 1) / w
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min((t - w) / (last - w), 1.0)))


def test_lr_plan_names_the_steps_that_matter_with_their_lrs():
    """The plan printed before training: first step, growth step (old and new), peak of each, last step,
    every value from the schedule's and eq. 28's definitions."""
    from nexus.growth.rewarmup import lr_plan

    tcfg = TrainConfig(steps=100, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1, lr=2e-3)
    rec = {"step": 40, "rewarmup": {"rho": 1.3, "tau": 20}}
    old = lambda t: 2e-3 * _cosine(t, tcfg)  # noqa: E731
    new = lambda t: 2e-3 * paper_new_lr(t, 40, 1.3, 20, tcfg, _cosine(40, tcfg))  # noqa: E731
    line, at_floor = lr_plan(tcfg, 0, rec)
    assert (
        line
        == (
            f"lr plan: first step 0: {old(0):.3g} | growth step 40: old entries {old(40):.3g}, new "
            f"{new(40):.3g} | peak {old(9):.3g} at step 9 (new entries {new(60):.3g} at step 60) | "
            f"last step 99: {old(99):.3g} (new entries {new(99):.3g})"
        )
        and not at_floor
    )
    resumed, _ = lr_plan(tcfg, 50, rec)  # a grown run resumed after its growth step
    assert resumed.startswith(
        f"lr plan: first step 50: {old(50):.3g} (new entries {new(50):.3g}) | peak "
        f"{old(50):.3g} at step 50 (new entries {new(60):.3g} at step 60) | last step 99"
    )
    plain, _ = lr_plan(tcfg, 0)
    assert plain == f"lr plan: first step 0: {old(0):.3g} | peak {old(9):.3g} at step 9 | last step 99: {old(99):.3g}"


def test_lr_plan_flags_a_run_that_would_train_at_the_floor():
    from nexus.growth.rewarmup import lr_plan

    past = TrainConfig(steps=160, schedule_steps=100, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_plan(past, 120)[1] is True  # resumed past its schedule's horizon: every step at the floor
    assert lr_plan(past, 90)[1] is False  # still decaying at the first step
    assert lr_plan(TrainConfig(steps=100, schedule_steps=50, schedule="constant"), 60)[1] is False
    assert lr_plan(TrainConfig(steps=100, schedule_steps=50, schedule="cosine"), 99)[1] is False  # one step


def _plan_refs(tcfg, t_e=None, rho=None, tau=None):
    """The old entries' lr (the baseline's definition) and the new entries' (eq. 27-28), as functions."""
    old = lambda t: tcfg.lr * _cosine(t, tcfg)  # noqa: E731
    if rho is None:
        return old, old  # no re-warmup: the new entries follow the baseline
    return (
        old,
        lambda t: (
            tcfg.lr * (paper_new_lr(t, t_e, rho, tau, tcfg, _cosine(t_e, tcfg)) if t >= t_e else _cosine(t, tcfg))
        ),
    )


PLAN_TCFG = TrainConfig(steps=100, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1, lr=2e-3)


@pytest.mark.parametrize("rec", [{"step": 40}, {"step": 40, "rewarmup": None}], ids=["no-key", "none"])
def test_lr_plan_of_a_growth_without_a_rewarmup_shows_its_step_with_one_lr(rec):
    """A growth recorded without a re-warmup (width growth stores None; other families no key): the
    growth step is shown, its new entries on the baseline, and no separate new-entry lr anywhere else."""
    from nexus.growth.rewarmup import lr_plan

    old, _ = _plan_refs(PLAN_TCFG)
    line, _ = lr_plan(PLAN_TCFG, 0, rec)
    assert line == (
        f"lr plan: first step 0: {old(0):.3g} | growth step 40: old entries {old(40):.3g}, new "
        f"{old(40):.3g} | peak {old(9):.3g} at step 9 | last step 99: {old(99):.3g}"
    )


def test_lr_plan_edges_of_the_growth_step():
    """A run resumed exactly on its growth step (the growth step, not the first step, names the new
    entries' lr), a growth on the last step, and a growth planned after the last step (lr_plan on its
    own: nothing to show for it, the new entries still on the baseline there)."""
    from nexus.growth.rewarmup import lr_plan

    rw = {"rho": 1.3, "tau": 20}
    old, new = _plan_refs(PLAN_TCFG, 40, 1.3, 20)
    line, _ = lr_plan(PLAN_TCFG, 40, {"step": 40, "rewarmup": rw})
    assert line == (
        f"lr plan: first step 40: {old(40):.3g} | growth step 40: old entries {old(40):.3g}, new "
        f"{new(40):.3g} | peak {old(40):.3g} at step 40 (new entries {new(60):.3g} at step 60) | "
        f"last step 99: {old(99):.3g} (new entries {new(99):.3g})"
    )
    old, new = _plan_refs(PLAN_TCFG, 99, 1.3, 20)
    line, _ = lr_plan(PLAN_TCFG, 0, {"step": 99, "rewarmup": rw})
    assert line == (
        f"lr plan: first step 0: {old(0):.3g} | growth step 99: old entries {old(99):.3g}, new "
        f"{new(99):.3g} | peak {old(9):.3g} at step 9 (new entries {new(99):.3g} at step 99) | "
        f"last step 99: {old(99):.3g} (new entries {new(99):.3g})"
    )
    line, _ = lr_plan(PLAN_TCFG, 0, {"step": 150, "rewarmup": rw})
    assert line == (
        f"lr plan: first step 0: {old(0):.3g} | peak {old(9):.3g} at step 9 | "
        f"last step 99: {old(99):.3g} (new entries {old(99):.3g})"
    )


def test_lr_plan_new_entry_peak_of_a_rewarmup_below_one_is_the_growth_step():
    """rho < 1 (valid: rho > 0) ramps the new entries *down* from eta(t_e): their peak over the run is at
    the growth step itself, which the scan must include."""
    from nexus.growth.rewarmup import lr_plan

    old, new = _plan_refs(PLAN_TCFG, 40, 0.5, 20)
    assert new(40) > new(59) > new(60)  # the reference: highest at t_e
    line, _ = lr_plan(PLAN_TCFG, 0, {"step": 40, "rewarmup": {"rho": 0.5, "tau": 20}})
    assert f"peak {old(9):.3g} at step 9 (new entries {new(40):.3g} at step 40) |" in line


def test_lr_plan_floor_flag_edges():
    """The floor note is for a schedule whose horizon ended. A constant schedule has none, even with
    min_lr_ratio = 1 (its lr equals lr x min_lr_ratio on every step); one step before the end of a long
    cosine the lr is still above the floor, by about 6e-10 here (1e-12 x lr is the only slack)."""
    from nexus.growth.rewarmup import lr_plan

    assert lr_plan(TrainConfig(steps=100, warmup_steps=0, schedule="constant", min_lr_ratio=1.0), 10)[1] is False
    long = TrainConfig(steps=2000, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1, lr=1e-3)
    above = long.lr * _cosine(1998, long) - long.lr * long.min_lr_ratio
    assert 1e-12 * long.lr < above < 1e-9  # the reference: step 1998 is just above the floor
    assert lr_plan(long, 1998)[1] is False


def test_lr_plan_floor_flag_counts_an_lr_on_its_tolerance_bound_as_the_floor():
    """The floor flag's slack is 1e-12 x lr, the bound included. Built on the boundary: a wsd schedule with a
    one-step decay and min_lr_ratio 1 - 1e-12 is flat (factor 1) on step 8 and lr x min_lr_ratio on step 9, and
    this lr makes lr - lr x (1 - 1e-12) round to exactly 1e-12 x lr. Twice that gap is above the floor."""
    from nexus.growth.rewarmup import lr_plan

    lr, ratio = 0.0009766493169749424, 0.999999999999
    tcfg = TrainConfig(steps=10, warmup_steps=0, schedule="wsd", min_lr_ratio=ratio, decay_fraction=0.01, lr=lr)
    assert lr * 1.0 - lr * ratio == 1e-12 * lr  # the premise: step 8's planned lr sits on the bound exactly
    assert lr_plan(tcfg, 8)[1] is True
    wider = TrainConfig(
        steps=10, warmup_steps=0, schedule="wsd", min_lr_ratio=0.999999999998, decay_fraction=0.01, lr=lr
    )
    assert lr - lr * wider.min_lr_ratio > 1e-12 * lr and lr_plan(wider, 8)[1] is False
