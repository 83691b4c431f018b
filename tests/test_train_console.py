"""Issue 24 items 6 and 7: what `nexus train` tells a user while it runs (piped progress with elapsed time,
ETA and which tokens its throughput counts; a readable growth summary; the lr plan; the compile wait)
and the curve it draws at the end."""

import csv
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from nexus.cli import main

SMALL = [
    "--preset",
    "baseline-micro",
    "--train.eval_every",
    "0",
    "--train.sample_every",
    "0",
    "--train.batch_size",
    "2",
    "--data.seq_len",
    "32",
    "--train.log_every",
    "2",
]


def _printed(capsys) -> str:
    """Everything the run said (progress goes through tqdm.write, to stdout; data lines to stderr)."""
    got = capsys.readouterr()
    return got.out + got.err


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_piped_progress_carries_elapsed_eta_and_which_tokens(tmp_path, capsys):
    """stderr is not a terminal under pytest: the plain progress lines stand in for the bar."""
    run = tmp_path / "run"
    assert main(["train", *SMALL, "--train.steps", "10", "--out", str(run)]) == 0
    err = _printed(capsys)
    lines = [line for line in err.splitlines() if line.startswith("step ") and "/10 |" in line]
    assert lines
    for line in lines:
        assert re.search(r"\| \d+s elapsed(, ETA \d+s)?$", line), line
        assert "tok/s (processed; all bear loss)" in line  # byte LM data: every position is scored
    assert re.search(r"\| \d+s elapsed, ETA \d+s$", lines[0])
    recs = [r for r in _records(run) if "loss" in r]
    for r in recs:
        # every input position is processed; on LM data each is loss-bearing too
        assert r["processed_tokens_per_s"] == pytest.approx(r["tokens_per_s"], rel=1e-9)
    elapsed = [r["elapsed_s"] for r in recs]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    # a resumed run keeps counting wall time from where the checkpoint left it
    assert main(["train", "--resume", str(run / "checkpoint"), "--train.steps", "14", "--quiet"]) == 0
    later = [r["elapsed_s"] for r in _records(run) if "loss" in r and r["step"] > 10]
    assert later and min(later) >= elapsed[-1]


def test_throughput_on_partly_scored_data_names_both_counts(tmp_path, capsys):
    """On a synthetic task only the answer positions bear loss: the line shows both counts, which differ."""
    run = tmp_path / "mqar"
    assert (
        main(
            [
                "train",
                "--preset",
                "mqar-baseline",
                "--train.steps",
                "4",
                "--train.log_every",
                "2",
                "--train.eval_every",
                "0",
                "--train.sample_every",
                "0",
                "--train.batch_size",
                "2",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    err = _printed(capsys)
    line = next(line for line in err.splitlines() if line.startswith("step 4/4"))
    m = re.search(r"([\d,]+) tok/s processed, ([\d,]+) loss-bearing", line)
    assert m, line
    proc, scored = (int(g.replace(",", "")) for g in m.groups())
    assert scored < proc
    r = next(r for r in _records(run) if r.get("step") == 4 and "loss" in r)
    assert r["tokens_per_s"] < r["processed_tokens_per_s"]


def test_growth_in_training_prints_a_readable_summary_and_the_lr_plan(tmp_path, capsys):
    run = tmp_path / "grown"
    assert (
        main(
            [
                "train",
                *SMALL,
                "--train.steps",
                "8",
                "--grow-at",
                "4",
                "--width.hidden",
                "96",
                "--rewarmup",
                "1.3,2",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    err = _printed(capsys)
    plan = next(line for line in err.splitlines() if line.startswith("lr plan:"))
    assert "growth step 4: old entries" in plan and "last step 7" in plan
    grew = next(line for line in err.splitlines() if line.startswith("grew at step 4"))
    assert "{" not in grew and "'" not in grew  # not a dict's repr
    assert "(width)" in grew and "hidden 64->96" in grew and "params 0.123M -> " in grew
    assert "re-warmup of the new entries rho 1.3 over 2 steps" in grew


def test_train_writes_its_own_curve_at_the_end(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *SMALL, "--train.steps", "6", "--train.eval_every", "3", "--out", str(run), "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["curve"] == str(run / "loss_curve.png")
    with Image.open(run / "loss_curve.png") as im:
        assert im.format == "PNG" and im.size == (2700, 825)  # 18 x 5.5 inches at 150 dpi
    rows = list(csv.DictReader(open(run / "loss_curve.csv")))
    val = {int(r["step"]): float(r["loss"]) for r in rows if r["series"] == "val"}
    logged = {r["step"]: r["val_loss"] for r in _records(run) if "val_loss" in r}
    assert set(val) == set(logged) == {3, 6}
    assert all(val[s] == pytest.approx(logged[s], abs=1e-6) for s in val)
    assert all(r["wall_s"] != "" for r in rows if r["series"] != "growth")  # new runs record their wall time
    # the curve is the run's own file: --overwrite of the run removes it with the rest
    assert main(["train", *SMALL, "--train.steps", "2", "--out", str(run), "--overwrite", "--quiet"]) == 0
    assert {int(r["step"]) for r in csv.DictReader(open(run / "loss_curve.csv")) if r["series"] == "val"} == {2}


def test_compile_warmup_is_announced(tmp_path, capsys, monkeypatch):
    import torch

    # the line is what is tested, not the compiler: identity keeps the test to seconds on a CPU
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    assert main(["train", *SMALL, "--train.steps", "2", "--train.compile", "true", "--out", str(tmp_path / "c")]) == 0
    assert "torch.compile: the first step compiles the model" in _printed(capsys)
