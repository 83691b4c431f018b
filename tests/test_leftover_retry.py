"""Leftovers retried (issue 46 item 8): a temporary nexus made in a run directory and could not delete (the
moved-aside `.checkpoint.old-TAG` of a replaced checkpoint, a pruned `.step_N.del-TAG`), because the delete
failed or was interrupted, is recorded in the run's manifest and removed at the run's next save or resume,
with one line saying so. Before, the lock's release dropped its only record and the user was told to delete
it by hand. Only what nexus recorded is removed: a user's folder under a similar name, or under the very name
once the leftover is gone, is left alone. In-process, on folders built here (no training, about a second)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import nexus.atomic as atomic
from nexus.outdir import CHECKPOINT, TRAIN_RUN, acquire_output_lock, read_manifest, record
from nexus.outdir.manifest import ownership_problems, write_manifest
from nexus.train.run_dir import remove_entries, run_lock

REAL_RMTREE = atomic.shutil.rmtree


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test starts as a new process would: nothing said yet about any leftover."""
    monkeypatch.setattr(atomic, "_NAMED", set(), raising=False)


def writes(text: str):
    def write(d: Path) -> None:
        (d / "a.txt").write_text(text)
        (d / "b.txt").write_text(text)

    return write


def run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    record(run, TRAIN_RUN)
    return run


def leftovers(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if ".old-" in p.name or ".del-" in p.name)


def recorded(run: Path) -> list[str]:
    """The leftovers the run's manifest records."""
    return sorted(read_manifest(run).get("leftovers", {}))


def failing_rmtree(monkeypatch, marker: str, exc: BaseException) -> None:
    """shutil.rmtree that, on a folder named with `marker`, deletes one file and then raises `exc` (a delete
    refused part-way, or Ctrl-C mid-delete); every other folder is deleted as usual."""

    def rmtree(path, ignore_errors=False, **k):
        if marker in Path(path).name:
            for f in sorted(Path(path).glob("*.txt"))[:1]:
                f.unlink()
            if ignore_errors:
                return None
            raise exc
        return REAL_RMTREE(path, ignore_errors=ignore_errors, **k)

    monkeypatch.setattr(atomic.shutil, "rmtree", rmtree)


def save(run: Path, name: str, text: str) -> Path:
    return atomic.atomic_dir_write(run / name, writes(text), CHECKPOINT, enter=True)


def test_an_old_checkpoint_that_could_not_be_deleted_is_removed_at_the_runs_next_save(tmp_path, monkeypatch, capsys):
    run = run_folder(tmp_path)
    with acquire_output_lock(run):
        save(run, "checkpoint", "v1")
        failing_rmtree(monkeypatch, ".old-", PermissionError(13, "Permission denied"))
        save(run, "checkpoint", "v2")
        (left,) = leftovers(run)
        assert capsys.readouterr().err.splitlines() == [
            f"nexus: warning: could not remove {left} (Permission denied); it is not needed, nexus removes it at "
            f"the next save or resume of {run}"
        ]
        assert recorded(run) == [left.name]
        assert ownership_problems(run) == []  # nexus's own: an --overwrite of the run is not refused for it
        user = run / ".checkpoint.old-1-2"  # the user's, under a name like the leftover's: never recorded
        user.mkdir()
        (user / "mine.txt").write_text("mine")
        monkeypatch.setattr(atomic.shutil, "rmtree", REAL_RMTREE)
        save(run, "checkpoint", "v3")
    assert capsys.readouterr().err.splitlines() == [
        f"nexus: note: removed {left.name}, left by an earlier save that could not delete it"
    ]
    assert not left.exists() and (user / "mine.txt").read_text() == "mine"
    assert (run / "checkpoint" / "a.txt").read_text() == "v3" and "leftovers" not in read_manifest(run)
    assert ownership_problems(run) == [(user.name, "not written by nexus")]


