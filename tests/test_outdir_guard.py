"""The output guard (nexus/outdir/guard.py) through its own functions, on folders built here with the
outdir API: no training, no CLI (about a second in all). Which paths a command may write, which outputs
it may replace or continue, what a dead writer's journal lets it ignore, and where nexus refuses to write
at all (issue 42 item 6: outdir's mutation survivors)."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest

import nexus.outdir.guard as guard
from nexus.config import ConfigError
from nexus.outdir.guard import (
    ANALYSIS,
    CHECKPOINT,
    TERNARY,
    TRAIN_RUN,
    check_output,
    check_usable,
    claim_directory,
    is_inside,
    output_kind,
    recorded_temporaries,
    refuse_unproven,
    write_marker,
)
from nexus.outdir.lock import lock_file
from nexus.outdir.manifest import read_manifest, record

HOST = socket.gethostname()
DEAD = 2**22 + 4321


def output(d: Path, kind: str, **files: str) -> Path:
    """A nexus output of `kind` holding `files` (name -> text), each recorded."""
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    write_marker(d, kind)
    record(d, kind, files=list(files))
    return d


def dead_lock(target: Path, *pending: str) -> Path:
    lf = lock_file(target)
    lf.write_text(
        "".join(json.dumps(r) + "\n" for r in [{"pid": DEAD, "host": HOST}, *({"pending": p} for p in pending)])
    )
    return lf


def refusal(fn, *args, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        fn(*args, **kw)
    return str(e.value)


# ----------------------------------------------------------------------------- what is there
def test_the_kind_of_an_output_is_its_manifests_or_a_ternary_files_header(tmp_path):
    import torch
    from safetensors.torch import save_file

    assert output_kind(output(tmp_path / "a", ANALYSIS)) == ANALYSIS
    (tmp_path / "plain").mkdir()
    assert output_kind(tmp_path / "plain") is None and output_kind(tmp_path / "missing") is None
    save_file({"w": torch.zeros(2)}, str(tmp_path / "t.safetensors"), metadata={"format": "nexus-ternary-v1"})
    save_file({"w": torch.zeros(2)}, str(tmp_path / "o.safetensors"), metadata={"format": "pt"})
    save_file({"w": torch.zeros(2)}, str(tmp_path / "n.safetensors"))
    (tmp_path / "text.safetensors").write_text("not a safetensors file")
    assert output_kind(tmp_path / "t.safetensors") == TERNARY
    assert [output_kind(tmp_path / n) for n in ("o.safetensors", "n.safetensors", "text.safetensors")] == [None] * 3


def test_is_inside_means_the_same_path_or_below_it_with_links_resolved(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "ab").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert is_inside(tmp_path / "a", tmp_path / "a") and is_inside(tmp_path / "a" / "b", tmp_path / "a")
    assert is_inside(tmp_path / "link" / "b", tmp_path / "a") and is_inside(tmp_path / "a" / "new", tmp_path / "link")
    assert not is_inside(tmp_path / "a", tmp_path / "a" / "b") and not is_inside(tmp_path / "ab", tmp_path / "a")


# ----------------------------------------------------------------------------- a dead writer's temporaries
def test_the_temporaries_a_dead_writer_recorded_below_the_output_are_known_and_only_those(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    assert recorded_temporaries(out) == set()  # no lock
    dead_lock(out, "run/.a.tmp-1-2", "run/sub/.b.new-3-4", ".run.old-5-6")  # the last lies beside the output
    assert recorded_temporaries(out) == {".a.tmp-1-2", "sub/.b.new-3-4"}
    lock_file(out).write_text(json.dumps({"pid": os.getpid(), "host": HOST}) + '\n{"pending": "run/.a.tmp-1-2"}\n')
    assert recorded_temporaries(out) == set()  # a live writer's: not ours to judge
    lock_file(out).write_text(json.dumps({"pid": DEAD, "host": "node-17"}) + '\n{"pending": "run/.a.tmp-1-2"}\n')
    assert recorded_temporaries(out) == set()  # another host's: cannot be checked


def test_a_lock_name_that_is_no_lock_or_a_journal_naming_outside_is_refused_by_the_flag(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    lock_file(out).symlink_to(tmp_path / "nowhere")  # a dangling link under the lock's name
    assert "is a symlink" in refusal(recorded_temporaries, out, "--save")
    lock_file(out).unlink()
    dead_lock(out, "../VB13/.photos.del-1-1")
    assert refusal(recorded_temporaries, out, "--save").startswith(f"--save={str(out)!r}: the lock ")


def test_refuse_unproven_names_the_first_thing_and_counts_the_rest(tmp_path):
    out = output(tmp_path / "run", TRAIN_RUN, **{"config.yaml": "a"})
    refuse_unproven(out, "--out='run'")  # all of it nexus's
    (out / "config.yaml").write_text("b")
    assert refusal(refuse_unproven, out, "--out='run'") == (
        "--out='run': 'config.yaml' was changed since nexus wrote it (valid: move it out of the folder, "
        "or another output path; --overwrite replaces only files nexus wrote and never deletes anything else)"
    )
    (out / "config.yaml").write_text("a")
    (out / "x.txt").write_text("mine")
    (out / "y.txt").write_text("mine")
    assert refusal(refuse_unproven, out, "S").startswith("S: 'x.txt' and 1 more was not written by nexus (valid:")
    (out / "y.txt").unlink()
    assert refusal(refuse_unproven, out, "S").startswith("S: 'x.txt' was not written by nexus (valid:")
    (out / "x.txt").unlink()
    (out / ".c.tmp-7-8").write_text("a dead writer's half-written file")
    dead_lock(out, "run/.c.tmp-7-8")
    refuse_unproven(out, "S")  # recorded by a dead writer: recovered under the lock, not the user's


# ----------------------------------------------------------------------------- check_output
def test_a_new_or_empty_path_may_receive_any_output(tmp_path):
    assert check_output(tmp_path / "new", TRAIN_RUN) == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert check_output(str(tmp_path / "empty"), CHECKPOINT) == tmp_path / "empty"
    assert not (tmp_path / "new").exists()  # checks only read


def test_an_output_of_the_same_kind_is_replaced_or_continued_only_when_asked(tmp_path):
    out = output(tmp_path / "run", TRAIN_RUN, **{"config.yaml": "a"})
    assert refusal(check_output, out, TRAIN_RUN, flag="--save") == (
        f"--save={str(out)!r} already holds a nexus train run output "
        "(valid: another --save, or --overwrite to replace it)"
    )
    assert check_output(out, TRAIN_RUN, overwrite=True) == out and check_output(out, TRAIN_RUN, resume=True) == out
    (out / "mine.txt").write_text("x")
    assert refusal(check_output, out, TRAIN_RUN, overwrite=True, flag="--save").startswith(
        f"--save={str(out)!r}: 'mine.txt' was not written by nexus"
    )
    assert check_output(out, TRAIN_RUN, resume=True) == out  # continuing in place deletes nothing


def test_another_kind_or_a_folder_without_a_manifest_is_never_taken(tmp_path):
    out = output(tmp_path / "a", ANALYSIS)
    (out / "f").write_text("x")
    assert refusal(check_output, out, CHECKPOINT, overwrite=True).startswith(
        f"--out={str(out)!r} already exists and is a nexus analysis output (valid: a new or empty directory, or an "
        "earlier nexus checkpoint output;"
    )
    assert check_output(out, CHECKPOINT, kinds=(TRAIN_RUN, ANALYSIS), resume=True) == out
    user = tmp_path / "user"
    user.mkdir()
    (user / "f").write_text("x")
    assert "is not a nexus output (it has no nexus manifest)" in refusal(check_output, user, TRAIN_RUN, overwrite=True)
    f = tmp_path / "model.safetensors"
    f.write_text("not a ternary export")
    assert "a new or empty file path" in refusal(check_output, f, TERNARY, file=True, overwrite=True)


def test_a_run_from_before_manifests_is_told_how_to_continue_in_a_new_folder(tmp_path):
    old = tmp_path / "old"
    (old / "checkpoint").mkdir(parents=True)
    (old / "checkpoint" / "meta.json").write_text("{}")
    hint = (
        f"; if it is a run from a nexus release before manifests, continue it in a new folder: --resume "
        f"{old / 'checkpoint'} --out NEW_DIR"
    )
    assert refusal(check_output, old, TRAIN_RUN, resume=True).endswith(hint)
    plain = "nexus never replaces what it did not write)"
    assert refusal(check_output, old, CHECKPOINT, resume=True).endswith(plain)  # only a train run has a hint
    (old / "checkpoint" / "meta.json").unlink()
    assert refusal(check_output, old, TRAIN_RUN, resume=True).endswith(plain)
    (old / "checkpoint" / "meta.json").write_text("{}")
    write_marker(old, ANALYSIS)  # a nexus output of another kind: no hint either
    assert refusal(check_output, old, TRAIN_RUN, resume=True).endswith(plain)


def test_an_output_inside_a_source_or_holding_one_is_refused(tmp_path):
    src = output(tmp_path / "ck", CHECKPOINT, **{"model.bin": "w"})
    assert refusal(check_output, src / "grown", CHECKPOINT, sources=[src]) == (
        f"--out={str(src / 'grown')!r} is inside the source {str(src)!r} (valid: a path outside the source; the source "
        "stays untouched)"
    )
    assert refusal(check_output, tmp_path, CHECKPOINT, sources=[None, src]).startswith(
        f"--out={str(tmp_path)!r} contains the source {str(src)!r}"
    )
    assert check_output(tmp_path / "other", CHECKPOINT, sources=[None, src]) == tmp_path / "other"


def test_a_ternary_export_file_is_replaced_without_a_folder_check(tmp_path):
    import torch
    from safetensors.torch import save_file

    f = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(f), metadata={"format": "nexus-ternary-v1"})
    assert check_output(f, TERNARY, file=True, overwrite=True) == f


def test_claim_directory_creates_the_output_with_a_manifest_of_its_kind_and_keeps_an_existing_one(tmp_path):
    out = claim_directory(tmp_path / "a" / "exp", "experiment")
    assert out == tmp_path / "a" / "exp" and read_manifest(out)["kind"] == "experiment"
    record(out, "experiment", library_dirs=["tb"])
    assert claim_directory(out, "experiment", resume=True) == out
    assert read_manifest(out)["files"] == {"tb": {"dir": "library", "files": {}}}  # the manifest was not replaced
    write_marker(out, ANALYSIS)
    assert read_manifest(out)["kind"] == "experiment"


# ----------------------------------------------------------------------------- where nexus may write
def test_the_filesystem_of_a_path_is_that_of_the_longest_mount_point_above_it(monkeypatch):
    mounts = (
        "short\nrootfs / ext4 rw 0 0\nsrv /data nfs rw 0 0\nx /data/deep xfs rw 0 0\nshm /data\\040x tmpfs rw 0 0\n"
        "three /three btrfs\n"
    )  # a line of fewer than 3 fields says nothing; 3 are enough
    real = Path.read_text
    monkeypatch.setattr(
        Path, "read_text", lambda self, *a, **k: mounts if str(self) == "/proc/self/mounts" else real(self, *a, **k)
    )
    fs = guard._filesystem_type
    assert [fs(Path(p)) for p in ("/data/deep/f", "/data/deeper", "/data", "/data x/f", "/other", "/", "/three/a")] == [
        "xfs",
        "nfs",
        "nfs",
        "tmpfs",
        "ext4",
        "ext4",
        "btrfs",
    ]
    mounts += "ram /data tmpfs rw 0 0\n"  # mounted over /data later: the nfs below it is hidden
    assert fs(Path("/data/f")) == "tmpfs" and fs(Path("/data/deep/f")) == "xfs"

    def unreadable(self, *a, **k):
        raise PermissionError(self)

    monkeypatch.setattr(Path, "read_text", unreadable)
    assert fs(Path("/data")) is None


def test_the_kernels_own_filesystems_are_refused_and_a_ram_disk_is_not(tmp_path, monkeypatch):
    assert refusal(check_usable, Path("/proc/self/nexus-out")) == (
        "--out='/proc/self/nexus-out' is on the kernel filesystem proc (valid: a path on a disk or a RAM disk such as "
        "/dev/shm)"
    )
    monkeypatch.setattr(guard, "_filesystem_type", lambda p: None)  # /proc/self/mounts unreadable: /proc, /sys by name
    assert "kernel filesystem proc/sys" in refusal(check_usable, Path("/sys/kernel/x"), "--save")
    assert "kernel filesystem proc/sys" in refusal(check_usable, Path("/proc"))
    check_usable(tmp_path / "out")
    monkeypatch.undo()
    assert "kernel filesystem proc " in refusal(check_usable, Path("/proc"))  # the mount point itself
    monkeypatch.setattr(guard, "_filesystem_type", lambda p: "tmpfs")
    check_usable(tmp_path / "out")


def test_names_too_long_for_the_filesystem_are_refused(tmp_path):
    assert refusal(check_usable, tmp_path / ("n" * 256)).endswith(
        "is 256 bytes long (valid: names of at most 255 bytes)"
    )
    check_usable(tmp_path / ("n" * 255))
    assert refusal(check_usable, tmp_path / ("\u00e9" * 128)).endswith(
        "is 256 bytes long (valid: names of at most 255 bytes)"
    )  # counted in bytes
    deep = tmp_path.joinpath(*["d" * 200] * 21)
    assert refusal(check_usable, deep).endswith("is too long for the filesystem (valid: a shorter path)")


def test_symlink_loops_and_dangling_links_are_refused(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert refusal(check_usable, tmp_path / "loop") == (
        f"--out={str(tmp_path / 'loop')!r} is a symlink loop (valid: a path that resolves to a directory)"
    )
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert refusal(check_usable, tmp_path / "dangling").startswith(
        f"--out={str(tmp_path / 'dangling')!r} is a symlink to {str(tmp_path / 'nowhere')!r}, which does not exist"
    )
    assert refusal(check_usable, tmp_path / "dangling" / "out").startswith(
        f"--out={str(tmp_path / 'dangling' / 'out')!r} lies below {str(tmp_path / 'dangling')!r}, a symlink to "
    )
    (tmp_path / "good").mkdir()
    (tmp_path / "ok").symlink_to(tmp_path / "good")
    check_usable(tmp_path / "ok" / "out")


def test_a_path_that_is_not_utf8_is_refused_naming_the_byte(tmp_path):
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/run\xff"))
    assert refusal(check_usable, bad) == (
        f"--out='{tmp_path}/run\\xff' is not valid UTF-8 (byte b'\\xff') (valid: a path whose names are UTF-8 text)"
    )


def test_a_file_where_a_folder_is_needed_the_reverse_and_a_path_below_a_file_are_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    assert refusal(check_usable, tmp_path / "f") == f"--out={str(tmp_path / 'f')!r} is a file (valid: a directory path)"
    assert refusal(check_usable, tmp_path / "d", file=True) == (
        f"--out={str(tmp_path / 'd')!r} is a directory (valid: a file path)"
    )
    check_usable(tmp_path / "f", file=True)
    check_usable(tmp_path / "d")
    assert refusal(check_usable, tmp_path / "f" / "a" / "out") == (
        f"--out={str(tmp_path / 'f' / 'a' / 'out')!r} lies below the file {str(tmp_path / 'f')!r} (valid: a path whose "
        "parents are directories)"
    )


def test_writability_is_tried_in_the_output_and_in_the_nearest_existing_folder_above_it(tmp_path, monkeypatch):
    tried = []
    real = guard.tempfile.mkdtemp

    def mkdtemp(prefix, dir):
        tried.append(Path(dir))
        if Path(dir).name == "ro":
            raise OSError(errno.EROFS, "Read-only file system")
        return real(prefix=prefix, dir=dir)

    monkeypatch.setattr(guard.tempfile, "mkdtemp", mkdtemp)
    (tmp_path / "out").mkdir()
    check_usable(tmp_path / "out")
    assert tried == [tmp_path / "out", tmp_path]
    tried.clear()
    check_usable(tmp_path / "a" / "b", file=True)
    assert tried == [tmp_path]
    (tmp_path / "ro").mkdir()
    assert refusal(check_usable, tmp_path / "ro" / "new", "--save") == (
        f"--save={str(tmp_path / 'ro' / 'new')!r}: cannot write in {str(tmp_path / 'ro')!r} (Read-only file system) "
        "(valid: a writable directory)"
    )
    assert list((tmp_path / "out").iterdir()) == []  # the probe is removed again


# ----------------------------------------------------------------------------- after the first mutation run
def test_an_unusable_path_is_refused_under_the_callers_flag(tmp_path):
    (tmp_path / "f").write_text("x")
    assert refusal(check_output, tmp_path / "f", TRAIN_RUN, flag="--save").startswith(
        f"--save={str(tmp_path / 'f')!r} is a file"
    )
    assert refusal(claim_directory, tmp_path / "f", TRAIN_RUN, flag="--save").startswith("--save=")
    assert refusal(claim_directory, tmp_path / "f", TRAIN_RUN).startswith(f"--out={str(tmp_path / 'f')!r} is a file")


def test_claim_directory_replaces_or_continues_an_output_only_when_asked(tmp_path):
    out = output(tmp_path / "run", TRAIN_RUN, **{"config.yaml": "a"})
    assert refusal(claim_directory, out, TRAIN_RUN) == (
        f"--out={str(out)!r} already holds a nexus train run output "
        "(valid: another --out, or --overwrite to replace it)"
    )
    assert claim_directory(out, TRAIN_RUN, overwrite=True) == out
    (out / "mine.txt").write_text("x")
    assert "'mine.txt' was not written by nexus" in refusal(claim_directory, out, TRAIN_RUN, overwrite=True)
    assert claim_directory(out, TRAIN_RUN, resume=True) == out and (out / "mine.txt").is_file()


def test_a_dead_writers_lock_is_refused_under_the_callers_flag_naming_the_lock(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    lock_file(out).mkdir()
    assert refusal(recorded_temporaries, out) == (
        f"--out={str(out)!r}: its lock name {str(lock_file(out))!r} is a folder "
        "(valid: move it away, or another output path; nexus never deletes what it did not write)"
    )
    lock_file(out).rmdir()
    dead_lock(out, "../x/.y.tmp-1-2")
    assert refusal(recorded_temporaries, out, "--save").startswith(
        f"--save={str(out)!r}: the lock {str(lock_file(out))!r} records '../x/.y.tmp-1-2'"
    )


def test_paths_are_refused_from_linuxs_path_max_of_4096_bytes_on(tmp_path):
    # the path as given is short (a link to a deep folder): only the resolved path's length can tell
    base = tmp_path.resolve()
    deep, parts = base, []
    while len(os.fsencode(str(deep))) < 3900 - 201:
        parts.append("d" * 200)
        deep = base.joinpath(*parts)
    deep = deep / ("e" * (3900 - len(os.fsencode(str(deep))) - 1))
    deep.mkdir(parents=True)
    assert len(os.fsencode(str(deep))) == 3900
    (tmp_path / "l").symlink_to(deep)
    longest = tmp_path / "l" / ("n" * (4095 - 3900 - 1))  # 4095 bytes resolved: the longest with its terminating NUL
    assert len(os.fsencode(str(longest.resolve()))) == 4095
    check_usable(longest)
    too_long = tmp_path / "l" / ("n" * (4096 - 3900 - 1))
    assert refusal(check_usable, too_long).endswith("is too long for the filesystem (valid: a shorter path)")


def test_a_probe_left_by_a_kill_is_a_hidden_folder_named_for_nexus(tmp_path, monkeypatch):
    removed, real_rmdir = [], os.rmdir
    monkeypatch.setattr(guard.os, "rmdir", lambda d: (removed.append(Path(d).name), real_rmdir(d)))
    check_usable(tmp_path / "new")
    assert len(removed) == 1 and removed[0].startswith(".nexus-probe-")


# ----------------------------------------------------------------------------- since the rebase (main's new code)
def test_an_output_a_dead_writer_renamed_into_place_is_known_by_its_ready_hash(tmp_path):
    import hashlib

    out = tmp_path / "run"
    out.mkdir()
    (out / "loss_curve.csv").write_text("step,loss\n")
    digest = hashlib.sha256(b"step,loss\n").hexdigest()
    lf = dead_lock(out, "run/.loss_curve.csv.tmp-1-2", "run/.other.csv.tmp-1-2", "run/.kept.csv.tmp-1-2")
    with open(lf, "a") as f:
        for name, h in [("loss_curve.csv", digest), ("other.csv", digest), ("kept.csv", digest)]:
            f.write(json.dumps({"ready": f"run/.{name}.tmp-1-2", "sha256": h}) + "\n")
    (out / "other.csv").write_text("not what was recorded")
    (out / "kept.csv").write_text("step,loss\n")
    (out / ".kept.csv.tmp-1-2").write_text("the temporary is still there: the rename never happened")
    assert recorded_temporaries(out) == {
        ".loss_curve.csv.tmp-1-2",
        "loss_curve.csv",
        ".other.csv.tmp-1-2",
        ".kept.csv.tmp-1-2",
    }


def test_a_folder_holding_only_a_dead_writers_manifest_temporary_counts_as_empty(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / f".nexus-run.tmp-{DEAD}").write_text('{"created": "2026')
    assert check_output(out, TRAIN_RUN) == out
    (out / f".nexus-run.tmp-{DEAD + 1}").write_text("the user's notes")
    assert "is not a nexus output" in refusal(check_output, out, TRAIN_RUN)
