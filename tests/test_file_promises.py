"""What nexus promises about your files (issue 28; docs/files.md lists each promise with its test):
ownership proven by the manifest, --overwrite replacing only recorded files, recovery only of recorded
names, one writer per output."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from test_output_safety import MICRO, make_victim, one_line_exit_2, snapshot

from nexus.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("promises") / "base"
    assert main(["train", *MICRO, "--train.save_every", "2", "--out", str(out), "--quiet"]) == 0
    return out


def lookalike(root: Path, files: dict[str, str]) -> Path:
    """A user's own folder that happens to hold files named like a nexus output's."""
    v = root / "mine"
    v.mkdir()
    for name, text in files.items():
        (v / name).write_text(text)
    return v


def user_run_lookalike(root: Path) -> Path:
    return lookalike(root, {"metrics.jsonl": '{"step": 1, "loss": 2.0}\n', "config.yaml": "my: experiment\n"})


def user_checkpoint_lookalike(root: Path) -> Path:
    return lookalike(root, {"config.json": '{"my": "model"}', "meta.json": '{"format_version": 1, "notes": "mine"}'})


# ----------------------------------------------------------------------------- ownership is proven
def test_train_overwrite_never_takes_a_folder_of_run_like_file_names(capsys, tmp_path):
    v = user_run_lookalike(tmp_path)
    before = snapshot(v)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", v, "--overwrite", "--quiet"], "not a nexus output")
    one_line_exit_2(capsys, ["train", *MICRO, "--out", v, "--resume", "auto", "--quiet"], "not a nexus output")
    assert snapshot(v) == before


def test_a_run_from_before_manifests_is_left_alone_and_continued_into_a_new_folder(capsys, tmp_path, run):
    """A run written before manifests has none, so it is a folder like any user's: resuming in place is
    refused, untouched, with the way to continue it; that way works and leaves the old run as it was."""
    import shutil

    old = tmp_path / "old-run"
    shutil.copytree(run, old)
    for marker in old.rglob(".nexus-*"):
        marker.unlink()
    before = snapshot(old)
    err = one_line_exit_2(capsys, ["train", "--out", old, "--resume", "auto", "--quiet"], "not a nexus output")
    assert f"--resume {old / 'checkpoint'} --out NEW_DIR" in err
    assert snapshot(old) == before
    # continued at its last step (nothing left to train: the curve of a run with no training records
    # once raised IndexError), then with more steps
    assert main(["train", "--resume", str(old / "checkpoint"), "--out", str(tmp_path / "new"), "--quiet"]) == 0
    assert (
        main(
            [
                "train",
                "--resume",
                str(old / "checkpoint"),
                "--out",
                str(tmp_path / "longer"),
                "--quiet",
                "--train.steps",
                "6",
            ]
        )
        == 0
    )
    assert snapshot(old) == before


def test_env_entry_never_writes_into_a_folder_of_run_like_file_names(capsys, tmp_path, monkeypatch):
    from nexus.cli import env_train

    v = user_run_lookalike(tmp_path)
    before = snapshot(v)
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    env = {
        "MODEL_SIZE": "micro",
        "TOTAL_STEPS": "2",
        "DATASET": "embedded",
        "MAX_SAMPLES": "20",
        "SEQ_LEN": "16",
        "BATCH_SIZE": "2",
        "OUTPUT_DIR": str(v),
    }
    assert env_train.main([], env) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a nexus output" in err, err
    assert snapshot(v) == before


@pytest.mark.parametrize("cmd", ["grow", "import"])
def test_checkpoint_writers_never_take_a_folder_of_checkpoint_like_file_names(capsys, tmp_path, run, cmd):
    v = user_checkpoint_lookalike(tmp_path)
    before = snapshot(v)
    if cmd == "grow":
        argv = ["grow", "--checkpoint", run / "checkpoint", "--width.hidden", "48", "--no-verify", "--out", v]
    else:
        from hf_helpers import tiny_hf

        tiny_hf("llama").save_pretrained(tmp_path / "hf")
        capsys.readouterr()  # transformers' progress bars
        argv = ["import", "--hf", tmp_path / "hf", "--out", v]
    one_line_exit_2(capsys, argv + ["--overwrite"], "not a nexus output")
    assert snapshot(v) == before


def _earlier_output(tmp_path: Path, run: Path, cmd: str) -> tuple[list, Path]:
    out = tmp_path / "out"
    argv = {
        "train": ["train", *MICRO, "--out", out, "--quiet"],
        "grow": ["grow", "--checkpoint", run / "checkpoint", "--width.hidden", "48", "--no-verify", "--out", out],
        "export-hf": ["export", "--checkpoint", run / "checkpoint", "--format", "hf", "--out", out],
        "analyze": ["analyze", "params", "--preset", "baseline-micro", "--out", out],
    }[cmd]
    assert main([str(a) for a in argv]) == 0
    return argv, out


@pytest.mark.parametrize("cmd", ["train", "grow", "export-hf", "analyze"])
def test_overwrite_refuses_alike_in_every_writer_when_a_user_file_was_added(capsys, tmp_path, run, cmd):
    argv, out = _earlier_output(tmp_path, run, cmd)
    (out / "NOTES.md").write_text("what I learned")
    before = snapshot(out)
    one_line_exit_2(capsys, argv + ["--overwrite"], "'NOTES.md' was not written by nexus")
    assert snapshot(out) == before
    (out / "NOTES.md").unlink()  # moved away by its owner: now --overwrite replaces the output
    assert main([str(a) for a in argv + ["--overwrite"]]) == 0


@pytest.mark.parametrize("cmd", ["train", "analyze"])
def test_overwrite_refuses_when_a_file_nexus_wrote_was_changed(capsys, tmp_path, run, cmd):
    argv, out = _earlier_output(tmp_path, run, cmd)
    changed = out / ("config.yaml" if cmd == "train" else "params.json")
    changed.write_text(changed.read_text() + "\n# my edit\n")
    before = snapshot(out)
    one_line_exit_2(capsys, argv + ["--overwrite"], f"{changed.name!r} was changed since nexus wrote it")
    assert snapshot(out) == before


def test_every_output_carries_a_manifest_of_what_nexus_wrote(tmp_path, run):
    from nexus.outdir.manifest import ownership_problems, read_manifest

    for d in (run, run / "checkpoint", run / "step_0000002"):
        assert read_manifest(d) is not None and ownership_problems(d) == [], d
    m = read_manifest(run / "checkpoint")
    on_disk = {
        p.relative_to(run / "checkpoint").as_posix(): p.stat().st_size
        for p in (run / "checkpoint").rglob("*")
        if p.is_file() and p.name != ".nexus-run"
    }
    assert {k: v["size"] for k, v in m["files"].items()} == on_disk
    assert set(read_manifest(run)["files"]) >= {"config.yaml", "metrics.jsonl", "checkpoint", "step_0000002"}


def test_resume_auto_touches_nothing_in_a_folder_before_knowing_it_is_a_run(capsys, tmp_path):
    v = make_victim(tmp_path)
    (v / ".thesis.tex.tmp-99999999-1").write_text("a user's editor backup")
    (v / ".data.old-99999999-1").mkdir()
    (v / ".data.old-99999999-1" / "x.csv").write_text("1,2")
    before = snapshot(v)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", v, "--resume", "auto", "--quiet"], "not a nexus output")
    assert snapshot(v) == before


def test_resume_in_place_never_overwrites_a_users_config_yaml(capsys, tmp_path, run):
    grown = tmp_path / "grown"
    assert (
        main(
            [
                "grow",
                "--checkpoint",
                str(run / "checkpoint"),
                "--width.hidden",
                "48",
                "--no-verify",
                "--out",
                str(grown),
            ]
        )
        == 0
    )
    (grown / "config.yaml").write_text("my notes on this checkpoint\n")
    before = snapshot(grown)
    one_line_exit_2(
        capsys, ["train", "--resume", grown, "--train.steps", "6", "--quiet"], "'config.yaml' was not written"
    )
    assert snapshot(grown) == before


def test_recovery_touches_only_names_nexus_recorded(tmp_path, run):
    """A dead writer's lock journal names its temporaries; a look-alike name it did not record stays."""
    import shutil

    from nexus.outdir.lock import lock_file

    r = tmp_path / "r"
    shutil.copytree(run, r)
    lookalike = r / ".checkpoint.tmp-99999999-7"
    lookalike.mkdir()
    (lookalike / "mine.txt").write_text("not nexus's")
    recorded = r / ".step_0000004.tmp-99999999-8"
    recorded.mkdir()
    (recorded / "model.safetensors").write_bytes(b"half")
    lock_file(r).write_text(
        json.dumps({"pid": 99999999, "host": socket.gethostname()})
        + "\n"
        + json.dumps({"pending": f"r/{recorded.name}"})
        + "\n"
    )
    assert main(["train", "--resume", str(r / "checkpoint"), "--train.steps", "6", "--quiet"]) == 0
    assert not recorded.exists() and (lookalike / "mine.txt").read_text() == "not nexus's"
    assert not lock_file(r).exists()


