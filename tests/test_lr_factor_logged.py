"""Issue 49 item 4: metrics.jsonl's `lr_factor` is the factor the lr was set to, also during the re-plan bridge
after a grown checkpoint's horizon is re-planned (it once logged the schedule's factor, 0.775, while 3e-4 was
applied): every logged step's first-group lr equals lr_factor x its base lr."""

from __future__ import annotations

import json

import pytest

from nexus.cli import main

TINY = [
    "--preset",
    "baseline-micro",
    "--train.log_every",
    "1",
    "--train.eval_every",
    "0",
    "--train.warmup_steps",
    "2",
    "--train.sample_tokens",
    "4",
    "--quiet",
]


def _rows(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "lr_factor" in r]


def test_the_logged_lr_factor_is_the_applied_one_through_a_replan_bridge(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, "--train.steps", "8", "--out", "base"]) == 0
    assert (
        main(
            ["grow", "--checkpoint", "base/checkpoint", "--out", "wide", "--width.hidden", "96", "--train.steps", "16"]
        )
        == 0
    )
    assert main(["train", "--resume", "wide", "--quiet"]) == 0
    base_lr = 3e-3  # baseline-micro's train.lr, the first parameter group's base lr
    rows = _rows(tmp_path / "base") + _rows(tmp_path / "wide")
    assert [r["step"] for r in rows] == list(range(1, 17))
    for r in rows:
        assert r["lr"] == pytest.approx(r["lr_factor"] * base_lr, rel=1e-12), r
    # the bridge: right after the resume the factor is neither the old plan's floor nor the new plan's value
    from nexus.config_migration import saved_run_config
    from nexus.optim.schedule import lr_factor

    cfg = saved_run_config(json.loads((tmp_path / "wide" / "checkpoint" / "config.json").read_text()))
    assert cfg.train.lr == base_lr
    plain = [lr_factor(r["step"] - 1, cfg.train) for r in rows[8:]]
    assert any(abs(p - r["lr_factor"]) > 1e-6 for p, r in zip(plain, rows[8:])), "no bridge step in the resumed run"
