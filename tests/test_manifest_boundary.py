"""The manifest and the lock journal are a security boundary (issue 42 items 1 and 6): a forged or
corrupted entry never points a delete outside --out, nexus records only what it wrote in this process,
and a file the user appended to or edited after nexus wrote it is theirs (never deleted, never
dropped). Adversarial cases, each fast: forged manifests and journals, adopted names, appended and
edited files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
from test_output_safety import one_line_exit_2

from nexus.cli import main
from nexus.outdir.lock import lock_file
from nexus.outdir.manifest import MARKER, entry_unchanged, ownership_problems, read_manifest

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.steps",
    "4",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.sample_tokens",
    "4",
    "--quiet",
]
DEAD = {"pid": 2**22 + 4321, "host": socket.gethostname(), "proc_start": None}  # a pid no process has


def snapshot(root: Path) -> dict:
    """Every path below root (symlinks not followed) with its bytes' sha256 (None: a folder, 'link': a symlink)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "link" if p.is_symlink() else None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def victim(parent: Path, name: str) -> Path:
    """A user's folder beside the run: what a forged entry aims at."""
    v = parent / name
    (v / "sub").mkdir(parents=True)
    (v / "precious.txt").write_text("years of work")
    (v / "sub" / "thesis.tex").write_text("\\section{results}")
    return v


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "base"
    assert main(["train", *MICRO, "--train.save_every", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture
def run(tmp_path, finished):
    """A private copy of a finished run (its manifest lists relative names, so a copy is a whole run)."""
    r = tmp_path / "work" / "run"
    shutil.copytree(finished, r)
    return r


def forge(run: Path, **entries) -> None:
    m = json.loads((run / MARKER).read_text())
    m["files"].update(entries)
    (run / MARKER).write_text(json.dumps(m))


# ----------------------------------------------------------------------------- forged manifests
@pytest.mark.parametrize("entry", ["../VA2", "{abs}", "sub/../../VA2", "./../VA2", ""])
def test_a_manifest_entry_outside_out_is_refused_and_nothing_is_deleted(capsys, tmp_path, run, entry):
    v = victim(run.parent, "VA2")
    name = str(v) if entry == "{abs}" else entry
    forge(run, **{name: {"dir": "library"}})
    before, before_run = snapshot(v), snapshot(run)
    err = one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--overwrite"], "is not a path inside")
    assert repr(name) in err
    assert snapshot(v) == before and snapshot(run) == before_run


def test_a_forged_entry_in_a_run_killed_before_its_first_checkpoint_is_refused_by_resume_auto(capsys, tmp_path):
    out = tmp_path / "work" / "run"
    assert main(["train", *MICRO, "--train.save_every", "0", "--train.steps", "2", "--out", str(out)]) == 0
    for d in [p for p in out.iterdir() if p.is_dir()]:  # as if killed before its first checkpoint
        shutil.rmtree(d)
    m = json.loads((out / MARKER).read_text())
    m["files"] = {k: v for k, v in m["files"].items() if not isinstance(v, dict) or not v.get("dir")}
    m["files"]["../VA2"] = {"dir": "library"}
    (out / MARKER).write_text(json.dumps(m))
    v = victim(out.parent, "VA2")
    before = snapshot(v)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", out, "--resume", "auto"], "'../VA2'")
    assert snapshot(v) == before


def test_an_entry_reached_through_a_symlink_is_never_nexus_s(capsys, tmp_path, run):
    """`link/precious.txt` recorded with the right bytes, where `link` is a symlink to a user's folder:
    --overwrite must not delete through it."""
    v = victim(tmp_path, "elsewhere")
    (run / "link").symlink_to(v)
    data = (v / "precious.txt").read_bytes()
    forge(
        run,
        **{
            "link/precious.txt": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
            "link": {"dir": "library"},
        },
    )
    assert ("link/precious.txt", "changed") in ownership_problems(run)
    before = snapshot(v)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--overwrite"], "'link'")
    assert snapshot(v) == before and (run / "link").is_symlink()


def test_clear_run_rechecks_the_manifest_it_acts_on(tmp_path, run):
    """The last line of defence: a recorded file changed after the command's check is not deleted."""
    from nexus.config import ConfigError
    from nexus.train.run_dir import clear_run

    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace("steps: 4", "steps: 5"))
    before = snapshot(run)
    with pytest.raises(ConfigError, match="'config.yaml' was changed"):
        clear_run(run)
    assert snapshot(run) == before


# ----------------------------------------------------------------------------- forged journals and lock names
def test_a_forged_journal_entry_outside_out_is_refused_and_the_sibling_survives(capsys, tmp_path, run):
    v = victim(run.parent, "VB13")
    photos = v / ".photos.del-1-1"  # a name that looks like a nexus temporary, in a sibling folder
    photos.mkdir()
    (photos / "img.jpg").write_bytes(b"\xff\xd8 holiday")
    lf = lock_file(run)
    lf.write_text(json.dumps(DEAD) + "\n" + json.dumps({"pending": "VB13/.photos.del-1-1"}) + "\n")
    before = snapshot(v)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--resume", "auto"], "'VB13/.photos.del-1-1'")
    assert snapshot(v) == before and lf.is_file()


@pytest.mark.parametrize(
    "pending",
    [
        "../x/.a.tmp-1-1",
        "/etc/.passwd.tmp-1-1",
        "run/../VB13/.a.tmp-1-1",
        ".other.tmp-1-1",
        "run/notes.txt",
        "run/link/.a.tmp-1-1",
    ],
)
def test_every_journal_name_that_is_no_temporary_of_the_output_is_refused(tmp_path, pending):
    from nexus.config import ConfigError
    from nexus.outdir.lock import acquire_output_lock

    out = tmp_path / "run"
    out.mkdir()
    (out / "link").symlink_to(victim(tmp_path, "VB13"))
    lf = lock_file(out)
    lf.write_text(json.dumps(DEAD) + "\n" + json.dumps({"pending": pending}) + "\n")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="not a temporary of this output"):
        acquire_output_lock(out)
    assert snapshot(tmp_path) == before


