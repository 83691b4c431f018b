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
    def crash(name, what=None):
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


def test_an_interruption_after_the_last_rename_keeps_the_new_version_and_removes_the_old(tmp_path, monkeypatch):
    """The new version is in place once the second rename is done: an interruption then (before the
    folder's fsync) still propagates, but leaves no `.out.old-TAG` behind. Before the fix the whole
    old version stayed there, its record dropped by the lock's release, so nothing ever removed it."""
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")
    interrupt_at(monkeypatch, "swap-after-renames")
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_dir_write(tmp_path / "out", writes("new"), "checkpoint")
    assert (tmp_path / "out" / "a.txt").read_text() == "new"
    assert entries(tmp_path) == ["out"]


def test_a_leftover_that_cannot_be_deleted_keeps_the_completed_save_and_is_named_on_one_line(
    tmp_path, monkeypatch, capsys
):
    """The old version moved aside is deleted once the new one is in place. When that delete fails
    (permissions as non-root, a busy mount) the save stands and one line names what is left and why;
    before, `rmtree(ignore_errors=True)` left `.out.old-TAG` behind without a word."""
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")
    real = atomic.shutil.rmtree

    def refuse_old(path, ignore_errors=False, **k):
        if ".old-" in Path(path).name:
            if ignore_errors:  # what rmtree does with a failure it was told to ignore
                return None
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, ignore_errors=ignore_errors, **k)

    monkeypatch.setattr(atomic.shutil, "rmtree", refuse_old)
    assert atomic.atomic_dir_write(tmp_path / "out", writes("new"), "checkpoint") == tmp_path / "out"
    assert (tmp_path / "out" / "a.txt").read_text() == "new" and read_manifest(tmp_path / "out")["kind"] == "checkpoint"
    left = [p for p in tmp_path.iterdir() if p.name != "out"]
    assert len(left) == 1 and left[0].name.startswith(".out.old-") and (left[0] / "a.txt").read_text() == "old"
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"nexus: warning: could not remove {left[0]} (Permission denied); it is not needed, delete it by hand"
    ], err


@pytest.mark.parametrize("point", [None, "swap-before-rename", "swap-between-renames", "swap-after-renames"])
def test_a_replace_removes_its_temporaries_without_a_word(tmp_path, monkeypatch, capsys, point):
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")
    interrupt_at(monkeypatch, point)
    try:
        atomic.atomic_dir_write(tmp_path / "out", writes("new"), "checkpoint")
    except KeyboardInterrupt:
        assert point is not None
    assert entries(tmp_path) == ["out"] and capsys.readouterr().err == ""


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
    monkeypatch.setattr(atomic, "crash_point", lambda name, what=None: None)
    atomic.write_text_atomic(f, "new")
    assert f.read_text() == "new" and entries(tmp_path) == ["f.txt"]


def dead_writers_lock(target: Path, pending: list[Path]) -> None:
    """The lock file a writer killed mid-save leaves: its holder line (a pid that no longer runs) and
    the temporaries it recorded."""
    holder = {"pid": 2**22 + 12345, "host": socket.gethostname(), "proc_start": None}
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


# ----------------------------------------------------------------------------- the journal, readers, one writer
def journal(target: Path) -> list[str]:
    """The temporaries recorded pending in `target`'s lock file, in order (relative to its folder)."""
    recs = [json.loads(line) for line in lock_file(target).read_text().splitlines()[1:]]
    return [r["pending"] for r in recs if "pending" in r]


# the names module docstring of nexus/atomic.py promises, written out here: .NAME.STATE-PID-NANOSECONDS
def side_pattern(name: str, state: str) -> str:
    return rf"^\.{name}\.{state}-\d+-\d+$"


