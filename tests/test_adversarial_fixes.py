"""Fixes for what the adversarial harness (tools/adversarial.py, issue 42's target) found: each test
fails without its fix. Fast, in-process where it can be."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from nexus.outdir.lock import read_journal
from nexus.outdir.manifest import MARKER, read_manifest

DEEP = "[" * 200_000 + "]" * 200_000  # nested past Python's recursion limit: json raises RecursionError


def test_a_manifest_nested_past_the_recursion_limit_is_no_proof_not_a_traceback(tmp_path):
    (tmp_path / MARKER).write_text('{"kind": "train run", "files": ' + DEEP + "}")
    assert read_manifest(tmp_path) is None


def test_a_journal_line_nested_past_the_recursion_limit_is_skipped(tmp_path):
    lf = tmp_path / ".run.nexus-lock"
    holder = {"pid": 1, "host": socket.gethostname()}
    lf.write_text(json.dumps(holder) + "\n" + DEEP + "\n" + json.dumps({"pending": ".run.tmp-1-1"}) + "\n")
    h, pending, _ = read_journal(lf)
    assert h == holder and pending == [".run.tmp-1-1"]


def test_a_fifo_under_the_lock_name_is_refused_at_once_not_read_forever(tmp_path):
    import os
    import threading

    import pytest

    from nexus.config import ConfigError
    from nexus.outdir import acquire_output_lock

    target = tmp_path / "run"
    lf = tmp_path / ".run.nexus-lock"
    os.mkfifo(lf)
    outcome = []

    def take():
        try:
            acquire_output_lock(target).release()
            outcome.append("taken")
        except ConfigError as e:
            outcome.append(str(e))

    t = threading.Thread(target=take, daemon=True)
    t.start()
    t.join(timeout=20)
    if t.is_alive():  # unblock the reader so the test process can end, then fail
        os.close(os.open(lf, os.O_WRONLY | os.O_NONBLOCK))
        t.join(timeout=5)
        pytest.fail("reading a FIFO lock name blocked")
    assert len(outcome) == 1 and "not a regular file" in outcome[0]
    assert lf.exists() and not lf.is_file()  # the user's FIFO is left where it was


def test_a_journal_name_longer_than_a_filesystem_allows_is_refused_in_one_line(tmp_path):
    import pytest

    from nexus.config import ConfigError
    from nexus.outdir.lock import confined_pending

    target = tmp_path / "run"
    target.mkdir()
    with pytest.raises(ConfigError, match="not a temporary of this output"):
        confined_pending(target, tmp_path, ["run/." + "a" * 300 + ".tmp-1-1"], tmp_path / ".run.nexus-lock")


MICRO = [
    "--preset",
    "baseline-micro",
    "--train.steps",
    "2",
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


def test_a_users_file_dropped_into_the_runs_own_tensorboard_folder_is_never_deleted(capsys, tmp_path):
    from test_output_safety import one_line_exit_2

    from nexus.cli import main

    run = tmp_path / "run"
    tb = ["--train.log_to", "[jsonl, tensorboard]"]
    assert main(["train", *MICRO, *tb, "--out", str(run)]) == 0
    events = sorted(p.name for p in (run / "tensorboard").iterdir())
    assert events  # the library's events file, written during the run
    (run / "tensorboard" / "my_notes.txt").write_text("what I saw in these curves")
    one_line_exit_2(capsys, ["train", *MICRO, *tb, "--out", run, "--overwrite"], "tensorboard/my_notes.txt")
    one_line_exit_2(
        capsys,
        ["train", *MICRO, *tb, "--train.steps", "3", "--out", run, "--resume", "auto"],
        "tensorboard/my_notes.txt",
    )
    assert (run / "tensorboard" / "my_notes.txt").read_text() == "what I saw in these curves"
    (run / "tensorboard" / "my_notes.txt").unlink()  # moved out: the run is all nexus's again
    from nexus.outdir.manifest import ownership_problems
    from nexus.train.run_dir import clear_run

    assert ownership_problems(run) == []
    clear_run(run)  # what --overwrite then does: the library's files go with the rest
    assert not (run / "tensorboard").exists()


def test_only_the_manifests_own_temporary_is_removed_never_a_users_file_of_that_name(tmp_path):
    import subprocess

    from nexus.outdir.manifest import new_manifest, remove_dead_manifest_temporaries, write_manifest

    dead = []
    for _ in range(2):  # two pids no process has now
        p = subprocess.Popen(["true"])
        p.wait()
        dead.append(p.pid)
    write_manifest(tmp_path, new_manifest("train run"))
    users = tmp_path / f".nexus-run.tmp-{dead[0]}"
    users.write_text("my shopping list\n")
    killed = tmp_path / f".nexus-run.tmp-{dead[1]}"
    killed.write_bytes((tmp_path / MARKER).read_bytes()[:9])  # a kill mid-write of the manifest
    remove_dead_manifest_temporaries(tmp_path)
    assert users.read_text() == "my shopping list\n" and not killed.exists()


def test_a_lock_taken_over_by_another_process_between_the_read_and_the_rename_is_never_stolen(tmp_path, monkeypatch):
    """The stale-lock window: A reads a dead holder's lock; before A renames it aside, B takes it over and
    creates its own live lock; A's rename then moves B's live lock. A must put it back and refuse."""
    import subprocess

    import pytest

    from nexus.config import ConfigError
    from nexus.outdir import acquire_output_lock

    p = subprocess.Popen(["true"])
    p.wait()
    target = tmp_path / "run"
    lf = tmp_path / ".run.nexus-lock"
    lf.write_text(json.dumps({"pid": p.pid, "host": socket.gethostname()}) + "\n")
    live = {"pid": os.getppid(), "host": socket.gethostname()}  # B: a process that is running
    real_replace = os.replace

    def replace(src, dst):
        if Path(src) == lf and not hasattr(replace, "raced"):
            replace.raced = True  # B's takeover happens here, just before A's rename
            (tmp_path / "b-took-it").write_text(json.dumps(live) + "\n")
            real_replace(tmp_path / "b-took-it", lf)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(ConfigError, match="being written by another nexus process"):
        acquire_output_lock(target)
    monkeypatch.setattr(os, "replace", real_replace)
    assert json.loads(lf.read_text().splitlines()[0]) == live  # B's lock is where B left it
    assert sorted(q.name for q in tmp_path.iterdir()) == [".run.nexus-lock"]


def test_a_validation_fraction_with_files_named_as_splits_is_refused_not_ignored(capsys, tmp_path):
    import pytest
    from test_output_safety import one_line_exit_2

    from nexus.config import ConfigError, DataConfig
    from nexus.data.loader import DataModule

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.txt").write_text("\n\n".join(f"training document {i}" for i in range(40)))
    (tmp_path / "d" / "val.txt").write_text("\n\n".join(f"held out document {i}" for i in range(5)))
    with pytest.raises(ConfigError, match=r"data.val_fraction=0.3 is not used: .*val.txt"):
        DataModule(DataConfig(source=str(tmp_path / "d"), seq_len=16, val_fraction=0.3, cache_dir=str(tmp_path / "c")))
    one_line_exit_2(
        capsys,
        [
            "data",
            "prepare",
            tmp_path / "d",
            "--tokenizer",
            "byte",
            "--out",
            tmp_path / "p",
            "--val-fraction",
            "0.3",
            "--quiet",
        ],
        "--val-fraction=0.3 is not used",
    )
    assert not (tmp_path / "p").exists()
    dm = DataModule(DataConfig(source=str(tmp_path / "d"), seq_len=16, cache_dir=str(tmp_path / "c")))
    assert "val.txt" in dm.summary()  # the default fraction with split files: the named split, as before


def test_torch_saves_short_write_on_a_full_disk_is_one_line_not_a_traceback():
    from nexus.cli import file_system_refusal

    # what torch.save raised on a full tmpfs (tools/adversarial.py disk-full-train-at-checkpoint)
    e = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 140992 vs 140880")
    line = file_system_refusal(e)
    assert line is not None and line.startswith("a file could not be written") and "\n" not in line
    assert file_system_refusal(RuntimeError("an internal fault")) is None  # the rest keeps its traceback


def test_a_run_killed_before_its_first_manifest_continues_by_resume_auto(capsys, tmp_path):
    """Killed as its first manifest was being written (NEXUS_CRASH_AT=manifest-before-rename): the folder
    holds only the manifest's temporary, which is nothing, so the same command with --resume auto starts."""
    import subprocess

    from nexus.cli import main
    from nexus.outdir.manifest import new_manifest, write_manifest

    p = subprocess.Popen(["true"])
    p.wait()
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(run, new_manifest("train run"))
    (run / MARKER).rename(run / f".nexus-run.tmp-{p.pid}")  # the dead writer's complete temporary, never renamed
    assert main(["train", *MICRO, "--out", str(run), "--resume", "auto"]) == 0
    assert read_manifest(run)["kind"] == "train run"
    assert sorted(q.name for q in run.iterdir() if q.name.startswith(".")) == [MARKER]


