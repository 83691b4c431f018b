"""The one-writer lock and its journal (nexus/outdir/lock.py) through its own functions: no training, no
CLI (about a second in all). Who holds a lock and whether it still runs, what a journal records and how it
is read back, which recorded names a taker may act on, and taking over a dead holder's lock (issue 42 item
6: outdir's mutation survivors). Lock files are written here line by line, as a nexus writer would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import nexus.outdir.lock as lock
from nexus.config import ConfigError
from nexus.outdir.lock import (
    SUFFIX,
    acquire_output_lock,
    check_lock_file,
    confined_pending,
    held_lock,
    holder_alive,
    is_nexus_holder,
    is_rank0,
    lock_file,
    read_journal,
    read_lock,
)

HOST = socket.gethostname()
DEAD = 2**22 + 4321  # above the kernel's pid_max default: no process has it


def me() -> dict:
    return {"pid": os.getpid(), "host": HOST, "proc_start": lock._proc_start(os.getpid())}


def write_lines(path: Path, *records, raw: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + raw)
    return path


@pytest.fixture(autouse=True)
def no_held_locks():
    yield
    leaked = dict(lock._HELD)
    lock._HELD.clear()
    assert not leaked, f"a test left locks held: {leaked}"


# ----------------------------------------------------------------------------- names and holders
def test_the_lock_lies_beside_its_output_under_a_hidden_name(tmp_path):
    assert lock_file(tmp_path / "run") == tmp_path / f".run{SUFFIX}" and SUFFIX == ".nexus-lock"
    assert lock_file(tmp_path / "a" / "model.safetensors") == tmp_path / "a" / ".model.safetensors.nexus-lock"


def test_a_process_start_time_is_the_kernels_even_when_its_name_holds_spaces_and_parentheses(tmp_path):
    weird = tmp_path / "x) y (z"  # /proc/PID/stat shows the name in parentheses: only the last ')' ends it
    weird.symlink_to(sys.executable)
    p = subprocess.Popen([str(weird), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        stat = Path(f"/proc/{p.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split(" ")  # field 3 (state) onwards; field 22 is starttime
        start = lock._proc_start(p.pid)
        assert start == fields[22 - 3] and start.isdigit()
        assert int(start) >= int(lock._proc_start(os.getpid()))  # started after this test process
    finally:
        p.stdin.close()
        p.wait()
    assert lock._proc_start(DEAD) is None


def test_the_holder_line_names_this_process_its_host_and_start_and_the_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["nexus", "train", "--out", "x" * 300])
    h = lock._holder()
    assert (h["pid"], h["host"], h["proc_start"]) == (os.getpid(), HOST, lock._proc_start(os.getpid()))
    assert h["command"] == "nexus train --out" and len(h["started"]) == 19 and h["started"][10] == "T"
    monkeypatch.setattr(sys, "argv", ["nexus", "y" * 300])
    assert lock._holder()["command"] == ("nexus " + "y" * 300)[:200]


def test_a_holder_is_alive_only_as_the_same_process_on_this_host(live_process, monkeypatch):
    assert holder_alive(me()) is True
    assert holder_alive({**me(), "proc_start": None}) is True  # a holder written without its start time
    assert holder_alive({**me(), "proc_start": "1"}) is False  # the pid reused by another process
    assert (
        holder_alive({"pid": live_process.pid, "host": HOST, "proc_start": lock._proc_start(live_process.pid)}) is True
    )
    assert holder_alive({"pid": DEAD, "host": HOST}) is False
    assert holder_alive({"pid": str(os.getpid()), "host": HOST}) is False
    assert holder_alive({"host": HOST}) is False
    assert holder_alive({**me(), "host": "node-17.cluster"}) is None  # cannot be checked from here
    assert holder_alive({}) is None

    def denied(pid, sig):
        raise PermissionError  # the process exists, owned by another user

    monkeypatch.setattr(lock.os, "kill", denied)
    assert holder_alive(me()) is True and holder_alive({**me(), "proc_start": "1"}) is False


def test_a_nexus_holder_has_an_integer_pid_and_a_host():
    assert is_nexus_holder({"pid": 3, "host": "h"})
    for h in [{"pid": "3", "host": "h"}, {"pid": 3}, {"host": "h"}, {"pid": 3, "host": 4}, [3, "h"], None, {}]:
        assert not is_nexus_holder(h), h


@pytest.mark.parametrize("rank, want", [(None, True), ("", True), ("0", True), ("1", False), ("00", False)])
def test_only_rank_0_or_a_single_process_takes_locks(monkeypatch, rank, want):
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert is_rank0() is want


# ----------------------------------------------------------------------------- the journal
def test_the_journal_reads_back_the_holder_the_pending_names_and_the_hashes_of_those_still_pending(tmp_path):
    lf = write_lines(
        tmp_path / "lk",
        {"pid": 5, "host": "h"},
        {"pending": "a"},
        {"pending": "b"},
        {"pending": "c"},
        {"ready": "a", "sha256": "ha"},
        {"ready": "b", "sha256": "hb"},
        {"ready": "c", "sha256": 7},
        {"done": "b"},
        {"done": "never-pending"},
        {"ready": "gone", "sha256": "hg"},
        [1, 2],
        "text",
        {"other": 1},
        raw='{"pending": "torn',
    )
    assert read_journal(lf) == ({"pid": 5, "host": "h"}, ["a", "c"], {"a": "ha"})
    assert read_lock(lf) == ({"pid": 5, "host": "h"}, ["a", "c"])


def test_a_journal_whose_first_line_is_not_a_holder_has_none_and_a_missing_one_is_empty(tmp_path):
    lf = write_lines(tmp_path / "lk", [1], {"pending": "a"}, {"pending": "a"}, {"done": "a"})
    assert read_journal(lf) == ({}, ["a"], {})  # a name recorded twice stays pending until done twice
    lf.write_bytes(b'{"pid": 1, "host": "h", "note": "\xff"}\n{"pending": "p"}\n')  # undecodable bytes replaced
    holder, pending, _ = read_journal(lf)
    assert holder["pid"] == 1 and pending == ["p"]
    assert read_journal(tmp_path / "missing") == ({}, [], {})
    (tmp_path / "dir").mkdir()
    assert read_journal(tmp_path / "dir") == ({}, [], {})


def test_every_journal_record_is_relative_to_the_locks_folder_and_fsynced(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        lock.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))
    )
    out = tmp_path / "run"
    with acquire_output_lock(out) as lk:
        synced.clear()
        lk.pending(out / ".a.tmp-1-2")
        lk.ready(out / ".a.tmp-1-2", "abc")
        lk.done(out / ".a.tmp-1-2")
        lines = lk.file.read_text().splitlines()
        assert [json.loads(x) for x in lines[1:]] == [
            {"pending": "run/.a.tmp-1-2"},
            {"ready": "run/.a.tmp-1-2", "sha256": "abc"},
            {"done": "run/.a.tmp-1-2"},
        ]
        assert synced == [str(lk.file)] * 3  # each line reaches the disk before the name it records is made


def test_a_nested_lock_journals_into_the_enclosing_one_and_its_release_keeps_it(tmp_path):
    out = tmp_path / "run"
    with acquire_output_lock(out) as outer:
        (out / "step_1").mkdir(parents=True)
        assert held_lock(out / "step_1" / "model") is outer and held_lock(out) is outer
        inner = acquire_output_lock(out / "step_1")
        assert inner.parent is outer and inner.base == tmp_path and inner.file == lock_file(out / "step_1")
        inner.pending(out / "step_1" / ".model.tmp-1-2")
        assert not inner.file.exists()
        assert read_lock(outer.file)[1] == ["run/step_1/.model.tmp-1-2"]
        inner.release()
        assert outer.file.is_file() and held_lock(out) is outer
    assert held_lock(out) is None and not outer.file.exists()
    assert held_lock(tmp_path / "elsewhere") is None


# ----------------------------------------------------------------------------- what a lock name may hold
def test_a_lock_name_holding_what_nexus_did_not_write_is_refused_and_left(tmp_path):
    out = tmp_path / "out"
    lf = lock_file(out)
    lf.mkdir()
    with pytest.raises(ConfigError) as e:
        check_lock_file(lf, "--out", out)
    assert str(e.value) == (
        f"--out={str(out)!r}: its lock name {str(lf)!r} is a folder (valid: move it away, or another "
        "output path; nexus never deletes what it did not write)"
    )
    lf.rmdir()
    real = write_lines(tmp_path / "real", {"pid": DEAD, "host": HOST})
    lf.symlink_to(real)
    with pytest.raises(ConfigError, match="is a symlink"):
        check_lock_file(lf, "--out", out)
    lf.unlink()
    lf.write_text("my notes\n")
    with pytest.raises(ConfigError, match=r"--save=.* is a file that is not a nexus lock"):
        check_lock_file(lf, "--save", out)
    write_lines(lf, {"pid": DEAD, "host": HOST})
    check_lock_file(lf, "--out", out)  # a nexus lock: no refusal


@pytest.mark.parametrize(
    "rel",
    [
        "out/.model.tmp-1-2",
        ".out.tmp-12-34",
        ".out.new-1-2",
        ".out.old-1-2",
        ".out.del-1-2",
        "out/a/b/.c.d.del-5-6",
        "out/.x.tmp-1-2",
    ],
)
def test_a_temporary_of_the_output_itself_or_below_it_may_be_acted_on(tmp_path, rel):
    (tmp_path / "out").mkdir()
    assert confined_pending(tmp_path / "out", tmp_path, [rel], tmp_path / "lk") == [rel]


@pytest.mark.parametrize(
    "rel",
    [
        "../out/.x.tmp-1-2",
        "/tmp/.out.tmp-1-2",
        ".other.tmp-1-2",
        ".out.tmp-1",
        ".out.bak-1-2",
        "out/plain.txt",
        "out/.x.tmp-1-2/../../y",
        "elsewhere/.x.tmp-1-2",
        "out2/.x.tmp-1-2",
        "out/link/.x.tmp-1-2",
        ".out2.tmp-1-2",
        "",
        "out/../.out.tmp-1-2",
    ],
)
def test_a_recorded_name_that_is_no_temporary_of_the_output_is_refused_with_the_name(tmp_path, rel):
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError) as e:
        confined_pending(tmp_path / "out", tmp_path, [".out.tmp-1-2", rel], tmp_path / "lk", "--save")
    assert str(e.value) == (
        f"--save={str(tmp_path / 'out')!r}: the lock {str(tmp_path / 'lk')!r} records {rel!r}, which "
        "is not a temporary of this output (valid: delete that lock file if no nexus process is "
        "writing there; nothing was touched)"
    )


def test_a_nested_outputs_temporaries_are_relative_to_the_enclosing_locks_folder(tmp_path):
    target = tmp_path / "run" / "step_1"
    target.mkdir(parents=True)
    assert confined_pending(target, tmp_path, ["run/.step_1.tmp-1-2", "run/step_1/.m.tmp-1-2"], tmp_path / "lk") == [
        "run/.step_1.tmp-1-2",
        "run/step_1/.m.tmp-1-2",
    ]
    with pytest.raises(ConfigError):
        confined_pending(target, tmp_path, ["run/.step_2.tmp-1-2"], tmp_path / "lk")


# ----------------------------------------------------------------------------- taking a lock
def test_a_new_lock_is_created_whole_with_its_holder_line_and_released(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["nexus", "train", "--out"])
    out = tmp_path / "run"
    lk = acquire_output_lock(out)
    assert lk.file == lock_file(out) and lk.note == "" and lk.taken_over == [] and lk.taken_ready == {}
    holder, pending = read_lock(lk.file)
    assert {k: holder[k] for k in ("pid", "host", "proc_start", "command")} == {**me(), "command": "nexus train --out"}
    assert pending == [] and len(lk.file.read_text().splitlines()) == 1
    assert held_lock(out) is lk and held_lock(tmp_path / "run" / "x" / "y") is lk
    assert sorted(p.name for p in tmp_path.iterdir()) == [lk.file.name]  # no temporary of the lock left beside it
    lk.release()
    assert not lk.file.exists() and held_lock(out) is None and list(tmp_path.iterdir()) == []


def test_the_folders_made_to_hold_a_lock_are_removed_again_when_left_empty(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    with acquire_output_lock(out) as lk:
        assert lk.created == [tmp_path / "a" / "b", tmp_path / "a"]  # deepest first
    assert list(tmp_path.iterdir()) == []
    with acquire_output_lock(out):
        out.mkdir()  # the output was written: its folders stay
    assert out.is_dir()


def test_a_lock_held_by_a_live_process_or_another_host_is_refused_and_left_as_it_was(tmp_path, live_process):
    out = tmp_path / "sub" / "run"
    (tmp_path / "sub").mkdir()
    lf = write_lines(
        lock_file(out),
        {
            "pid": live_process.pid,
            "host": HOST,
            "proc_start": lock._proc_start(live_process.pid),
            "started": "then",
            "command": "nexus train",
        },
    )
    before = lf.read_text()
    with pytest.raises(ConfigError) as e:
        acquire_output_lock(out, "--save")
    assert str(e.value) == (
        f"--save={str(out)!r} is being written by another nexus process: pid {live_process.pid} on host "
        f"{HOST!r} since then (nexus train) (valid: wait for it to finish, or another output path)"
    )
    assert lf.read_text() == before
    write_lines(lf, {"pid": 1, "host": "node-17.cluster", "started": "then"})
    with pytest.raises(ConfigError) as e:
        acquire_output_lock(out)
    assert str(e.value).startswith(
        f"--out={str(out)!r} is locked by pid 1 on host 'node-17.cluster' since then, which cannot be checked from here"
    )
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == [lf.name]


def test_a_refused_lock_removes_the_folders_it_made(tmp_path, monkeypatch):
    out = tmp_path / "a" / "b" / "run"
    monkeypatch.setattr(lock, "_create_whole", lambda lf, lines: (_ for _ in ()).throw(ConfigError("refused")))
    with pytest.raises(ConfigError, match="refused"):
        acquire_output_lock(out)
    assert list(tmp_path.iterdir()) == []


def test_a_dead_holders_lock_is_taken_over_with_its_record_carried_until_recovered(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    lf = write_lines(
        lock_file(out),
        {"pid": DEAD, "host": HOST, "started": "then", "command": "nexus grow"},
        {"pending": "run/.a.tmp-1-2"},
        {"pending": ".run.new-1-2"},
        {"pending": "run/.b.tmp-1-2"},
        {"ready": "run/.a.tmp-1-2", "sha256": "ha"},
        {"done": "run/.b.tmp-1-2"},
    )
    with acquire_output_lock(out) as lk:
        assert lk.note == (
            f"took over the lock of {str(out)!r} left by pid {DEAD} on host {HOST!r} since then (nexus "
            "grow), which is no longer running"
        )
        assert lk.taken_over == ["run/.a.tmp-1-2", ".run.new-1-2"] and lk.taken_ready == {"run/.a.tmp-1-2": "ha"}
        holder, pending, ready = read_journal(lf)
        assert holder["pid"] == os.getpid()
        assert pending == ["run/.a.tmp-1-2", ".run.new-1-2"] and ready == {"run/.a.tmp-1-2": "ha"}  # still owed
        assert sorted(p.name for p in tmp_path.iterdir()) == [lf.name, "run"]  # the dead lock moved aside, then gone


def test_a_dead_holders_journal_naming_a_path_outside_the_output_is_refused_before_anything_moves(tmp_path):
    out = tmp_path / "run"
    lf = write_lines(lock_file(out), {"pid": DEAD, "host": HOST}, {"pending": "VB13/.photos.del-1-1"})
    before = lf.read_text()
    with pytest.raises(ConfigError, match="which is not a temporary of this output"):
        acquire_output_lock(out)
    assert lf.read_text() == before and held_lock(out) is None


def test_a_lock_that_keeps_vanishing_under_the_taker_is_refused_after_three_tries(tmp_path, monkeypatch):
    out = tmp_path / "a" / "run"
    tries = []

    def create_whole(lf, lines):
        tries.append(lf)
        write_lines(lf, {"pid": DEAD, "host": HOST})  # a dead holder's lock each time ...
        return False

    def replace(src, dst):
        Path(src).unlink()  # ... which another taker moves away first
        raise FileNotFoundError(src)

    monkeypatch.setattr(lock, "_create_whole", create_whole)
    monkeypatch.setattr(lock.os, "replace", replace)
    with pytest.raises(ConfigError) as e:
        acquire_output_lock(out)
    assert str(e.value) == f"--out={str(out)!r}: could not take its lock {str(lock_file(out))!r} (valid: retry)"
    assert len(tries) == 3 and list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- creating the lock file
def test_a_lock_file_is_created_only_where_the_name_is_free(tmp_path):
    lf = tmp_path / ".x.nexus-lock"
    assert lock._create_whole(lf, [{"pid": 1, "host": "h"}, {"pending": "p"}])
    assert lf.read_text() == '{"pid": 1, "host": "h"}\n{"pending": "p"}\n'
    assert not lock._create_whole(lf, [{"pid": 2, "host": "h"}])
    assert lf.read_text() == '{"pid": 1, "host": "h"}\n{"pending": "p"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [lf.name]


def test_without_hard_links_the_lock_is_still_created_only_where_the_name_is_free(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(lock.os, "link", no_links)
    monkeypatch.setattr(
        lock.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))
    )
    lf = tmp_path / ".x.nexus-lock"
    assert lock._create_whole(lf, [{"pid": 1, "host": "h"}])
    assert lf.read_text() == '{"pid": 1, "host": "h"}\n' and synced[-1] == str(lf)
    assert not lock._create_whole(lf, [{"pid": 2, "host": "h"}])
    assert lf.read_text() == '{"pid": 1, "host": "h"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [lf.name]


def test_only_a_dead_nexus_holders_own_lock_temporary_is_removed(tmp_path, live_process):
    lf = tmp_path / ".x.nexus-lock"
    dead = write_lines(tmp_path / f"{lf.name}.tmp-{DEAD}", {"pid": DEAD, "host": HOST})
    keep = [
        write_lines(tmp_path / f"{lf.name}.tmp-{live_process.pid}", {"pid": live_process.pid, "host": HOST}),  # alive
        write_lines(tmp_path / f"{lf.name}.tmp-{DEAD + 1}", {"pid": DEAD, "host": HOST}),  # another pid inside
        write_lines(tmp_path / f"{lf.name}.tmp-{DEAD + 2}", {"pid": DEAD + 2, "host": "node-17"}),  # another host
        write_lines(tmp_path / f"{lf.name}.tmp-x{DEAD}", {"pid": DEAD, "host": HOST}),  # not a pid
        write_lines(tmp_path / f"{lf.name}.tmp-{DEAD + 3}", {"user": "notes"}),
    ]  # not a nexus holder
    (tmp_path / f"{lf.name}.tmp-{DEAD + 4}").mkdir()
    (tmp_path / f"{lf.name}.tmp-{DEAD + 5}").symlink_to(dead)
    lock._remove_dead_lock_temporaries(lf)
    assert not dead.exists() and all(p.is_file() for p in keep)
    assert (tmp_path / f"{lf.name}.tmp-{DEAD + 4}").is_dir() and (tmp_path / f"{lf.name}.tmp-{DEAD + 5}").is_symlink()


# ----------------------------------------------------------------------------- after the first mutation run
def test_a_torn_line_mid_journal_is_skipped_and_a_done_name_recorded_again_is_not_ready(tmp_path):
    lf = write_lines(tmp_path / "lk", {"pid": 5, "host": "h"}, {"pending": "a"}, raw='{"ready": "a", "sha2\n')
    with open(lf, "a") as f:  # records after a torn line (a kill mid-append, then a taker's lines) still count
        f.write(
            "".join(
                json.dumps(r) + "\n"
                for r in [{"ready": "a", "sha256": "h1"}, {"done": "a"}, {"pending": "a"}, {"pending": "b"}]
            )
        )
    assert read_journal(lf) == ({"pid": 5, "host": "h"}, ["a", "b"], {})  # a's second life was never complete


def test_the_refusal_names_the_default_flag(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError) as e:
        confined_pending(tmp_path / "out", tmp_path, ["../x"], tmp_path / "lk")
    assert str(e.value).startswith(f"--out={str(tmp_path / 'out')!r}: the lock {str(tmp_path / 'lk')!r} records '../x'")


def test_refusals_while_taking_a_lock_name_the_callers_flag_and_the_lock(tmp_path):
    out = tmp_path / "run"
    lock_file(out).mkdir()
    with pytest.raises(ConfigError) as e:
        acquire_output_lock(out, "--save")
    assert str(e.value).startswith(f"--save={str(out)!r}: its lock name {str(lock_file(out))!r} is a folder")
    lock_file(out).rmdir()
    lf = write_lines(lock_file(out), {"pid": DEAD, "host": HOST}, {"pending": "../VB13/.photos.del-1-1"})
    with pytest.raises(ConfigError) as e:
        acquire_output_lock(out, "--save")
    assert str(e.value).startswith(
        f"--save={str(out)!r}: the lock {str(lf)!r} records '../VB13/.photos.del-1-1', which"
    )


def test_checking_a_holder_sends_it_no_signal(signal_noting_process):
    p = signal_noting_process
    assert holder_alive({"pid": p.pid, "host": HOST, "proc_start": lock._proc_start(p.pid)}) is True
    assert p.still_running()  # a probe only asks whether the pid exists


def test_a_nested_lock_took_nothing_over_and_made_no_folders(tmp_path):
    out = tmp_path / "run"
    with acquire_output_lock(out) as outer:
        inner = acquire_output_lock(out / "step_1")
        assert (inner.taken_over, inner.taken_ready, inner.created, inner.note) == ([], {}, [], "")
        assert outer.created == []


def test_releasing_twice_or_after_the_lock_file_was_removed_is_harmless(tmp_path):
    out = tmp_path / "run"
    lk = acquire_output_lock(out)
    lk.file.unlink()  # removed by hand while held
    lk.release()
    lk.release()
    assert held_lock(out) is None and list(tmp_path.iterdir()) == []


def test_a_lock_taken_over_twice_in_a_row_carries_both_dead_holders_records(tmp_path, monkeypatch):
    out = tmp_path / "run"
    real, calls = lock._create_whole, []

    def create_whole(lf, lines):
        calls.append(lines[1:])
        if len(calls) <= 2:  # a dead holder's lock stands in the way, twice (each taken over in turn)
            write_lines(
                lf,
                {"pid": DEAD + len(calls), "host": HOST},
                {"pending": f"run/.f{len(calls)}.tmp-1-2"},
                {"ready": f"run/.f{len(calls)}.tmp-1-2", "sha256": f"h{len(calls)}"},
            )
            return False
        return real(lf, lines)

    monkeypatch.setattr(lock, "_create_whole", create_whole)
    with acquire_output_lock(out) as lk:
        assert lk.taken_over == ["run/.f1.tmp-1-2", "run/.f2.tmp-1-2"]
        assert lk.taken_ready == {"run/.f1.tmp-1-2": "h1", "run/.f2.tmp-1-2": "h2"}
        assert read_journal(lk.file)[1:] == (lk.taken_over, lk.taken_ready)  # still recorded until recovered
        assert calls[1] == [{"pending": "run/.f1.tmp-1-2"}, {"ready": "run/.f1.tmp-1-2", "sha256": "h1"}]
        assert f"pid {DEAD + 2}" in lk.note


def test_the_lock_file_made_without_hard_links_is_never_executable(tmp_path, monkeypatch):
    monkeypatch.setattr(lock.os, "link", lambda src, dst: (_ for _ in ()).throw(OSError(1, "no links")))
    old = os.umask(0)
    try:
        assert lock._create_whole(tmp_path / ".x.nexus-lock", [{"pid": 1, "host": "h"}])
    finally:
        os.umask(old)
    assert (tmp_path / ".x.nexus-lock").stat().st_mode & 0o777 == 0o644


def test_a_dead_temporary_removed_by_another_taker_meanwhile_is_no_error(tmp_path, monkeypatch):
    lf = tmp_path / ".x.nexus-lock"
    t = write_lines(tmp_path / f"{lf.name}.tmp-{DEAD}", {"pid": DEAD, "host": HOST})

    def gone_meanwhile(h):
        t.unlink()  # another taker removed it between the check and the removal
        return False

    monkeypatch.setattr(lock, "holder_alive", gone_meanwhile)
    lock._remove_dead_lock_temporaries(lf)
    assert not t.exists()


def test_every_dead_temporary_is_removed_whatever_the_folder_lists_first(tmp_path, monkeypatch):
    lf = tmp_path / ".x.nexus-lock"
    elsewhere = write_lines(tmp_path / "elsewhere", {"pid": DEAD + 9, "host": HOST})
    link = tmp_path / f"{lf.name}.tmp-{DEAD + 9}"
    link.symlink_to(elsewhere)  # a dead holder's line reached through a link: a link is never nexus's
    skipped = [write_lines(tmp_path / f"{lf.name}.tmp-x{i}", {"pid": DEAD, "host": HOST}) for i in range(3)]
    dead = write_lines(tmp_path / f"{lf.name}.tmp-{DEAD}", {"pid": DEAD, "host": HOST})
    real_glob = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: sorted(real_glob(self, pattern), key=lambda p: p == dead))
    lock._remove_dead_lock_temporaries(lf)
    assert not dead.exists() and link.is_symlink() and elsewhere.is_file() and all(p.is_file() for p in skipped)


# ----------------------------------------------------------------------------- since the rebase (main's new code)
def test_a_fifo_under_the_locks_name_is_never_read_and_is_refused(tmp_path):
    out = tmp_path / "run"
    os.mkfifo(lock_file(out))
    assert read_journal(lock_file(out)) == ({}, [], {})  # returns at once: a FIFO's read would block
    with pytest.raises(ConfigError, match="is not a regular file"):
        check_lock_file(lock_file(out), "--out", out)


def test_json_nested_past_pythons_stack_is_a_line_skipped(tmp_path):
    lf = write_lines(tmp_path / "lk", {"pid": 5, "host": "h"}, raw="[" * 200000 + "\n" + '{"pending": "a"}\n')
    assert read_journal(lf) == ({"pid": 5, "host": "h"}, ["a"], {})


def test_same_file_means_the_same_inode_under_the_name(tmp_path):
    p = write_lines(tmp_path / "lk", {"pid": 5, "host": "h"})
    seen = os.lstat(p)
    assert lock._same_file(p, seen)
    os.rename(p, tmp_path / "kept")  # kept alive elsewhere: its inode cannot be reused for the file below
    assert not lock._same_file(p, seen)
    write_lines(tmp_path / "other", {"pid": 6, "host": "h"})
    os.replace(tmp_path / "other", p)  # another file under the same name
    assert not lock._same_file(p, seen)


def test_a_dead_lock_removed_while_it_is_being_taken_over_is_simply_created_anew(tmp_path, monkeypatch):
    out = tmp_path / "run"
    write_lines(lock_file(out), {"pid": DEAD, "host": HOST})
    real, calls = lock.read_journal, []

    def released_after_reading(path):
        calls.append(path)
        got = real(path)
        if len(calls) == 2:  # the taker's own read (the first is check_lock_file's): then the file goes
            Path(path).unlink()
        return got

    monkeypatch.setattr(lock, "read_journal", released_after_reading)
    with acquire_output_lock(out) as lk:
        assert read_lock(lk.file)[0]["pid"] == os.getpid() and lk.note == ""  # nothing was taken over
