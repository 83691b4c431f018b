"""`nexus experiment --config FILE` merges the file as a mapping (issue 37 leftover 3), not as dotted override
strings read back from YAML: the plan it makes is the plan the same fields given as command-line overrides
make (so a plan.json an earlier version wrote, through override strings, still names the same experiment on
resume), the command line wins over the file, and a file that sets train.lr counts as the user's lr."""

from __future__ import annotations

import json

import pytest

from nexus.cli import main
from nexus.config import ConfigError
from nexus.experiments import compare as C
from nexus.experiments import progressive as P

FILE = (
    "model:\n  n_layers: 1\n  qk_norm: true\n"
    "train:\n  lr: 0.002\n  batch_size: 2\n  eval_batches: 1\n"
    "data:\n  seq_len: 48\n"
)
# the same fields as the dotted overrides the file amounts to, written by hand
AS_OVERRIDES = [
    "--model.n_layers",
    "1",
    "--model.qk_norm",
    "true",
    "--train.lr",
    "0.002",
    "--train.batch_size",
    "2",
    "--train.eval_batches",
    "1",
    "--data.seq_len",
    "48",
]


def _planned_by_cli(monkeypatch, module, name: str, argv: list[str], calls: list | None = None) -> dict:
    """The plan `nexus experiment ...` makes, stopped before anything trains (exit 2 from a ConfigError);
    `calls` receives the planner's arguments."""
    real, seen = getattr(module, name), []

    def record(*a, **kw):
        if calls is not None:
            calls.append((a, kw))
        seen.append(real(*a, **kw))
        raise ConfigError("stop after planning")

    monkeypatch.setattr(module, name, record)
    assert main(["experiment", *argv]) == 2
    return seen[0]


def _jsonable(plan: dict) -> dict:
    return json.loads(json.dumps(plan))


def test_compare_config_file_is_the_same_plan_as_its_fields_as_overrides_with_the_command_line_on_top(
    tmp_path, monkeypatch
):
    path = tmp_path / "mine.yaml"
    path.write_text(FILE)
    args = [
        "--presets",
        "baseline-micro,base-transformer-tiny",
        "--seeds",
        "0",
        "--tokens",
        "96",
        "--out",
        str(tmp_path / "cmp"),
    ]
    calls = []
    by_file = _planned_by_cli(
        monkeypatch, C, "plan_compare", ["compare", *args, "--config", str(path), "--train.lr", "0.003"], calls
    )
    ((a, kw),) = calls  # the file reaches the planner as its mapping; the overrides are the command line's alone
    assert a[4] == ["--train.lr", "0.003"] and kw["config_mapping"]["train"] == {
        "lr": 0.002,
        "batch_size": 2,
        "eval_batches": 1,
    }
    monkeypatch.undo()
    by_flags = _planned_by_cli(monkeypatch, C, "plan_compare", ["compare", *args, *AS_OVERRIDES, "--train.lr", "0.003"])
    assert _jsonable(by_file) == _jsonable(by_flags)
    cfgs = [r["config"] for r in by_file["runs"]]
    assert all(
        c["model"]["n_layers"] == 1 and c["model"]["qk_norm"] is True and c["train"]["lr"] == 0.003 for c in cfgs
    )


def test_progressive_config_file_plan_resumes_a_folder_planned_with_override_strings(tmp_path, monkeypatch):
    path = tmp_path / "mine.yaml"
    path.write_text(FILE)
    out = tmp_path / "exp"
    args = ["progressive", "--method", "sparkling", "--tokens", str(2 * 48 * 16), "--seeds", "0", "--out", str(out)]
    by_file = _planned_by_cli(monkeypatch, P, "plan_progressive", [*args, "--config", str(path)])
    monkeypatch.undo()
    # what an earlier version planned: the file turned into override strings before the command line's
    old = P.plan_progressive("sparkling", None, list(AS_OVERRIDES), 2 * 48 * 16, 0.5, None, str(out), seeds=[0])
    assert _jsonable(by_file) == _jsonable(old)
    assert by_file["scratch_lr_rule"] == "the small model's lr (untuned)"  # the file's train.lr is the user's
    assert by_file["configs"]["0"]["small"]["train"]["lr"] == 0.002
    out.mkdir()
    (out / P.PLAN_FILE).write_text(json.dumps(old))
    P._check_same_plan(out, by_file)  # the older folder is the same experiment: it resumes
    changed = _jsonable(old)
    changed["configs"]["0"]["grown"]["train"]["lr"] = 0.5
    (out / P.PLAN_FILE).write_text(json.dumps(changed))
    with pytest.raises(ConfigError, match="different experiment"):
        P._check_same_plan(out, by_file)
