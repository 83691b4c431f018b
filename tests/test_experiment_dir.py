"""nexus.experiments.runs' helpers for an experiment's own folder, in-process (the `nexus experiment` tests reach them
through the CLI in a child process, where mutation testing cannot see them): the folder claimed and held, a user's
edit of a file the experiment rewrites refused before any training, its outputs recorded by name, and the step of a
run's newest step checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus.config import ConfigError
from nexus.experiments import runs
from nexus.outdir import EXPERIMENT, read_manifest


def test_an_experiment_folder_is_claimed_as_an_experiments_and_entered_again_to_resume(tmp_path):
    out = tmp_path / "exp"
    with runs.experiment_dir(out) as d:
        assert d == out and isinstance(d, Path)
        assert read_manifest(out)["kind"] == EXPERIMENT and read_manifest(out)["files"] == {}
        (out / "report.md").write_text("first\n")
        runs.record_outputs(out, files=[out / "report.md"])
    with runs.experiment_dir(out) as d:  # an experiment there already: it resumes, its records kept
        assert set(read_manifest(d)["files"]) == {"report.md"}


def test_an_experiment_folder_refuses_another_outputs_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("the user's\n")
    with pytest.raises(ConfigError):
        with runs.experiment_dir(run):
            pass
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]


def test_outputs_are_recorded_by_their_names_inside_the_folder_and_run_folders_as_folders(tmp_path):
    out = tmp_path / "exp"
    with runs.experiment_dir(out):
        (out / "results.json").write_text("{}")
        (out / "plots").mkdir()
        (out / "plots" / "a.png").write_bytes(b"png")
        (out / "seed0").mkdir()
        runs.record_outputs(out, files=[out / "results.json", "plots/a.png"], runs=[out / "seed0"])
    files = read_manifest(out)["files"]
    assert set(files) == {"results.json", "plots/a.png", "seed0"}
    assert files["seed0"] == {"dir": True}
    assert not files["results.json"].get("dir") and files["plots/a.png"]["size"] == 3


def test_a_file_the_user_edited_since_nexus_wrote_it_is_refused_in_one_line_naming_it(tmp_path):
    out = tmp_path / "exp"
    with runs.experiment_dir(out):
        for name in ("report.md", "results.json"):
            (out / name).write_text(f"nexus wrote {name}\n")
        (out / "seed0").mkdir()
        runs.record_outputs(out, files=["report.md", "results.json"], runs=["seed0"])
    runs.refuse_edited_files(out)  # nothing edited: no word
    (out / "seed0" / "anything").write_text("a run folder's own files are its own manifest's business\n")
    (out / "results.json").unlink()  # gone: rewritten by the next run, nothing of the user's lost
    runs.refuse_edited_files(out)
    (out / "report.md").write_text("nexus wrote report.md\nand the user added a line\n")
    with pytest.raises(ConfigError) as e:
        runs.refuse_edited_files(out)
    msg = str(e.value)
    assert "\n" not in msg and "'report.md' was changed since nexus wrote it" in msg and repr(str(out)) in msg
    with pytest.raises(ConfigError):  # and so is entering the folder again
        with runs.experiment_dir(out):
            pass
    assert runs.refuse_edited_files(tmp_path / "never-written") is None  # no manifest: nothing recorded to protect


def test_the_newest_step_checkpoint_is_the_highest_step_folder_holding_its_meta(tmp_path):
    assert runs.latest_step_checkpoint(tmp_path) is None
    for name, meta in (("step_0000002", True), ("step_0000010", True), ("step_0000011", False), ("checkpoint", True)):
        (tmp_path / name).mkdir()
        if meta:
            (tmp_path / name / "meta.json").write_text("{}")
    assert runs.latest_step_checkpoint(tmp_path) == tmp_path / "step_0000010"


def test_a_checkpoints_step_is_read_from_its_trainer_state_without_the_optimizer(tmp_path, monkeypatch):
    import nexus.checkpoint as ckpt

    asked = []

    def state(path, with_optimizer=True):
        asked.append((path, with_optimizer))
        return {"step": "7"} if path.name == "a" else None

    monkeypatch.setattr(ckpt, "load_trainer_state", state)
    assert runs._ckpt_step(tmp_path / "a") == 7
    assert runs._ckpt_step(tmp_path / "b") == 0  # no trainer state: from the start
    assert asked == [(tmp_path / "a", False), (tmp_path / "b", False)]
