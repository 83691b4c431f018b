"""One front door (issue 25 item 4): `nexus train` merges a run's config and validates it once, in
cli/train.py (a resume through train/resume.py), builds the configured hooks once and the model once;
the trainer takes what the front door made instead of doing it again. `Trainer(cfg)` called directly
still validates a config nobody validated, or one changed since."""

from collections import Counter

import pytest

from nexus.cli import main
from nexus.config import ConfigError, RunConfig
from nexus.growth.hook import GrowthHook
from nexus.models.transformer import TransformerLM
from nexus.presets import get_preset
from nexus.train.trainer import Trainer

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "2",
    "--train.sample_tokens",
    "4",
    "--train.log_every",
    "1",
    "--train.warmup_steps",
    "1",
    "--quiet",
]


@pytest.fixture
def counts(monkeypatch):
    """Counter of RunConfig.validate calls, growth-hook parses and models built (real and on the meta device)."""
    seen = Counter()
    validate, init, from_config = RunConfig.validate, TransformerLM.__init__, GrowthHook.from_config.__func__

    def counting_validate(self):
        seen["validate"] += 1
        seen[f"validate d_model={self.model.d_model}"] += 1
        return validate(self)

    def counting_init(self, cfg):
        init(self, cfg)
        seen["meta build" if next(self.parameters()).is_meta else "build"] += 1

    def counting_from_config(cls, *a, **k):
        seen["growth hook parsed"] += 1
        return from_config(cls, *a, **k)

    monkeypatch.setattr(RunConfig, "validate", counting_validate)
    monkeypatch.setattr(TransformerLM, "__init__", counting_init)
    monkeypatch.setattr(GrowthHook, "from_config", classmethod(counting_from_config))
    return seen


def test_a_new_run_validates_its_config_once_and_builds_its_model_once(tmp_path, counts):
    assert main(["train", *MICRO, "--train.steps", "2", "--out", str(tmp_path / "run")]) == 0
    assert (counts["validate"], counts["build"]) == (1, 1)


def test_a_new_growing_run_validates_once_and_parses_its_growth_spec_once(tmp_path, counts):
    """The growth flags' entry is written before the one validation; the hook built by the front door
    (its spec checked against the model there) is the one the trainer runs."""
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
    # the run's config (d_model 32) once; growth validates the grown model's config (d_model 48) at step 1
    assert (counts["validate d_model=32"], counts["validate d_model=48"], counts["growth hook parsed"]) == (1, 1, 1)


@pytest.mark.parametrize("how", ["checkpoint", "auto"])
def test_a_resumed_run_validates_its_config_once_and_builds_its_model_once(tmp_path, counts, how):
    run = tmp_path / "run"
    assert main(["train", *MICRO, "--train.steps", "2", "--train.save_every", "1", "--out", str(run)]) == 0
    counts.clear()
    where = (
        ["--resume", str(run / "step_0000001")]
        if how == "checkpoint"
        else [*MICRO, "--resume", "auto", "--out", str(run)]
    )
    assert main(["train", *where, "--quiet", "--train.steps", "3"]) == 0
    assert (counts["validate"], counts["build"]) == (1, 1)  # the build is the checkpoint's model, loaded once


def test_the_trainer_validates_a_config_nobody_validated_or_one_changed_since(tmp_path, counts):
    cfg = get_preset("baseline-micro")
    cfg.train.out_dir = str(tmp_path / "a")
    Trainer(cfg, quiet=True)
    assert counts["validate"] == 1
    cfg = get_preset("baseline-micro").validate()
    cfg.train.out_dir = str(tmp_path / "b")  # a change after validate(): checked again
    cfg.train.steps = 0
    with pytest.raises(ConfigError, match="train.steps=0"):
        Trainer(cfg, quiet=True)


@pytest.mark.parametrize("existing", [False, True])
def test_resume_auto_with_a_refused_config_says_only_the_refusal(tmp_path, capsys, existing):
    """`--resume auto` printed "starting a new run" (or "resuming from ...") before the config was refused."""
    run = tmp_path / "run"
    if existing:
        assert (
            main(["train", *MICRO, "--train.steps", "2", "--train.save_every", "1", "--out", str(run), "--quiet"]) == 0
        )
        capsys.readouterr()
    assert main(["train", *MICRO, "--resume", "auto", "--out", str(run), "--train.lr", "-1"]) == 2
    out, err = capsys.readouterr()
    assert "train.lr" in err
    assert "starting" not in out + err and "resuming from" not in out + err