# ----------------------------------------------------------------------------- one writer per output
def _write_lock(target: Path, pid: int, host: str | None = None, proc_start: str | None = None) -> Path:
    from nexus.outdir.lock import _proc_start, lock_file

    f = lock_file(target)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(
        json.dumps(
            {
                "pid": pid,
                "host": host or socket.gethostname(),
                "proc_start": proc_start or _proc_start(pid),
                "started": "2026-01-01T00:00:00",
                "command": "nexus train",
            }
        )
        + "\n"
    )
    return f


@pytest.mark.parametrize("cmd", ["train", "grow", "analyze"])
def test_a_second_writer_gets_one_line_and_exit_2(capsys, tmp_path, run, live_process, cmd):
    out = tmp_path / "out"
    lock = _write_lock(out, live_process.pid)
    argv = {
        "train": ["train", *MICRO, "--out", out, "--quiet"],
        "grow": ["grow", "--checkpoint", run / "checkpoint", "--width.hidden", "48", "--no-verify", "--out", out],
        "analyze": ["analyze", "params", "--preset", "baseline-micro", "--out", out],
    }[cmd]
    err = one_line_exit_2(capsys, argv, "being written by another nexus process")
    assert f"pid {live_process.pid}" in err
    assert not out.exists() and lock.is_file()  # the holder's lock is its own: left as it was


