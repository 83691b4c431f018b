"""Issue 24 item 3: a grown checkpoint trained further follows the schedule its growth recorded, and logs
the post-growth diagnostics as a run grown in training does."""

import json
import math
from pathlib import Path

import pytest

from nexus.cli import main

BASE = [
    "--preset",
    "baseline-micro",
    "--quiet",
    "--train.log_every",
    "1",
    "--train.eval_every",
    "0",
    "--train.sample_every",
    "0",
    "--train.batch_size",
    "2",
    "--data.seq_len",
    "32",
    "--train.warmup_steps",
    "2",
    "--train.schedule",
    "cosine",
    "--train.lr",
    "0.003",
    "--train.min_lr_ratio",
    "0.1",
]
GROW = ["--width.hidden", "96", "--rewarmup", "1.3,3"]


def _steps(run: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("event") is None and "step" in r:
            out.setdefault(int(r["step"]), {}).update(r)
    return out


def _cosine(t: int, horizon: int, lr=0.003, warm=2, floor=0.1) -> float:
    """The baseline schedule written from its definition: linear warmup, then cosine to floor x lr at step horizon-1."""
    if t < warm:
        return lr * (t + 1) / warm
    x = min((t - warm) / (horizon - warm - 1), 1.0)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * x)))


def test_continued_grown_checkpoint_equals_growth_in_training(tmp_path):
    """Same recipe (a 12-step run grown at step 6): growing in training, and `nexus grow` on the run's step-6
    checkpoint then `nexus train --resume`, give the same losses and the same post-growth diagnostics."""
    a, b, w = tmp_path / "in_run", tmp_path / "base", tmp_path / "grown"
    assert main(["train", *BASE, "--train.steps", "12", "--out", str(a), "--grow-at", "6", *GROW]) == 0
    assert main(["train", *BASE, "--train.steps", "12", "--train.save_every", "6", "--out", str(b)]) == 0
    assert main(["grow", "--checkpoint", str(b / "step_0000006"), "--out", str(w), *GROW]) == 0
    assert main(["train", "--resume", str(w), "--quiet"]) == 0
    ra, rw = _steps(a), _steps(w)
    assert sorted(rw) == list(range(7, 13))
    for s in range(7, 13):
        assert rw[s]["loss"] == pytest.approx(ra[s]["loss"], abs=1e-6)
        assert rw[s]["lr"] == pytest.approx(ra[s]["lr"], rel=1e-12)
        for k in ("symmetry_lock_mean", "rms_ratio_max_dev"):  # diagnostics continue after `nexus grow`
            assert k in rw[s] and rw[s][k] == pytest.approx(ra[s][k], abs=1e-6)


@pytest.mark.parametrize("where", ["resume", "grow"])
def test_a_finished_run_grown_and_trained_further_is_not_at_the_lr_floor(tmp_path, capsys, where):
    """The base run ends at its floor (step 7 of 8). Grown and trained to 16 steps (--train.steps on resume, or
    on nexus grow), the old entries follow the cosine over the new 16-step horizon, not the floor, reached from
    the floor over train.warmup_steps (2) steps: no jump from the floor to the new cosine (issue 40 item 9)."""
    base, grown = tmp_path / "base", tmp_path / "grown"
    assert main(["train", *BASE, "--train.steps", "8", "--out", str(base)]) == 0
    more = ["--train.steps", "16"]
    assert (
        main(
            [
                "grow",
                "--checkpoint",
                str(base / "checkpoint"),
                "--out",
                str(grown),
                *GROW,
                *(more if where == "grow" else []),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    if where == "grow":  # the plan is shown before any training: the growth step's lr is the new horizon's
        assert f"growth step 8: old entries {0.003 * 0.1:.3g}" in printed
    else:
        assert "--train.steps N" in printed  # the run had ended: says how to continue it
    assert main(["train", "--resume", str(grown), "--quiet", *(more if where == "resume" else [])]) == 0
    rows = _steps(grown)
    floor = 0.003 * 0.1
    assert sorted(rows) == list(range(9, 17))
    bridge = {8: floor, 9: floor + (_cosine(10, 16) - floor) / 2}  # linear from the floor at 8 to the new plan at 10
    for s, r in rows.items():  # record s holds the lr of optimizer step s - 1
        assert r["lr"] == pytest.approx(bridge.get(s - 1, _cosine(s - 1, 16)), rel=1e-9)
    assert all(r["lr"] > 1.5 * floor for s, r in rows.items() if 10 <= s < 15)  # after the bridge's first step


def test_grow_takes_only_train_overrides(tmp_path, capsys):
    base = tmp_path / "base"
    assert main(["train", *BASE, "--train.steps", "2", "--out", str(base)]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "grow",
                "--checkpoint",
                str(base / "checkpoint"),
                "--out",
                str(tmp_path / "g"),
                *GROW,
                "--model.n_layers",
                "4",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--model.n_layers" in err and "--train." in err
    assert not (tmp_path / "g").exists()