def test_a_journal_of_the_outputs_own_temporaries_is_taken_over(tmp_path):
    """The counterpart: names nexus does write for this output (beside it, for itself; below it)."""
    from nexus.outdir.lock import acquire_output_lock

    out = tmp_path / "run"
    out.mkdir()
    names = [".run.tmp-1-1", "run/.step_0000002.del-1-2", "run/sub/.f.tmp-1-3"]
    lock_file(out).write_text(json.dumps(DEAD) + "\n" + "".join(json.dumps({"pending": n}) + "\n" for n in names))
    lk = acquire_output_lock(out)
    try:
        assert lk.taken_over == names
    finally:
        lk.release()


@pytest.mark.parametrize("what", ["file", "folder", "symlink", "empty file"])
def test_a_users_file_under_the_lock_name_is_refused_never_deleted(capsys, tmp_path, what):
    out = tmp_path / "B7"
    lf = lock_file(out)
    if what == "file":
        lf.write_text("my shopping list\n")
    elif what == "empty file":
        lf.touch()
    elif what == "folder":
        lf.mkdir()
        (lf / "keep.txt").write_text("mine")
    else:
        lf.symlink_to(victim(tmp_path, "target"))
    before = snapshot(tmp_path)
    one_line_exit_2(
        capsys, ["train", *MICRO, "--out", out], "is not a nexus lock" if "file" in what else f"is a {what}"
    )
    assert snapshot(tmp_path) == before