def test_overwrite_killed_between_a_rename_and_its_manifest_entry_is_finished_by_the_same_command(tmp_path):
    """Killed after config.yaml's rename, before its manifest entry (NEXUS_CRASH_AT=file-after-rename@config.yaml
    under --overwrite): the dead writer's journal holds the new file's hash, which proves it is nexus's; the
    up-front check must accept it, as the recovery under the lock does, so the same --overwrite runs."""
    import hashlib
    import subprocess

    from nexus.cli import main

    run = tmp_path / "run"
    assert main(["train", *MICRO, "--out", str(run)]) == 0
    p = subprocess.Popen(["true"])
    p.wait()
    new = (run / "config.yaml").read_text() + "# rewritten\n"
    (run / "config.yaml").write_text(new)  # renamed into place by the killed writer, not yet entered
    journal = [
        {"pid": p.pid, "host": socket.gethostname()},
        {"pending": "run/.config.yaml.tmp-1-1"},
        {"ready": "run/.config.yaml.tmp-1-1", "sha256": "enter:" + hashlib.sha256(new.encode()).hexdigest()},
    ]
    (tmp_path / ".run.nexus-lock").write_text("".join(json.dumps(x) + "\n" for x in journal))
    assert main(["train", *MICRO, "--out", str(run), "--overwrite"]) == 0
    assert not (tmp_path / ".run.nexus-lock").exists() and "# rewritten" not in (run / "config.yaml").read_text()