def test_a_lock_from_another_host_is_refused_naming_the_host(capsys, tmp_path):
    out = tmp_path / "out"
    _write_lock(out, 1, host="node-17.cluster")
    one_line_exit_2(capsys, ["train", *MICRO, "--out", out, "--quiet"], "node-17.cluster")
    assert not out.exists()


@pytest.mark.parametrize("how", ["dead pid", "reused pid"])
def test_a_stale_lock_is_taken_over_with_a_note(capsys, tmp_path, live_process, how):
    out = tmp_path / "out"
    if how == "dead pid":
        _write_lock(out, 99999999)
    else:  # the pid is alive, but it is another process than the one that took the lock
        _write_lock(out, live_process.pid, proc_start="1")
    assert main(["train", *MICRO, "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "took over the lock" in err and "no longer running" in err, err
    assert (out / "checkpoint" / "meta.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the lock is gone once the run ends


# ----------------------------------------------------------------------------- where --out may be
def test_out_on_a_ram_disk_is_allowed(tmp_path):
    import shutil
    import uuid

    from nexus.outdir.guard import _filesystem_type

    out = Path("/dev/shm") / f"nexus-test-{uuid.uuid4().hex}"
    assert _filesystem_type(Path("/dev/shm")) == "tmpfs"
    try:
        assert main(["train", *MICRO, "--out", str(out), "--quiet"]) == 0
        assert (out / "checkpoint" / "meta.json").is_file()
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("where", ["/proc/nexus-out", "/sys/kernel/nexus-out", "/dev/pts/nexus-out"])
def test_kernel_pseudo_filesystems_are_refused(capsys, where):
    one_line_exit_2(capsys, ["train", *MICRO, "--out", where, "--quiet"], "kernel filesystem")
    assert not Path(where).exists()
