"""The post-growth monitor (symmetry lock, RMS ratio against the pre-growth model) survives a resume: a
grown run resumed from a checkpoint written after its growth logs the same values at the same steps as
the uninterrupted run; a checkpoint without the monitor state (older nexus, or grown again outside
training) still resumes, without the monitor and with a note."""

import json
from pathlib import Path

import pytest

from nexus.checkpoint import load_checkpoint, load_trainer_state, save_checkpoint
from nexus.growth import grow_checkpoint
from nexus.presets import get_preset
from nexus.train.resume import resume_config
from nexus.train.trainer import Trainer

MONITOR_KEYS = ("symmetry_lock_mean", "symmetry_lock_min", "rms_ratio_per_layer", "rms_ratio_max_dev")
GROW_AT, SAVE_AT, STEPS = 4, 6, 8  # the step-6 checkpoint is written after the growth at step 4


def _micro(out_dir, steps=STEPS, **train):
    cfg = get_preset("baseline-micro")
    cfg.model.n_layers = 1
    cfg.train.steps, cfg.train.eval_every, cfg.train.log_every, cfg.train.out_dir = steps, 0, 1, str(out_dir)
    cfg.train.eval_batches, cfg.train.batch_size, cfg.data.seq_len, cfg.train.sample_tokens = 1, 4, 32, 4
    for k, v in train.items():
        setattr(cfg.train, k, v)
    return cfg