def test_every_journaled_temporary_is_named_as_recovery_reads_it(tmp_path, monkeypatch):
    """Each temporary a write records (a file's `.tmp`, with or without the lock passed in; a replaced
    folder's `.tmp`, `.new`, `.old`; a pruned folder's `.del`) is named `.NAME.STATE-TAG`: \
recovery after a kill matches only that form."""
    import re

    run = tmp_path / "run"
    run.mkdir()
    with acquire_output_lock(run) as lk:
        atomic.write_file_atomic(run / "f.txt", lambda p: p.write_text("x"), lk)
        atomic.write_text_atomic(run / "g.txt", "y")  # no lock passed: it journals into the held one
        atomic.atomic_dir_write(run / "d", writes("v1"), "checkpoint")
        atomic.atomic_dir_write(run / "d", writes("v2"), "checkpoint")
        interrupt_at(monkeypatch, "prune-after-rename")
        with pytest.raises(KeyboardInterrupt):
            atomic.remove_recorded(lk, run / "d")
        names = [Path(p).name for p in journal(run)]
        want = [
            ("f.txt", "tmp"),
            ("g.txt", "tmp"),
            ("d", "tmp"),
            ("d", "tmp"),
            ("d", "new"),
            ("d", "old"),
            ("d", "del"),
        ]
        assert len(names) == len(want)
        for got, (name, state) in zip(names, want):
            assert re.match(side_pattern(re.escape(name), state), got), (got, state)
        # interrupted mid-prune: the folder is gone from its name, whole under its recorded `.del` name
        aside = run / names[-1]
        assert not (run / "d").exists() and (aside / "a.txt").read_text() == "v2"


def test_recovery_removes_a_recorded_file_and_a_half_pruned_folder_and_is_done_after_one_pass(tmp_path):
    """A dead writer's `.tmp` *file* (write_file_atomic's) and `.del` folder (a prune cut short) are
    removed; a second pass over the same lock finds nothing left to do."""
    target = tmp_path / "out"
    tmp_file = atomic.side_name(target, "tmp", "111-222")
    tmp_file.write_text("half")
    pruned = side(target, "del", "doomed")
    dead_writers_lock(target, [tmp_file, pruned])
    with acquire_output_lock(target) as lk:
        actions = atomic.recover_recorded(lk)
        assert atomic.recover_recorded(lk) == []
    assert len(actions) == 2 and all(a.startswith("removed") for a in actions)
    assert entries(tmp_path) == []


def test_pid_alive_probes_without_signalling(monkeypatch):
    """This process and a running child are alive (and the probe sends no signal: the child keeps
    running); a pid above the kernel's pid limit is not; a process of another user (EPERM) exists."""
    import subprocess
    import sys

    assert atomic.pid_alive(os.getpid()) is True
    # the child takes the default action of every signal (a nohup'd parent passes SIGHUP on ignored),
    # says so, then waits for its input to end
    code = (
        "import signal, sys\nfor s in signal.valid_signals():\n    try: signal.signal(s, signal.SIG_DFL)\n"
        "    except (OSError, ValueError): pass\nprint('ready', flush=True)\nsys.stdin.read()"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        assert atomic.pid_alive(child.pid) is True
    finally:
        child.stdin.close()  # the child exits 0 at end of input, unless a signal (e.g. SIGHUP) ended it first
        assert child.wait() == 0
    assert atomic.pid_alive(2**22 + 12345) is False  # above Linux's largest pid_max

    def eperm(pid, sig):
        raise PermissionError(pid)

    monkeypatch.setattr(os, "kill", eperm)
    assert atomic.pid_alive(os.getpid() + 1) is True


def test_a_recovered_leftover_that_cannot_be_deleted_is_named_not_reported_removed(tmp_path, monkeypatch, capsys):
    """Recovery reports each action; a leftover whose delete fails gets the one warning line naming it,
    never a "removed" line beside it. The recorded complete version is restored all the same."""
    target = tmp_path / "out"
    new, stuck = side(target, "new", "new"), side(target, "tmp", "tmp")
    dead_writers_lock(target, [new, stuck])
    real = atomic.shutil.rmtree

    def refuse_tmp(path, ignore_errors=False, **k):
        if ".tmp-" in Path(path).name:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, ignore_errors=ignore_errors, **k)

    monkeypatch.setattr(atomic.shutil, "rmtree", refuse_tmp)
    assert atomic.recover_interrupted(target) == [f"restored {target} from an interrupted save (new version)"]
    assert (target / "a.txt").read_text() == "new" and stuck.is_dir()
    assert capsys.readouterr().err.splitlines() == [
        f"nexus: warning: could not remove {stuck} (Permission denied); it is not needed, delete it by hand"
    ]


