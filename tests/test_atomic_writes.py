"""Crash-safe writes in-process (nexus/atomic.py): every interrupted write writes content different
from what it replaces, so each test can tell which version survived. Interruptions are raised at the
named crash points (`crash_point`, patched to raise), never timed; a dead writer's journal is written
as the lock file a killed process leaves (tests/test_kill_points.py kills real processes)."""
import json
import os
import socket
from pathlib import Path

import pytest

import nexus.atomic as atomic
from nexus.outdir.lock import acquire_output_lock, lock_file
from nexus.outdir.manifest import read_manifest


def writes(text: str):
    def write(d: Path) -> None:
        (d / "a.txt").write_text(text)
    return write


def interrupt_at(monkeypatch, point: str) -> None:
    def crash(name):
        if name == point:
            raise KeyboardInterrupt(point)
    monkeypatch.setattr(atomic, "crash_point", crash)


def entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_new_output_is_written_with_its_manifest_and_nothing_beside_it(tmp_path):
    out = atomic.atomic_dir_write(tmp_path / "out", writes("v1"), "checkpoint")
    assert (out / "a.txt").read_text() == "v1" and read_manifest(out)["kind"] == "checkpoint"
    assert entries(tmp_path) == ["out"]


def test_replacing_an_output_puts_the_new_version_in_place_and_removes_the_old(tmp_path):
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")
    atomic.atomic_dir_write(tmp_path / "out", writes("new"), "checkpoint")
    assert (tmp_path / "out" / "a.txt").read_text() == "new"
    assert entries(tmp_path) == ["out"]


@pytest.mark.parametrize("point", ["swap-before-rename", "swap-between-renames"])
def test_an_interrupted_replace_keeps_the_old_version_and_leaves_no_temporary(tmp_path, monkeypatch, point):
    """Between the two renames the complete new version sits beside the moved-aside old one; an
    interruption (Ctrl-C, an exception) puts the old one back and removes the new one: before the fix
    it stayed behind as `.out.new-TAG`, recorded only in a lock file that the release then deleted."""
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")
    interrupt_at(monkeypatch, point)
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_dir_write(tmp_path / "out", writes("new"), "checkpoint")
    assert (tmp_path / "out" / "a.txt").read_text() == "old"
    assert entries(tmp_path) == ["out"]


def test_a_failing_writer_leaves_the_old_version_and_no_temporary(tmp_path):
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")

    def half(d: Path) -> None:
        (d / "a.txt").write_text("new")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic.atomic_dir_write(tmp_path / "out", half, "checkpoint")
    assert (tmp_path / "out" / "a.txt").read_text() == "old" and entries(tmp_path) == ["out"]


def test_write_file_atomic_replaces_or_keeps_the_old_file_whole(tmp_path, monkeypatch):
    f = tmp_path / "f.txt"
    atomic.write_text_atomic(f, "old")
    interrupt_at(monkeypatch, "file-before-rename")
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text_atomic(f, "new")
    assert f.read_text() == "old" and entries(tmp_path) == ["f.txt"]
    monkeypatch.setattr(atomic, "crash_point", lambda name: None)
    atomic.write_text_atomic(f, "new")
    assert f.read_text() == "new" and entries(tmp_path) == ["f.txt"]


def dead_writers_lock(target: Path, pending: list[Path]) -> None:
    """The lock file a writer killed mid-save leaves: its holder line (a pid that no longer runs) and
    the temporaries it recorded."""
    holder = {"pid": 2 ** 22 + 12345, "host": socket.gethostname(), "proc_start": None}
    lines = [holder] + [{"pending": str(p.relative_to(target.parent))} for p in pending]
    lock_file(target).write_text("".join(json.dumps(r) + "\n" for r in lines))


def side(target: Path, state: str, text: str) -> Path:
    p = atomic.side_name(target, state, "111-222")
    p.mkdir()
    (p / "a.txt").write_text(text)
    return p


@pytest.mark.parametrize("present,survivor", [(("new", "old"), "new"), (("old",), "old"), (("tmp", "old"), "old")])
def test_recovery_restores_the_complete_new_version_else_the_old_and_removes_the_rest(tmp_path, present, survivor):
    """A kill between the renames leaves no `out`: the recorded complete `.new` wins over the `.old`;
    an incomplete `.tmp` is never restored. Each side holds different content, so the survivor shows."""
    target = tmp_path / "out"
    sides = [side(target, state, state) for state in present]
    stray = tmp_path / ".out.new-999-999"  # not recorded: never touched
    stray.mkdir()
    dead_writers_lock(target, sides)
    with acquire_output_lock(target) as lk:
        assert "no longer running" in lk.note and len(lk.taken_over) == len(sides)
        actions = atomic.recover_recorded(lk)
    assert (target / "a.txt").read_text() == survivor
    assert entries(tmp_path) == [".out.new-999-999", "out"]
    assert sum(a.startswith("restored") for a in actions) == 1 and len(actions) == len(sides)
    assert f"({survivor} version)" in actions[0]


def test_recovery_never_replaces_an_output_that_exists(tmp_path):
    target = tmp_path / "out"
    atomic.atomic_dir_write(target, writes("current"), "checkpoint")
    sides = [side(target, "new", "new"), side(target, "old", "old")]
    dead_writers_lock(target, sides)
    with acquire_output_lock(target) as lk:
        atomic.recover_recorded(lk)
    assert (target / "a.txt").read_text() == "current" and entries(tmp_path) == ["out"]