def _rows(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def _monitor_rows(run_dir) -> dict:
    return {
        r["step"]: {k: r[k] for k in MONITOR_KEYS if k in r}
        for r in _rows(run_dir)
        if any(k in r for k in MONITOR_KEYS) and r.get("event") is None
    }


def _losses(run_dir) -> dict:
    return {r["step"]: r["loss"] for r in _rows(run_dir) if "loss" in r}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Grows at step 4 (copy init: the symmetry lock is defined), runs to step 8, saves at step 6."""
    run = tmp_path_factory.mktemp("uninterrupted")
    growth = {"family": "width", "hidden": 96, "ffn": 256, "init": "copy,copy", "rewarmup": [1.3, 4]}
    Trainer(
        _micro(
            run, hooks=[{"kind": "growth", "at": GROW_AT, "spec": growth}], lr=1e-2, save_every=SAVE_AT, keep_last=5
        ),
        quiet=True,
    ).fit()
    return run


def _resume(ckpt, out):
    cfg, _ = resume_config(ckpt, out_dir=out)  # the grown model's shape, the run's own training settings
    trainer = Trainer(cfg, resume=str(ckpt), quiet=True)
    trainer.fit()
    return trainer


def test_resumed_grown_run_logs_the_same_post_growth_metrics(uninterrupted, tmp_path):
    ref = _monitor_rows(uninterrupted)
    assert sorted(ref) == list(range(GROW_AT + 1, STEPS + 1)) and all(set(v) == set(MONITOR_KEYS) for v in ref.values())

    trainer = _resume(uninterrupted / f"step_{SAVE_AT:07d}", tmp_path / "resumed")
    got = _monitor_rows(tmp_path / "resumed")
    assert sorted(got) == list(range(SAVE_AT + 1, STEPS + 1)), got
    # Exact equality: resume is bitwise on CPU (tests/test_core_train.py), so the weights at each step are the
    # same; the probe, pre-growth RMS and copy sources come back unchanged, so the logged numbers are too.
    assert {s: _losses(tmp_path / "resumed")[s] for s in got} == {s: _losses(uninterrupted)[s] for s in got}
    for s in got:
        assert got[s] == ref[s], (s, got[s], ref[s])
    assert not any("post-growth monitor" in n for n in trainer.notes)
    # the resumed run's own checkpoint carries the monitor on: a second resume would log it too
    carried = load_trainer_state(tmp_path / "resumed" / "checkpoint", with_optimizer=False)["hooks"]["growth"]
    assert carried["n_growths"] == 1  # still this run's one growth: a second resume restores the monitor again
    # the state is small: one index tensor per distinct axis map, not one per parameter and dimension
    st = load_trainer_state(uninterrupted / f"step_{SAVE_AT:07d}", with_optimizer=False)["hooks"]["growth"]["monitor"]
    assert len(st["sources"]) < sum(len(dims) for dims in st["copy_source"].values())


def test_checkpoint_without_monitor_state_resumes_with_a_note(uninterrupted, tmp_path):
    """A checkpoint as nexus wrote it before the monitor state existed: trainer_state.pt without "hooks"."""
    model, cfg, tok = load_checkpoint(uninterrupted / f"step_{SAVE_AT:07d}")
    tstate = load_trainer_state(uninterrupted / f"step_{SAVE_AT:07d}")
    del tstate["hooks"]
    old = save_checkpoint(tmp_path / "old", model, cfg, tok, tstate)
    trainer = _resume(old, tmp_path / "resumed")
    assert trainer.step == STEPS and trainer.lr_rule is not None  # the re-warmup still comes back
    steps = range(SAVE_AT + 1, STEPS + 1)
    assert {s: _losses(tmp_path / "resumed")[s] for s in steps} == {s: _losses(uninterrupted)[s] for s in steps}
    assert _monitor_rows(tmp_path / "resumed") == {}
    notes = [n for n in trainer.notes if "post-growth monitor" in n]
    # the note says why and which metrics go missing
    assert len(notes) == 1 and notes[0].startswith("the checkpoint holds no post-growth monitor for its latest growth")
    assert "(written before nexus saved it, or grown outside training)" in notes[0]
    assert notes[0].endswith(": symmetry_lock_* and rms_ratio_* are not logged after this resume")


def test_checkpoint_grown_again_outside_training_replaces_the_stale_monitor(uninterrupted, tmp_path):
    """`nexus grow` on a grown-in-training checkpoint copies its trainer state; the monitor in it belongs to
    the first growth (other shapes, other pre-growth model): it is replaced by the new growth's, and the
    continued run logs the new growth's diagnostics."""
    out = tmp_path / "grown_again"
    grow_checkpoint(
        uninterrupted / f"step_{SAVE_AT:07d}", out, {"family": "width", "hidden": 128, "ffn": 256}, probe_verify=False
    )
    old = load_trainer_state(uninterrupted / f"step_{SAVE_AT:07d}")["hooks"]["growth"]
    new = load_trainer_state(out)["hooks"]["growth"]
    assert (old["n_growths"], new["n_growths"]) == (1, 2)
    assert new["monitor"]["base_rms"] != old["monitor"]["base_rms"]  # measured on the model before *this* growth
    trainer = _resume(out, tmp_path / "resumed")
    assert trainer.model.cfg.d_model == 128 and _monitor_rows(tmp_path / "resumed") != {}
    assert not any("post-growth monitor" in n for n in trainer.notes)


def test_malformed_monitor_state_is_one_line_exit_2(uninterrupted, tmp_path, capsys):
    from nexus.cli import main

    model, cfg, tok = load_checkpoint(uninterrupted / f"step_{SAVE_AT:07d}")
    tstate = load_trainer_state(uninterrupted / f"step_{SAVE_AT:07d}")
    del tstate["hooks"]["growth"]["monitor"]["sources"]
    bad = save_checkpoint(tmp_path / "bad", model, cfg, tok, tstate)
    out = tmp_path / "never"
    rc = main(["train", "--resume", str(bad), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        rc == 2 and len(err) == 1 and str(bad) in err[0] and "post-growth monitor" in err[0] and "sources" in err[0]
    ), err
    assert not out.exists()


def test_a_hook_with_state_dict_but_no_state_key_does_not_break_checkpointing(tmp_path):
    """Only hooks that name a `state_key` have their state saved; any other hook that happens to have a
    `state_dict` method (a module, an optimizer wrapper) is not asked for one and does not fail the save."""

    from nexus.train.hooks import Hook

    class Unkeyed(Hook):  # state_key stays None
        def state_dict(self):
            raise AssertionError("a hook without state_key must not be asked for its state")

    Trainer(_micro(tmp_path, steps=2, save_every=2), quiet=True, hooks=[Unkeyed()]).fit()
    assert "hooks" not in load_trainer_state(tmp_path / "checkpoint", with_optimizer=False)