def test_the_lock_is_created_whole_holder_line_first(tmp_path, monkeypatch):
    """A lock never exists without its holder line (so a torn one is never taken for nexus's): the name
    appears by a hard link of a complete, fsynced file."""
    from nexus.outdir import lock as L

    seen = []
    real_link = os.link

    def link(src, dst):
        seen.append(Path(src).read_text())
        real_link(src, dst)

    monkeypatch.setattr(L.os, "link", link)
    lk = L.acquire_output_lock(tmp_path / "out")
    try:
        holder = json.loads(seen[0].splitlines()[0])
        assert holder["pid"] == os.getpid() and json.loads(lk.file.read_text().splitlines()[0]) == holder
        assert sorted(p.name for p in tmp_path.iterdir()) == [lk.file.name]  # its temporary is gone
    finally:
        lk.release()


def test_every_journal_line_is_fsynced_before_the_temporary_it_names_exists(tmp_path, monkeypatch):
    """Kills the mutant that drops the journal's fsync: by the time a temporary exists, the journal line
    naming it has reached the disk (fsync of the lock file holding it)."""
    from nexus import atomic
    from nexus.outdir import lock as L

    synced: dict[str, str] = {}
    real_fsync = os.fsync

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(L.SUFFIX):
            synced[path] = Path(path).read_text()
        real_fsync(fd)

    monkeypatch.setattr(L.os, "fsync", fsync)
    final = tmp_path / "out"
    checked = []

    def write(tmp: Path) -> None:
        (tmp / "a.txt").write_text("a")
        journal = synced.get(str(L.lock_file(final)), "")
        checked.append(json.dumps({"pending": os.path.relpath(tmp, tmp_path)}) in journal)

    atomic.atomic_dir_write(final, write, "analysis")
    assert checked == [True]


# ----------------------------------------------------------------------------- never adopting a name
def test_a_users_file_in_a_folder_named_tensorboard_is_not_adopted_on_resume(capsys, tmp_path, run):
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "mylog.txt").write_text("my notes")
    assert main(["train", *MICRO, "--train.steps", "6", "--out", str(run), "--resume", "auto"]) == 0
    assert "tensorboard" not in read_manifest(run)["files"]
    one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--overwrite"], "'tensorboard' was not written by nexus")
    assert (run / "tensorboard" / "mylog.txt").read_text() == "my notes"


@pytest.mark.parametrize("kind", ["folder", "symlink"])
def test_a_run_never_logs_into_a_users_tensorboard_name(capsys, tmp_path, run, kind):
    target = victim(tmp_path, "mine")
    if kind == "folder":
        (run / "tensorboard").mkdir()
    else:
        (run / "tensorboard").symlink_to(target)
    before = snapshot(tmp_path)
    one_line_exit_2(
        capsys,
        [
            "train",
            *MICRO,
            "--train.steps",
            "6",
            "--out",
            run,
            "--resume",
            "auto",
            "--train.log_to",
            "[jsonl, tensorboard]",
        ],
        "'tensorboard' was not written by nexus",
    )
    assert {k: v for k, v in snapshot(tmp_path).items() if k.startswith(("mine", "work/run/tensorboard"))} == {
        k: v for k, v in before.items() if k.startswith(("mine", "work/run/tensorboard"))
    }
    assert "tensorboard" not in read_manifest(run)["files"]


def test_a_library_entry_on_a_symlink_is_not_nexus_s(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "tb").symlink_to(tmp_path / "real")
    assert not entry_unchanged(tmp_path / "tb", {"dir": "library"})
    assert entry_unchanged(tmp_path / "real", {"dir": "library"})


# ----------------------------------------------------------------------------- appended and edited files
def test_a_line_appended_to_metrics_is_kept_by_overwrite_and_by_resume_auto(capsys, tmp_path, run):
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "note": "my own evaluation"}\n')
    before = snapshot(run)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--overwrite"], "'metrics.jsonl' was changed")
    one_line_exit_2(
        capsys, ["train", *MICRO, "--train.steps", "6", "--out", run, "--resume", "auto"], "'metrics.jsonl' was changed"
    )
    assert snapshot(run) == before


