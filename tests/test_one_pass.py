"""One pass per run (issue 37 item 5): `nexus train` merges and validates a run's config once, validates
its growth spec once and checks it against the model once, builds its configured hooks once, reads
(and upgrades) a checkpoint's config once on resume, and `--resume auto` merges the base config once.
Each count is taken by wrapping the real function, over a real run."""

from __future__ import annotations

from collections import Counter

import pytest
from test_front_door import MICRO  # the same micro run

import nexus.checkpoint as CK
import nexus.cli.train as T
import nexus.config_migration as M
import nexus.train.hooks as H
from nexus.cli import main
from nexus.config import RunConfig
from nexus.growth.width import WidthSpec


@pytest.fixture
def counts(monkeypatch):
    seen = Counter()

    def count(owner, name, key):
        real = getattr(owner, name)

        def wrapper(*a, **k):
            seen[key or name] += 1
            return real(*a, **k)

        monkeypatch.setattr(owner, name, wrapper)

    validate = RunConfig.validate

    def counting_validate(self):
        seen[f"validate d_model={self.model.d_model}"] += 1
        return validate(self)

    monkeypatch.setattr(RunConfig, "validate", counting_validate)
    for name in ("validate", "applies_to"):
        real = getattr(WidthSpec, name)
        monkeypatch.setattr(
            WidthSpec,
            name,
            (
                # B023 below is a false positive: `real` and `name` there are this lambda's own parameters, bound
                # per iteration by the call
                lambda real, name: (
                    lambda self, *a: (
                        seen.__setitem__(f"spec {name}", seen[f"spec {name}"] + 1)  # noqa: B023
                        or real(self, *a)  # noqa: B023
                    )
                )
            )(real, name),
        )
    parse = H.parse_hook_options

    def counting_parse(kind, entry, cfg, where):
        seen[f"hook {entry['kind']} built"] += 1
        return parse(kind, entry, cfg, where)

    monkeypatch.setattr(H, "parse_hook_options", counting_parse)
    count(CK, "read_config", "checkpoint config read")
    count(M, "upgrade", "config upgraded")
    count(T, "base_config", "base config merged")
    return seen


def test_a_growing_run_does_each_thing_once(tmp_path, counts):
    assert (
        main(
            [
                "train",
                *MICRO,
                "--train.steps",
                "3",
                "--out",
                str(tmp_path / "run"),
                "--grow-at",
                "1",
                "--growth",
                "{family: width, hidden: 48}",
            ]
        )
        == 0
    )
    assert counts["validate d_model=32"] == 1  # the run's config; growth validates the grown one (d_model 48)
    assert counts["validate d_model=48"] == 1
    assert counts["spec validate"] == 1 and counts["spec applies_to"] == 1
    assert counts["hook growth built"] == 1 and counts["hook loss_curve built"] == 1
    assert counts["base config merged"] == 1
    assert counts["checkpoint config read"] == 0  # the run's own curve uses the configs the trainer holds


@pytest.mark.parametrize("how", ["checkpoint", "auto"])
def test_a_resumed_run_reads_its_checkpoints_config_once(tmp_path, counts, how):
    run = tmp_path / "run"
    assert main(["train", *MICRO, "--train.steps", "2", "--train.save_every", "1", "--out", str(run)]) == 0
    counts.clear()
    where = (
        ["--resume", str(run / "step_0000001")]
        if how == "checkpoint"
        else [*MICRO, "--resume", "auto", "--out", str(run)]
    )
    assert main(["train", *where, "--quiet", "--train.steps", "3"]) == 0
    assert counts["checkpoint config read"] == 1 and counts["config upgraded"] == 1
    assert counts["validate d_model=32"] == 1
    assert counts["hook loss_curve built"] == 1
    assert counts["base config merged"] == (1 if how == "auto" else 0)


def test_resume_auto_without_a_checkpoint_merges_the_base_config_once(tmp_path, counts):
    assert main(["train", *MICRO, "--train.steps", "2", "--resume", "auto", "--out", str(tmp_path / "run")]) == 0
    assert counts["base config merged"] == 1 and counts["validate d_model=32"] == 1
