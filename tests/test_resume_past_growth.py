"""Issue 46 item 2: a resumed run whose --grow-at lies before its checkpoint's step would never grow; it is refused in
one line before anything is written (at the checkpoint's own step it grows at the resumed run's first step)."""

from __future__ import annotations

import json

import pytest

from nexus.cli import main


def _snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def step4_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "baseline-micro", "--out", "run", "--train.steps", "4", "--quiet"]) == 0
    return tmp_path / "run"


def test_grow_at_before_the_resumed_step_is_refused_in_one_line_with_nothing_written(step4_run, capsys):
    before = _snapshot(step4_run)
    capsys.readouterr()
    rc = main(
        [
            "train",
            "--resume",
            str(step4_run / "checkpoint"),
            "--train.steps",
            "8",
            "--grow-at",
            "3",
            "--width.hidden",
            "96",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "growth at step 3" in err[0] and "resumes at step 4" in err[0] and "4 <= N < train.steps (8)" in err[0]
    assert _snapshot(step4_run) == before


def test_grow_at_the_resumed_step_grows_at_the_first_step(step4_run):
    assert (
        main(
            [
                "train",
                "--resume",
                str(step4_run / "checkpoint"),
                "--train.steps",
                "6",
                "--grow-at",
                "4",
                "--width.hidden",
                "96",
                "--quiet",
            ]
        )
        == 0
    )
    cfg = json.loads((step4_run / "checkpoint" / "config.json").read_text())
    assert cfg["model"]["d_model"] == 96 and [g["step"] for g in cfg["growth_history"]] == [4]