def test_a_pruned_step_whose_delete_was_interrupted_is_removed_when_the_run_is_resumed(tmp_path, monkeypatch):
    run = run_folder(tmp_path)
    with acquire_output_lock(run):
        save(run, "step_0000001", "s1")
        failing_rmtree(monkeypatch, ".del-", KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            remove_entries(run, ["step_0000001"])
    (left,) = leftovers(run)
    assert left.name.startswith(".step_0000001.del-") and recorded(run) == [left.name]
    user = run / ".step_0000001.del-1-2"
    user.mkdir()
    monkeypatch.setattr(atomic.shutil, "rmtree", REAL_RMTREE)
    lk = run_lock(run)  # what a resume (or --overwrite) of the run takes first
    try:
        assert lk.notes == [f"removed {left.name}, left by an earlier save that could not delete it"]
    finally:
        lk.release()
    assert leftovers(run) == [user] and "leftovers" not in read_manifest(run)


def test_a_leftover_that_still_cannot_be_deleted_stays_recorded_and_is_named_once(tmp_path, monkeypatch, capsys):
    """Each retry that deletes part of it and fails again keeps the record (following what is left), names it
    on one warning line the first time in a process, and a later retry that can delete it does."""
    run = run_folder(tmp_path)
    with acquire_output_lock(run):
        save(run, "checkpoint", "v1")
        failing_rmtree(monkeypatch, ".old-", PermissionError(13, "Permission denied"))
        save(run, "checkpoint", "v2")
    (left,) = leftovers(run)
    monkeypatch.setattr(atomic, "_NAMED", set(), raising=False)  # the next command: a new process
    capsys.readouterr()
    for _ in range(2):
        with atomic.guard_output(run, TRAIN_RUN, resume=True):
            pass
    assert capsys.readouterr().err.splitlines() == [
        f"nexus: warning: could not remove {left} (Permission denied), left by an earlier save; it is not needed, "
        f"nexus tries again at the next save or resume of {run}"
    ]
    # a.txt went at the save, b.txt at the first retry (which changed the folder: recorded again), none at the second
    assert sorted(p.name for p in left.iterdir()) == [".nexus-run"]
    assert recorded(run) == [left.name]
    monkeypatch.setattr(atomic.shutil, "rmtree", REAL_RMTREE)
    with atomic.guard_output(run, TRAIN_RUN, resume=True):
        pass
    assert capsys.readouterr().err.splitlines() == [
        f"nexus: note: removed {left.name}, left by an earlier save that could not delete it"
    ]
    assert leftovers(run) == [] and "leftovers" not in read_manifest(run)


def test_a_folder_put_under_a_recorded_leftovers_name_is_left_alone(tmp_path, monkeypatch):
    """The user deletes the leftover by hand and makes a folder of their own under the same name (on the same
    inode, as file systems reuse them): it is not the recorded one, so it stays, and the record goes."""
    run = run_folder(tmp_path)
    with acquire_output_lock(run):
        save(run, "checkpoint", "v1")
        failing_rmtree(monkeypatch, ".old-", PermissionError(13, "Permission denied"))
        save(run, "checkpoint", "v2")
    monkeypatch.setattr(atomic.shutil, "rmtree", REAL_RMTREE)
    (left,) = leftovers(run)
    REAL_RMTREE(left)
    time.sleep(0.05)  # a person's pace: the kernel's clock ticks in milliseconds
    left.mkdir()
    (left / "mine.txt").write_text("mine")
    lk = run_lock(run)
    try:
        assert lk.notes == [f"left {left.name} alone: it is no longer the leftover nexus recorded under that name"]
    finally:
        lk.release()
    assert (left / "mine.txt").read_text() == "mine" and "leftovers" not in read_manifest(run)
    assert ownership_problems(run) == [(left.name, "not written by nexus")]


def test_a_leftover_record_that_names_anything_but_a_temporary_is_never_acted_on(tmp_path):
    """An edited manifest cannot make nexus delete a user's file: only `.NAME.STATE-TAG` names in the folder
    itself, with an inode and a modification time, are leftovers."""
    run = run_folder(tmp_path)
    names = ["precious", ".checkpoint.old-1-2", "sub/.checkpoint.old-3-4", "../.run.old-5-6", ".x.old-7-8"]
    for name in names[:4]:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).mkdir()
    (tmp_path / "outside").mkdir()
    (run / ".x.old-7-8").symlink_to(tmp_path / "outside")
    m = read_manifest(run)
    m["leftovers"] = {n: {"ino": os.lstat(run / n).st_ino, "mtime_ns": os.lstat(run / n).st_mtime_ns} for n in names}
    m["leftovers"][".checkpoint.old-1-2"] = {"ino": str(os.lstat(run / names[1]).st_ino)}
    write_manifest(run, m)
    lk = run_lock(run)
    lk.release()
    assert lk.notes == ["left .x.old-7-8 alone: it is no longer the leftover nexus recorded under that name"]
    assert all((run / n).exists() for n in names) and (run / ".x.old-7-8").is_symlink()
    assert (tmp_path / "outside").is_dir() and "leftovers" not in read_manifest(run)