def test_metrics_are_nexus_s_when_they_hold_the_recorded_bytes_then_part_of_the_line_being_appended(tmp_path):
    """What a kill mid-append leaves (the recorded bytes, then a prefix of the announced line) is
    nexus's; anything past that line, or any other tail, is not."""
    f = tmp_path / "metrics.jsonl"
    head, line = b'{"step": 1}\n', '{"step": 2, "loss": 3.5}\n'
    entry = {"size": len(head), "sha256": hashlib.sha256(head).hexdigest(), "grows": True, "appending": line}
    for tail, ours in [
        (b"", True),
        (line[:7].encode(), True),
        (line.encode(), True),
        (line.encode() + b"x", False),
        (b'{"step": 9}\n', False),
        (b"\n", False),
    ]:
        f.write_bytes(head + tail)
        assert entry_unchanged(f, entry) is ours, tail
    f.write_bytes(head + line.encode())
    assert not entry_unchanged(f, {k: v for k, v in entry.items() if k != "appending"})  # no line announced


def test_a_same_size_edit_of_config_yaml_is_refused_by_overwrite(capsys, tmp_path, run):
    """Kills the mutant that reduces the manifest's check to the size."""
    text = (run / "config.yaml").read_text()
    edited = text.replace("steps: 4", "steps: 7")
    assert edited != text and len(edited) == len(text)
    (run / "config.yaml").write_text(edited)
    before = snapshot(run)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--overwrite"], "'config.yaml' was changed")
    assert snapshot(run) == before


def test_a_users_file_whose_name_starts_like_a_recorded_folder_is_reported(capsys, tmp_path, run):
    """Kills the mutant whose prefix match lets `checkpoint_notes.txt` hide behind `checkpoint/`."""
    (run / "checkpoint_notes.txt").write_text("lr too high after step 3")
    assert ("checkpoint_notes.txt", "not written by nexus") in ownership_problems(run)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", run, "--overwrite"], "'checkpoint_notes.txt'")
    assert (run / "checkpoint_notes.txt").read_text() == "lr too high after step 3"


def test_an_edited_experiment_file_is_refused_before_any_training(tmp_path):
    from nexus.atomic import write_text_atomic
    from nexus.config import ConfigError
    from nexus.experiments.runs import experiment_dir, record_outputs

    out = tmp_path / "exp"
    with experiment_dir(out):
        write_text_atomic(out / "report.md", "| preset | loss |\n")
        record_outputs(out, ["report.md"])
    (out / "report.md").write_text("| preset | loss |\nmy conclusions\n")
    with pytest.raises(ConfigError, match="'report.md' was changed"):
        with experiment_dir(out):
            pass
    assert (out / "report.md").read_text().endswith("my conclusions\n")


def test_an_atomic_write_never_replaces_a_recorded_file_the_user_edited(tmp_path):
    from nexus.atomic import write_text_atomic
    from nexus.config import ConfigError
    from nexus.outdir import record

    record(tmp_path, "experiment")
    write_text_atomic(tmp_path / "report.md", "nexus's table\n", enter=True)
    assert "report.md" in read_manifest(tmp_path)["files"]
    (tmp_path / "report.md").write_text("edited\n")
    with pytest.raises(ConfigError, match="was changed since nexus wrote it"):
        write_text_atomic(tmp_path / "report.md", "new table\n")
    assert (tmp_path / "report.md").read_text() == "edited\n"


def test_a_lock_temporary_left_by_a_killed_process_is_removed_and_a_look_alike_is_not(tmp_path):
    from nexus.outdir.lock import acquire_output_lock

    out = tmp_path / "out"
    lf = lock_file(out)
    dead = lf.with_name(f"{lf.name}.tmp-{DEAD['pid']}")  # killed between writing its holder line and the link
    dead.write_text(json.dumps(DEAD) + "\n")
    mine = lf.with_name(f"{lf.name}.tmp-{DEAD['pid'] + 1}")  # the user's, or not provably that process's
    mine.write_text(json.dumps(DEAD) + "\n")
    lk = acquire_output_lock(out)
    lk.release()
    assert not dead.exists() and mine.read_text() == json.dumps(DEAD) + "\n"
