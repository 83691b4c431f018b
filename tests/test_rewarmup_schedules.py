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
