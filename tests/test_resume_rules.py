"""train/resume.py's rules as plain functions, in-process (no checkpoint, no training; well under a second
each): the global batch kept across world sizes (batch_size x grad_accum x world, checked by multiplying),
the launcher's world size, which config leaves changed, what a checkpoint at train.steps does, and the
refusals of a change the checkpoint cannot take (issue 42: train/resume.py's mutation survivors)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from nexus.config import ConfigError, DataConfig, RunConfig, TrainConfig
from nexus.train.resume import (
    changed_fields,
    keep_global_batch,
    launched_world_size,
    nothing_to_train,
    refuse_unread_data,
    refuse_unresumable,
)

W = "--resume='ck'"


def _train(bs: int, ga: int) -> TrainConfig:
    return TrainConfig(batch_size=bs, grad_accum=ga)


@pytest.mark.parametrize("value, want", [(None, 1), ("4", 4), ("", 1), ("0", 1), ("1", 1)])
def test_the_launched_world_size_is_the_launchers_and_at_least_one(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", value)
    assert launched_world_size() == want


def test_changed_fields_lists_every_differing_leaf_and_compares_growth_and_synthetic_whole():
    old = {"a": 1, "b": {"c": 2, "d": {"e": 3}}, "growth": {"x": 1}, "synthetic": {"v": 1}, "same": "s"}
    new = {"a": 1, "b": {"c": 5, "d": {"e": 4}}, "growth": {"x": 2}, "synthetic": {"v": 2}, "same": "s", "n": 0}
    assert changed_fields(old, new) == [
        ("b.c", 2, 5),
        ("b.d.e", 3, 4),
        ("growth", {"x": 1}, {"x": 2}),
        ("synthetic", {"v": 1}, {"v": 2}),
        ("n", None, 0),
    ]
    assert changed_fields(old, copy.deepcopy(old)) == []


@pytest.mark.parametrize(
    "bs, ga, old_world, world", [(4, 4, 1, 2), (4, 4, 1, 4), (2, 3, 2, 1), (8, 1, 4, 2), (4, 6, 1, 3), (1, 8, 2, 8)]
)
def test_a_new_world_size_keeps_the_global_batch_through_grad_accum(bs, ga, old_world, world):
    old, new = _train(bs, ga), _train(bs, ga)
    notes = keep_global_batch(old, new, old_world, world, W)
    before = bs * ga * old_world
    want = before // (bs * world)
    assert type(new.grad_accum) is int and new.grad_accum == want and new.batch_size == bs
    assert bs * want * world == before
    assert notes == [
        f"world size {old_world} -> {world}: train.grad_accum {ga} -> {want} keeps the "
        f"global batch of {before} sequences ({bs} x {want} x {world})"
    ]


def test_the_same_world_size_changes_nothing():
    new = _train(4, 3)
    assert keep_global_batch(_train(4, 3), new, 2, 2, W) == [] and new.grad_accum == 3


@pytest.mark.parametrize(
    "bs, ga, old_world, world", [(4, 6, 1, 4), (4, 4, 1, 3), (6, 1, 1, 4), (5, 2, 2, 3), (3, 1, 1, 3)]
)  # the last: only a batch of 1 fits
def test_a_world_size_that_cannot_keep_the_global_batch_is_refused_with_the_largest_batch_that_can(
    bs, ga, old_world, world
):
    before = bs * ga * old_world
    fits = [b for b in range(bs, 0, -1) if before % (b * world) == 0]  # micro-batches that divide it, largest first
    with pytest.raises(ConfigError) as e:
        keep_global_batch(_train(bs, ga), _train(bs, ga), old_world, world, W)
    valid = (
        f"--train.batch_size {fits[0]} --train.grad_accum {before // (fits[0] * world)} keeps it"
        if fits
        else f"a world size dividing {before} keeps it"
    )
    assert str(e.value) == (
        f"{W}: world size {old_world} -> {world} cannot keep the global batch of {before} sequences (train.batch_size "
        f"{bs} x train.grad_accum {ga} x world {old_world}) with train.batch_size {bs} (valid: {valid}; or set "
        "--train.batch_size and --train.grad_accum to choose a new global batch)"
    )
    if fits:
        assert fits[0] * (before // (fits[0] * world)) * world == before


def test_a_batch_given_on_resume_chooses_the_global_batch_and_is_noted_when_it_changes_it():
    new = _train(8, 1)
    assert keep_global_batch(_train(4, 2), new, 1, 2, W) == [
        "global batch 8 -> 16 sequences per step "
        "(train.batch_size 8 x train.grad_accum 1 x world 2), as given on resume"
    ]
    assert new.grad_accum == 1  # given, not adjusted
    assert keep_global_batch(_train(4, 2), _train(2, 4), 3, 3, W) == []  # the same 24 sequences: nothing to say
    assert keep_global_batch(_train(4, 2), _train(4, 1), 1, 2, W) == []  # 8 = 4 x 1 x 2


def test_a_checkpoint_without_its_world_size_is_taken_at_the_launched_one():
    assert keep_global_batch(_train(4, 2), _train(4, 2), None, 1, W) == []
    assert keep_global_batch(_train(4, 2), _train(4, 2), None, 3, W) == [
        "the checkpoint does not record its world size: the global batch is now 4 x 2 x 3 = 24 sequences"
    ]
    assert keep_global_batch(_train(4, 2), _train(4, 2), None, 2, W) == [
        "the checkpoint does not record its world size: the global batch is now 4 x 2 x 2 = 16 sequences"
    ]
    # a batch given on resume: measured against the same world, so 4 x 2 x 3 -> 8 x 1 x 3
    assert keep_global_batch(_train(4, 2), _train(8, 1), None, 3, W) == []
    assert keep_global_batch(_train(4, 2), _train(8, 2), None, 3, W) == [
        "global batch 24 -> 48 sequences per step "
        "(train.batch_size 8 x train.grad_accum 2 x world 3), as given on resume"
    ]


def test_a_checkpoint_at_its_last_step_is_refused_only_when_it_was_just_grown():
    cfg = RunConfig()
    cfg.train.steps = 10
    stored = copy.deepcopy(cfg)
    assert nothing_to_train(stored, cfg, None, W) == []
    assert nothing_to_train(stored, cfg, 9, W) == []
    assert nothing_to_train(stored, cfg, 10, W) == [
        "the checkpoint is at step 10 and train.steps is 10: no step is trained, only the final evaluation and "
        "checkpoint (give --train.steps N with N > 10 to train further)"
    ]
    stored.growth_history = [{"step": 4}]  # grown earlier: the note, not a refusal
    assert len(nothing_to_train(stored, cfg, 10, W)) == 1
    stored.growth_history = [{"step": 4}, {"step": 10}]
    with pytest.raises(ConfigError) as e:
        nothing_to_train(stored, cfg, 10, W)
    assert str(e.value) == (
        f"{W}: the checkpoint was grown at step 10 and train.steps is 10: nothing left to train "
        "(valid: --train.steps N with N > 10; its LR schedule is then re-planned over N steps)"
    )


def _changes(**fields) -> tuple[RunConfig, RunConfig, list]:
    stored = RunConfig()
    cfg = copy.deepcopy(stored)
    for path, value in fields.items():
        section, name = path.split("__")
        setattr(getattr(cfg, section), name, value)
    return stored, cfg, changed_fields(stored.to_dict(), cfg.to_dict())


@pytest.mark.parametrize(
    "fields, words",
    [
        (
            {"data__chat": True},
            "data.chat=True (checkpoint: False) changes the tokenizer the checkpoint was trained with",
        ),
        (
            {"train__optimizer": "muon"},
            "train.optimizer.kind='muon' (checkpoint: 'adamw') cannot take the checkpoint's optimizer state",
        ),
        (
            {"model__n_layers": 6},
            "model.n_layers=6 (checkpoint: 4) changes the model's shape (valid: resume without it; "
            "grow the checkpoint with `nexus grow --checkpoint ck --out DIR ...`",
        ),
        (
            {"model__n_heads": 2},
            "changes the function the checkpoint's weights compute (valid: resume without it; the "
            "model fields a resume may change: model.max_seq_len, model.z_loss;",
        ),
    ],
)
def test_a_change_the_checkpoint_cannot_take_is_refused_naming_the_command_that_can(fields, words):
    stored, cfg, changes = _changes(**fields)
    with pytest.raises(ConfigError) as e:
        refuse_unresumable(stored, cfg, changes, W, "ck")
    assert str(e.value).startswith(f"{W}: ") and words in str(e.value)
    if "optimizer" not in words:
        assert "`nexus train --init-from ck`" in str(e.value)


def test_the_model_fields_a_resume_may_change_pass():
    stored, cfg, changes = _changes(model__max_seq_len=512, model__z_loss=1e-4, train__steps=999)
    assert len(changes) == 3
    refuse_unresumable(stored, cfg, changes, W, "ck")


def test_a_data_field_the_source_does_not_read_is_refused_and_one_it_reads_passes(tmp_path):
    p = tmp_path / "c.bin"
    np.arange(100, dtype=np.uint16).tofile(p)
    stored, cfg, changes = _changes(data__max_documents=5)
    cfg.data.source = str(p)
    with pytest.raises(ConfigError) as e:
        refuse_unread_data(cfg, changes, W)
    assert str(e.value) == (
        f"{W}: data.max_documents=5 (checkpoint: 0) has no effect on data.source={str(p)!r}, a bin "
        "source, which does not read it (valid: resume without it)"
    )
    cfg.data.source = "synthetic:mqar"
    with pytest.raises(ConfigError, match=r"a synthetic source, which does not read it \(valid: resume without it\)$"):
        refuse_unread_data(cfg, _changes(data__val_fraction=0.2)[2], W)
    refuse_unread_data(cfg, [], W)  # nothing changed
    refuse_unread_data(cfg, _changes(data__seq_len=64)[2], W)  # read by every source
    cfg.data.source = "embedded"
    refuse_unread_data(cfg, changes, W)  # a text source reads its document cap


def test_a_prepared_source_is_told_to_prepare_again_and_every_unread_change_is_named(tmp_path):
    from nexus.data.prepare import prepare
    from nexus.data.sources import resolve_source
    from nexus.data.tokenizer import ByteTokenizer

    (tmp_path / "c.txt").write_text("".join(f"line {i} of a small corpus\n\n" for i in range(30)))
    text = DataConfig(source=str(tmp_path / "c.txt"))
    prepare(resolve_source(text.source), text, ByteTokenizer(), tmp_path / "prep", num_proc=1, progress=False)
    stored, cfg, changes = _changes(data__max_documents=5, data__num_proc=3)
    cfg.data.source = str(tmp_path / "prep")
    with pytest.raises(ConfigError) as e:
        refuse_unread_data(cfg, changes, W)
    assert str(e.value) == (
        f"{W}: data.max_documents=5 (checkpoint: 0), data.num_proc=3 (checkpoint: 0) has no effect "
        f"on data.source={str(tmp_path / 'prep')!r}, a prepared source, which does not read it (valid: "
        "resume without it (prepare the data again with the new setting: `nexus data prepare`))"
    )


def test_resume_config_names_the_resume_flag_when_the_checkpoint_is_not_one(tmp_path):
    from nexus.train.resume import resume_config

    (tmp_path / "ck").mkdir()
    with pytest.raises(ConfigError) as e:  # CheckpointError is a ConfigError: one line, exit 2
        resume_config(tmp_path / "ck")
    assert str(e.value).startswith(f"--resume={str(tmp_path / 'ck')!r}")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A 4-step micro run with a step checkpoint at 2 (~5 s): resume_config reads a real one."""
    from nexus.cli import main

    out = tmp_path_factory.mktemp("runs") / "base"
    assert (
        main(
            [
                "train",
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
                "--train.warmup_steps",
                "1",
                "--train.steps",
                "4",
                "--train.save_every",
                "2",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    return out / "step_0000002"


def test_resume_config_notes_each_change_once_and_nothing_without_one(checkpoint, tmp_path):
    from nexus.train.resume import resume_config

    cfg, notes = resume_config(checkpoint, world=1)
    assert notes == [] and cfg.train.steps == 4
    cfg, notes = resume_config(
        checkpoint, ["--train.log_every", "3", "--train.eval_every", "5"], out_dir=tmp_path / "o", world=1
    )
    assert notes[0].startswith("resumed with ")
    from nexus.checkpoint import read_config

    log_every = read_config(checkpoint).train.log_every  # the stored run's value
    assert sorted(notes[0][len("resumed with ") :].split(", ")) == [
        "train.eval_every 0 -> 5",
        f"train.log_every {log_every} -> 3",
    ]
    assert cfg.train.out_dir == str(tmp_path / "o") and (cfg.train.log_every, cfg.train.eval_every) == (3, 5)
    _, notes = resume_config(checkpoint, ["--train.out_dir", str(tmp_path / "elsewhere")], world=1)
    assert notes == []  # a new run location is not a change worth a note


def test_resume_config_refuses_naming_the_checkpoint_in_its_flag_and_its_fix(checkpoint):
    from nexus.train.resume import resume_config

    with pytest.raises(ConfigError) as e:
        resume_config(checkpoint, ["--model.n_layers", "3"], world=1)
    assert str(e.value).startswith(f"--resume={str(checkpoint)!r}: model.n_layers=3")
    assert f"`nexus grow --checkpoint {checkpoint} --out DIR ...`" in str(e.value)


def test_resume_config_reads_the_checkpoints_step_and_world(checkpoint):
    from nexus.train.resume import resume_config

    _, notes = resume_config(checkpoint, ["--train.steps", "2"], world=1)  # saved at step 2
    assert notes[-1].startswith("the checkpoint is at step 2 and train.steps is 2: no step is trained")
    with pytest.raises(ConfigError) as e:  # trained on 1 process with 2 x 1 sequences: 2 processes cannot keep 2
        resume_config(checkpoint, world=2)
    assert str(e.value).startswith(f"--resume={str(checkpoint)!r}: world size 1 -> 2 cannot keep the global batch of 2")


def test_an_unread_data_change_is_refused_under_the_resume_flag(tmp_path):
    p = tmp_path / "c.bin"
    np.arange(100, dtype=np.uint16).tofile(p)
    stored, cfg, changes = _changes(data__max_documents=5)
    cfg.data.source = stored.data.source = str(p)
    with pytest.raises(ConfigError, match=rf"^{W}: data.max_documents=5 \(checkpoint: 0\) has no effect"):
        refuse_unresumable(stored, cfg, changes, W, "ck")


def test_resume_config_applies_amend_last_and_takes_the_launched_world_only_when_none_is_given(checkpoint, monkeypatch):
    from nexus.train.resume import resume_config

    cfg, _ = resume_config(checkpoint, world=1, amend=lambda c: setattr(c.train, "log_every", 7))
    assert cfg.train.log_every == 7
    monkeypatch.setenv("WORLD_SIZE", "2")  # the launcher's 2 cannot keep this checkpoint's batch of 2 ...
    with pytest.raises(ConfigError, match="world size 1 -> 2"):
        resume_config(checkpoint)
    assert resume_config(checkpoint, world=1)[1] == []  # ... a world given explicitly wins


@pytest.fixture(scope="module")
def grown(checkpoint, tmp_path_factory):
    """The step-2 checkpoint grown in width (no probe verification: ~1 s): a grown checkpoint's resume path."""
    from nexus.growth import grow_checkpoint

    out = tmp_path_factory.mktemp("grown") / "ck"
    grow_checkpoint(checkpoint, out, {"family": "width", "hidden": 64, "init": "copy,copy"}, probe_verify=False)
    return out


def test_a_grown_checkpoint_trained_further_re_plans_its_schedule_and_records_where(grown):
    from nexus.checkpoint import read_config
    from nexus.train.resume import resume_config

    stored = read_config(grown)
    assert stored.growth_history[-1]["step"] == 2 and stored.train.steps == 4 and not stored.train.schedule_steps
    cfg, notes = resume_config(grown, ["--train.steps", "8"], world=1)
    assert notes[0] == "resumed with train.steps 4 -> 8"
    assert notes[1].startswith("train.steps 4 -> 8 on a grown checkpoint: the LR schedule is re-planned over 8 steps")
    assert not cfg.train.schedule_steps and cfg.train.steps == 8  # the horizon follows the new train.steps
    # the newest growth record says where the horizon changed and from what (the step-2 checkpoint, horizon 4)
    assert cfg.growth_history[-1]["lr_replan"] == {"step": 2, "horizon_before": 4}
    assert cfg.growth_history[:-1] == stored.growth_history[:-1]
    assert "lr_replan" not in read_config(grown).growth_history[-1]  # the checkpoint itself is not touched


def test_a_grown_checkpoint_resumed_unchanged_records_no_replan(grown):
    from nexus.train.resume import resume_config

    cfg, notes = resume_config(grown, world=1)
    assert notes == [] and "lr_replan" not in cfg.growth_history[-1]


def test_a_checkpoint_that_was_not_grown_keeps_its_horizon_when_trained_further(checkpoint):
    from nexus.train.resume import resume_config

    cfg, notes = resume_config(checkpoint, ["--train.steps", "8"], world=1)
    assert (
        notes[1] == "train.steps 4 -> 8: the LR schedule keeps its horizon of 4 steps (set --train.schedule_steps "
        "to re-plan it)"
    )
    assert cfg.train.schedule_steps == 4 and cfg.growth_history == []


def test_a_grown_checkpoint_with_nothing_left_to_train_is_refused_under_the_resume_flag(grown):
    from nexus.train.resume import resume_config

    with pytest.raises(ConfigError) as e:
        resume_config(grown, ["--train.steps", "2"], world=1, flag="--init")
    assert str(e.value).startswith(
        f"--init={str(grown)!r}: the checkpoint was grown at step 2 and train.steps is 2: "
        "nothing left to train (valid: --train.steps N with N > 2;"
    )
