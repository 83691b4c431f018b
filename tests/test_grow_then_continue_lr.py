"""Issue 40 item 9: grow a finished run's checkpoint, then continue it. The small run's cosine ended at its
floor; re-planned over the longer run, the old weights jumped at once to the middle of the new cosine
(3.0e-4 -> 1.72e-3, no warmup). Now every entry moves from its old-plan lr to the new plan over
train.warmup_steps steps (growth/rewarmup.py), every parameter group's lr is in metrics.jsonl, and a grown
checkpoint with nothing left to train is refused instead of training 0 steps with exit 0."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from nexus.cli import main
from nexus.config import TrainConfig

FLOOR, LR, WARM = 0.1, 3e-3, 5


def cosine(t: int, horizon: int) -> float:
    """The baseline schedule as documented (docs/sparkling.md, optim/schedule.py's docstring): linear
    warmup over WARM steps, then a cosine from 1 to FLOOR reached on step horizon - 1, flat after."""
    if t < WARM:
        return (t + 1) / WARM
    x = min((t - WARM) / (horizon - WARM - 1), 1.0)
    return FLOOR + (1 - FLOOR) * 0.5 * (1 + math.cos(math.pi * x))


def eq28(t: int, t_e: int, rho: float, tau: int, horizon: int) -> float:
    """SPARKLING eq. 28 for the new entries: eta_e -> rho*eta_e over tau steps, then a cosine to the floor
    on the baseline's last step."""
    eta_e = cosine(t_e, horizon)
    if t < t_e + tau:
        return eta_e + (rho * eta_e - eta_e) * (t - t_e) / tau
    x = min((t - t_e - tau) / (horizon - 1 - t_e - tau), 1.0)
    return FLOOR + (rho * eta_e - FLOOR) * 0.5 * (1 + math.cos(math.pi * x))


def bridged(plan_before, plan_after, s: int):
    """A linear move over WARM steps from the old plan's value at s to the new plan's at s + WARM."""

    def f(t: int) -> float:
        if s <= t < s + WARM:
            return plan_before(s) + (plan_after(s + WARM) - plan_before(s)) * (t - s) / WARM
        return plan_after(t)

    return f


def test_the_bridge_after_a_replanned_horizon_matches_its_reference():
    from nexus.growth.rewarmup import planned_factors

    t_e, rho, tau, before, after = 60, 1.3, 20, 60, 120
    record = {"step": t_e, "rewarmup": {"rho": rho, "tau": tau}, "lr_replan": {"step": t_e, "horizon_before": before}}
    tcfg = TrainConfig(steps=after, warmup_steps=WARM, schedule="cosine", min_lr_ratio=FLOOR, lr=LR)
    old, new = planned_factors(record)
    old_ref = bridged(lambda t: cosine(t, before), lambda t: cosine(t, after), t_e)
    new_ref = bridged(lambda t: eq28(t, t_e, rho, tau, before), lambda t: eq28(t, t_e, rho, tau, after), t_e)
    for t in range(t_e, after):
        assert old(t, tcfg) == pytest.approx(old_ref(t), abs=1e-12), t
        assert new(t, tcfg) == pytest.approx(new_ref(t), abs=1e-12), t
    # no jump: the first step after the growth trains at the lr the small run ended with
    assert old(t_e, tcfg) == pytest.approx(cosine(t_e - 1, before)) == pytest.approx(FLOOR)
    assert (
        max(abs(old(t + 1, tcfg) - old(t, tcfg)) for t in range(t_e, after - 1)) < cosine(t_e, after) - FLOOR
    )  # every step's change is below the jump the re-plan alone would make


MICRO = [
    "--preset",
    "baseline-micro",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "2",
    "--train.eval_every",
    "0",
    "--train.eval_batches",
    "1",
    "--train.sample_tokens",
    "2",
    "--train.log_every",
    "1",
]
SPEC = ["--width.hidden", "48", "--rewarmup", "1.3,3"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("small") / "run"
    assert main(["train", *MICRO, "--train.steps", "8", "--out", str(out), "--quiet"]) == 0
    return out / "checkpoint"


def test_grown_then_continued_starts_at_the_lr_it_ended_with_and_logs_every_group(small, tmp_path, capsys):
    grown = tmp_path / "grown"
    assert (
        main(["grow", "--checkpoint", str(small), "--out", str(grown), *SPEC, "--no-verify", "--train.steps", "20"])
        == 0
    )
    assert main(["train", "--resume", str(grown), "--quiet"]) == 0
    capsys.readouterr()
    rows = {r["step"]: r for r in map(json.loads, (grown / "metrics.jsonl").read_text().splitlines()) if "loss" in r}
    first = rows[9]  # optimizer step 8, the first after the growth
    # every group's lr, and the new entries' own: the old ones at the small run's floor, not cosine(8; 20)
    assert {"lr/decay", "lr/no_decay", "lr/decay_new", "lr/no_decay_new"} <= set(first)
    assert first["lr/decay"] == pytest.approx(LR * FLOOR) and first["lr/no_decay"] == pytest.approx(LR * FLOOR)
    for step, r in rows.items():  # the logged lrs are the bridge's, step by step
        t = step - 1
        want = bridged(lambda u: cosine(u, 8), lambda u: cosine(u, 20), 8)(t)
        assert r["lr/decay"] == pytest.approx(LR * want), step
        assert r["lr"] == r["lr/decay"]


def _digest(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


def test_resuming_a_grown_checkpoint_with_nothing_left_to_train_is_refused(small, tmp_path, capsys):
    grown = tmp_path / "grown"
    assert main(["grow", "--checkpoint", str(small), "--out", str(grown), *SPEC, "--no-verify"]) == 0
    capsys.readouterr()
    before = _digest(grown)
    assert main(["train", "--resume", str(grown), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing left to train" in err[0] and "--train.steps N with N > 8" in err[0], err
    assert _digest(grown) == before