def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


PREP = ["data", "prepare", "embedded", "--tokenizer", "byte", "--num-proc", "1", "--quiet"]


def test_a_prepare_killed_mid_manifest_write_or_after_its_last_rename_is_settled_by_the_same_command(tmp_path):
    """Killed at `manifest-before-rename` (a .nexus-run temporary left) or at
    `file-after-rename@manifest.json` (the state file left, the shards not yet entered): the same command
    finds the corpus finished and leaves it as a whole run leaves it."""
    from nexus.cli import main
    from nexus.data.prepare import STATE

    out = tmp_path / "prep"
    assert main([*PREP, "--out", str(out)]) == 0
    whole = read_manifest(out)["files"]
    tmp = out / f".nexus-run.tmp-{_dead_pid()}"
    tmp.write_bytes((out / MARKER).read_bytes())
    fp = json.loads((out / "manifest.json").read_text())["fingerprint"]
    (out / STATE).write_text(json.dumps({"fingerprint": fp, "done": {}}))
    m = json.loads((out / MARKER).read_text())
    m["files"] = {k: v for k, v in m["files"].items() if not k.endswith(".bin") and k != "manifest.json"}
    (out / MARKER).write_text(json.dumps(m))
    assert main([*PREP, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [MARKER]
    assert read_manifest(out)["files"] == whole


def test_the_first_undecodable_byte_is_named_also_when_it_ends_the_file(tmp_path, capsys):
    """Issue 46 item 8: a latin-1 byte at the very end (or cut by a read chunk) was reported 'at byte None'."""
    from nexus.data.corpus import text_problem

    f = tmp_path / "latin1.txt"
    f.write_bytes(b"plain ascii text, " * 20 + b"caf\xe9")
    assert text_problem(f, str(f)) is None  # one bad byte in ~360: a warning, not a refusal
    err = capsys.readouterr().err
    assert f"the first at byte {f.stat().st_size - 1}" in err, err
    g = tmp_path / "all-latin1.txt"
    g.write_bytes(b"\xe9t\xe9 " * 50)
    assert "the first at byte 0)" in text_problem(g, str(g))


def test_a_bad_token_file_is_not_sent_to_data_prepare(tmp_path):
    """Issue 46 item 8: an empty .bin's refusal advised `nexus data prepare --skip-bad`, which refuses .bin sources."""
    import numpy as np
    import pytest

    from nexus.config import ConfigError
    from nexus.data.sources import resolve_source

    (tmp_path / "bins").mkdir()
    np.arange(1, 100, dtype=np.uint16).tofile(tmp_path / "bins" / "a.bin")
    (tmp_path / "bins" / "b.bin").write_bytes(b"")
    with pytest.raises(ConfigError) as e:
        resolve_source(str(tmp_path / "bins")).check_files()
    assert "b.bin" in str(e.value) and "is empty" in str(e.value) and "--skip-bad" not in str(e.value)


def test_sigterm_to_a_command_outside_training_ends_in_one_line(capsys):
    """Issue 46 item 8: SIGTERM to `nexus grow` (or any command outside a training loop) exited with no line."""
    import signal
    import time

    from nexus.cli import run_guarded

    def grow_like():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # never reached: the signal stops the command
        return 0

    before = signal.getsignal(signal.SIGTERM)
    assert run_guarded("nexus grow", grow_like) == 128 + signal.SIGTERM
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["nexus grow: stopped by SIGTERM; nothing was left half-written"]
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the command's only