def test_recover_interrupted_finishes_dead_writers_of_the_checkpoint_and_of_its_folder(tmp_path):
    """A reader of run/step-10 finishes the swaps a dead writer of the checkpoint itself recorded and
    those a dead writer of the run folder recorded; \
a lock whose holder ran on another host cannot be checked from here and is left alone."""
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "step-10"
    own = [side(ckpt, "new", "own"), side(ckpt, "old", "own-old")]
    dead_writers_lock(ckpt, own)
    folder_side = side(run / "step-20", "tmp", "folder")  # recorded by the run folder's dead writer
    dead_writers_lock(run, [folder_side])  # (a lock is created whole, holder line first: never torn)
    actions = atomic.recover_interrupted(ckpt)
    assert (ckpt / "a.txt").read_text() == "own" and not folder_side.exists()
    assert sum(a.startswith("restored") for a in actions) == 1 and len(actions) == 3
    assert not lock_file(ckpt).exists() and not lock_file(run).exists()

    other = tmp_path / "other"
    other.mkdir()
    theirs = side(other / "step-5", "tmp", "theirs")
    lock_file(other / "step-5").write_text(
        json.dumps({"pid": 1, "host": "another-host"})
        + "\n"
        + json.dumps({"pending": str(theirs.relative_to(other))})
        + "\n"
    )
    abandoned = side(other, "tmp", "abandoned")
    dead_writers_lock(other, [abandoned])
    assert atomic.recover_interrupted(other / "step-5") == [f"removed {abandoned.name} left by an interrupted save"]
    assert theirs.exists() and lock_file(other / "step-5").exists()

    third = tmp_path / "third"  # the checkpoint has no lock of its own; its folder's writer died
    third.mkdir()
    gone = side(third, "tmp", "gone")
    dead_writers_lock(third, [gone])
    assert atomic.recover_interrupted(third / "step-1") == [f"removed {gone.name} left by an interrupted save"]


def test_guard_output_locks_for_rank0_only_notes_a_takeover_and_names_the_flag_when_refused(
    tmp_path, monkeypatch, capsys
):
    from nexus.config import ConfigError
    from nexus.outdir.guard import CHECKPOINT

    target = tmp_path / "out"
    with atomic.guard_output(target, CHECKPOINT):
        assert lock_file(target).is_file()
    assert capsys.readouterr().err == ""  # nothing to note
    monkeypatch.setenv("RANK", "1")
    with atomic.guard_output(target, CHECKPOINT):
        assert not lock_file(target).exists()  # rank 0 writes and locks; other ranks only check
    monkeypatch.delenv("RANK")

    left = atomic.side_name(target, "tmp", "111-222")
    left.write_text("half")
    dead_writers_lock(target, [left])
    with atomic.guard_output(target, CHECKPOINT):
        err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith(f"nexus: note: took over the lock of {str(target)!r}")
    assert err[1] == f"nexus: note: removed {left.name} left by an interrupted save" and not left.exists()

    lock_file(target).write_text(json.dumps({"pid": 1, "host": "another-host"}) + "\n")
    for check, flag in (({}, "--out"), ({"flag": "--run-dir"}, "--run-dir")):
        with pytest.raises(ConfigError, match=f"^{flag}={str(target)!r} is locked by"):
            atomic.guard_output(target, CHECKPOINT, **check)


def test_written_files_take_the_umasks_mode_and_the_umask_is_left_as_it_was(tmp_path):
    """Files written 0600 (as safetensors does), in a folder write and a single-file write, and a plain
    file all end with the mode `open()` gives under the process's umask: 0666 & ~umask (0644 under 022)."""

    def private_file(p: Path) -> None:
        p.write_bytes(b"w")
        os.chmod(p, 0o600)

    def private(d: Path) -> None:
        private_file(d / "w.bin")
        (d / "sub").mkdir()
        (d / "sub" / "n.txt").write_text("n")

    old = os.umask(0o022)
    try:
        out = atomic.atomic_dir_write(tmp_path / "out", private, "checkpoint")
        atomic.write_text_atomic(tmp_path / "f.txt", "x")
        atomic.write_file_atomic(tmp_path / "p.bin", private_file)
        assert os.umask(0o022) == 0o022  # reading the umask inside the writes put it back
    finally:
        os.umask(old)
    want = 0o666 & ~0o022
    for f in (out / "w.bin", out / "sub" / "n.txt", tmp_path / "f.txt", tmp_path / "p.bin"):
        assert f.stat().st_mode & 0o777 == want, f"{f.name}: {oct(f.stat().st_mode & 0o777)}"


def test_a_folder_write_creates_missing_parents_and_finishes_a_dead_writers_swap_first(tmp_path):
    """atomic_dir_write into a path whose parents do not exist yet creates them; one whose lock a dead
    writer left takes that lock over and removes what it recorded before writing."""
    out = atomic.atomic_dir_write(tmp_path / "a" / "b" / "out", writes("deep"), "checkpoint")
    assert (out / "a.txt").read_text() == "deep"
    target = tmp_path / "out"
    left = side(target, "tmp", "half")
    dead_writers_lock(target, [left])
    atomic.atomic_dir_write(target, writes("fresh"), "checkpoint")
    assert (target / "a.txt").read_text() == "fresh" and not left.exists()
    assert sorted(entries(tmp_path)) == ["a", "out"]


def test_another_rank_replaces_without_a_lock(tmp_path, monkeypatch):
    """torchrun ranks other than 0 take no lock (rank 0 owns the output); a replace there still swaps
    the new version in and leaves nothing beside it."""
    atomic.atomic_dir_write(tmp_path / "out", writes("old"), "checkpoint")
    monkeypatch.setenv("RANK", "1")
    atomic.atomic_dir_write(tmp_path / "out", writes("new"), "checkpoint")
    assert (tmp_path / "out" / "a.txt").read_text() == "new" and entries(tmp_path) == ["out"]


def test_a_folder_write_reuses_the_digests_its_writer_already_has(tmp_path):
    """`hashes` (a checkpoint's meta.json digests) is asked once, for the finished temporary, so the
    manifest does not hash every file again; the digests recorded are the files' real sha256."""
    import hashlib

    asked = []

    def hashes(d: Path) -> dict:
        asked.append(d.name)
        return {"a.txt": hashlib.sha256((d / "a.txt").read_bytes()).hexdigest()}

    out = atomic.atomic_dir_write(tmp_path / "out", writes("v"), "checkpoint", hashes=hashes)
    assert len(asked) == 1 and asked[0].startswith(".out.tmp-")
    assert read_manifest(out)["files"]["a.txt"]["sha256"] == hashlib.sha256(b"v").hexdigest()


def test_a_failing_writers_own_error_is_raised_even_when_its_temporary_cannot_be_removed(tmp_path, monkeypatch):
    """The cleanup after a failed write is best effort: a file in the temporary that cannot be deleted
    (here os.unlink refuses it) must not replace the writer's own error with the cleanup's."""
    real_unlink = os.unlink

    def stuck(path, *a, **kw):
        if str(path).endswith("stuck.bin"):
            raise PermissionError(path)
        return real_unlink(path, *a, **kw)

    def fails(d: Path) -> None:
        (d / "stuck.bin").write_bytes(b"s")
        raise OSError("disk full")

    monkeypatch.setattr(os, "unlink", stuck)
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_dir_write(tmp_path / "out", fails, "checkpoint")
