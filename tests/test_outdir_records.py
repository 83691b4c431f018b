"""The ownership manifest (nexus/outdir/manifest.py) through its own functions, on folders built here:
no training, no CLI (well under a second in all). What a manifest may name, how it is read and written,
what proves a file or folder is still nexus's, and what ownership_problems reports (issue 42 item 6:
outdir's mutation survivors). Each expected value is computed from the bytes the test wrote."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

import nexus.outdir.manifest as manifest
from nexus.outdir.manifest import (
    MARKER,
    ManifestError,
    confined_name,
    entry_unchanged,
    file_entry,
    forget,
    manifest_of_tree,
    new_manifest,
    ownership_problems,
    read_manifest,
    record,
    record_growing,
    sha256_of,
    through_symlink,
    write_manifest,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def owned(d: Path, files: dict[str, bytes], kind: str = "train run") -> Path:
    """A folder holding `files`, each recorded by its bytes."""
    for rel, data in files.items():
        put(d / rel, data)
    write_manifest(d, {"kind": kind, "files": {rel: {"size": len(b), "sha256": sha(b)} for rel, b in files.items()}})
    return d


# ----------------------------------------------------------------------------- hashes
@pytest.mark.parametrize("limit", [None, 0, 1, 5, (1 << 20) - 3, (1 << 20) + 1, (1 << 20) + 7, 3 << 20, 10 << 20])
def test_sha256_of_hashes_the_whole_file_or_exactly_its_first_bytes(tmp_path, limit):
    data = os.urandom((3 << 20) + 11)  # more than one 1 MiB block
    p = put(tmp_path / "f", data)
    assert sha256_of(p, limit) == sha(data if limit is None else data[:limit])


# ----------------------------------------------------------------------------- names
@pytest.mark.parametrize("rel", ["a", "a/b", "sub/.nexus-run", ".hidden", "a.b/c..d", "n" * 255, "d/" + "\u00e9" * 127])
def test_a_plain_relative_name_is_confined(rel):
    assert confined_name(rel)


@pytest.mark.parametrize(
    "rel",
    [
        None,
        3,
        b"a",
        "",
        "/a",
        "/",
        "a\0b",
        "..",
        ".",
        "a/../b",
        "./a",
        "a/.",
        "a//b",
        "a/",
        MARKER,
        "n" * 256,
        "d/" + "\u00e9" * 128,
    ],
)  # a part over 255 bytes: no filesystem's
def test_absolute_dotted_empty_or_non_text_names_and_the_manifest_itself_are_not_confined(rel):
    assert not confined_name(rel)


def test_through_symlink_sees_a_link_anywhere_below_the_directory_and_nothing_else(tmp_path):
    d = tmp_path / "d"
    put(d / "real" / "f", b"x")
    (d / "link").symlink_to(d / "real")
    (d / "real" / "flink").symlink_to(d / "real" / "f")
    assert through_symlink(d, "link/f") and through_symlink(d, "link") and through_symlink(d, "real/flink")
    assert not through_symlink(d, "real/f") and not through_symlink(d, "real") and not through_symlink(d, "missing/f")
    top = tmp_path / "top"
    top.symlink_to(d)
    assert not through_symlink(top, "real/f")  # the directory itself is the caller's: only what lies below counts


# ----------------------------------------------------------------------------- reading and writing
def test_read_manifest_gives_none_for_anything_that_is_not_a_nexus_manifest(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    assert read_manifest(d) is None  # none at all
    for text in ["not json", "[1, 2]", '{"files": {}}', '{"kind": 3, "files": {}}', "\xff"]:
        (d / MARKER).write_text(text)
        assert read_manifest(d) is None, text
    (d / MARKER).unlink()
    (d / MARKER).mkdir()
    assert read_manifest(d) is None  # a folder under the name
    (d / MARKER).rmdir()
    real = tmp_path / "real"
    real.write_text(json.dumps({"kind": "train run", "files": {}}))
    (d / MARKER).symlink_to(real)
    assert read_manifest(d) is None  # nexus writes its manifest as a plain file, never a link


@pytest.mark.parametrize("files", [None, [], "x", 3])
def test_a_manifest_without_a_file_table_reads_as_one_listing_nothing(tmp_path, files):
    (tmp_path / MARKER).write_text(json.dumps({"kind": "analysis", "files": files}))
    assert read_manifest(tmp_path) == {"kind": "analysis", "files": {}}


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../x", ""])
def test_a_manifest_naming_a_path_outside_its_directory_is_refused_with_the_name(tmp_path, rel):
    (tmp_path / MARKER).write_text(
        json.dumps({"kind": "train run", "files": {"ok": {"dir": True}, rel: {"dir": True}}})
    )
    with pytest.raises(ManifestError) as e:
        read_manifest(tmp_path)
    assert repr(rel) in str(e.value) and repr(str(tmp_path / MARKER)) in str(e.value)


def test_write_manifest_replaces_the_manifest_through_its_own_temporary_fsynced_only_when_durable(
    tmp_path, monkeypatch
):
    synced, crashes = [], []
    real_fsync = os.fsync
    monkeypatch.setattr(
        manifest.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))
    )

    def crash_point(name):
        crashes.append((name, sorted(p.name for p in tmp_path.iterdir())))

    monkeypatch.setattr(manifest, "crash_point", crash_point)
    m = {"kind": "analysis", "files": {"b": {"dir": True}, "a": {"size": 1, "sha256": "0"}}}
    write_manifest(tmp_path, m)
    tmp = f"{manifest.MARKER_TMP}{os.getpid()}"
    assert synced == [str(tmp_path / tmp)]  # the temporary's bytes reach the disk before the rename
    assert crashes == [("manifest-before-rename", [tmp])]  # the kill point sits between the write and the rename
    text = (tmp_path / MARKER).read_text()
    assert text == json.dumps(m, indent=1, sort_keys=True) + "\n" and json.loads(text) == m
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER]
    synced.clear()
    write_manifest(tmp_path, {"kind": "x", "files": {}}, durable=False)
    assert synced == [] and (tmp_path / MARKER).read_text() == '{"files": {}, "kind": "x"}\n'


def test_file_entry_records_size_and_hash_and_grows_only_when_asked(tmp_path):
    p = put(tmp_path / "f", b"hello")
    assert file_entry(p) == {"size": 5, "sha256": sha(b"hello")}
    assert file_entry(p, grows=True) == {"size": 5, "sha256": sha(b"hello"), "grows": True}
    assert file_entry(p, sha256="given") == {"size": 5, "sha256": "given"}  # a digest the writer already has


def test_a_new_manifest_names_its_kind_and_when_it_was_created_and_lists_nothing():
    m = new_manifest("analysis")
    assert m["kind"] == "analysis" and m["files"] == {} and set(m) == {"kind", "created", "files"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", m["created"])


def test_manifest_of_tree_lists_every_file_below_but_its_own_manifest_and_temporaries(tmp_path):
    files = {"a.txt": b"a", "sub/b.bin": b"bb", "sub/deep/c": b"ccc", ".nexus-run.tmp-x": b"not ours"}
    for rel, data in files.items():
        put(tmp_path / rel, data)
    put(tmp_path / MARKER, b"{}")
    put(tmp_path / f"{manifest.MARKER_TMP}123", b"torn")
    (tmp_path / "empty").mkdir()
    m = manifest_of_tree(tmp_path, "checkpoint", hashes={"sub/b.bin": "known"})
    assert m["kind"] == "checkpoint"
    assert m["files"] == {
        rel: {"size": len(b), "sha256": "known" if rel == "sub/b.bin" else sha(b)} for rel, b in files.items()
    }


def test_record_creates_the_manifest_of_its_kind_and_adds_or_refreshes_each_sort_of_entry(tmp_path):
    put(tmp_path / "config.yaml", b"a: 1\n")
    put(tmp_path / "metrics.jsonl", b'{"step": 1}\n')
    record(tmp_path, "train run", files=["config.yaml"], grows=["metrics.jsonl"], dirs=["step_1"], library_dirs=["tb"])
    m = read_manifest(tmp_path)
    assert m["kind"] == "train run"
    assert m["files"] == {
        "config.yaml": {"size": 5, "sha256": sha(b"a: 1\n")},
        "metrics.jsonl": {"size": 12, "sha256": sha(b'{"step": 1}\n'), "grows": True},
        "step_1": {"dir": True},
        "tb": {"dir": "library", "files": {}},
    }  # tb: nothing in it yet
    put(tmp_path / "config.yaml", b"a: 22\n")
    record(tmp_path, "analysis", files=["config.yaml"])  # an existing manifest keeps its kind and its other entries
    m2 = read_manifest(tmp_path)
    assert m2["kind"] == "train run" and m2["created"] == m["created"]
    assert m2["files"] == {**m["files"], "config.yaml": {"size": 6, "sha256": sha(b"a: 22\n")}}


def test_forget_drops_only_the_named_entries_and_creates_nothing(tmp_path):
    forget(tmp_path, ["a"])
    assert list(tmp_path.iterdir()) == []  # no manifest: nothing to forget, none written
    owned(tmp_path, {"a": b"1", "b": b"2", "c": b"3"})
    forget(tmp_path, ["a", "c", "never-listed"])
    assert read_manifest(tmp_path)["files"] == {"b": {"size": 1, "sha256": sha(b"2")}}


def test_record_growing_records_the_given_bytes_and_the_pending_line_without_an_fsync(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(manifest.os, "fsync", synced.append)
    record_growing(tmp_path, "train run", "m.jsonl", 7, "abc", appending='{"x": 1}\n')
    m = read_manifest(tmp_path)
    assert m["kind"] == "train run"
    assert m["files"] == {"m.jsonl": {"size": 7, "sha256": "abc", "grows": True, "appending": '{"x": 1}\n'}}
    record_growing(tmp_path, "analysis", "m.jsonl", 16, "def")
    m = read_manifest(tmp_path)
    assert m["kind"] == "train run" and m["files"] == {"m.jsonl": {"size": 16, "sha256": "def", "grows": True}}
    record_growing(tmp_path, "analysis", "n.jsonl", 0, "e", appending="")
    assert read_manifest(tmp_path)["files"]["n.jsonl"] == {"size": 0, "sha256": "e", "grows": True}
    assert synced == []  # per line: the rename alone survives a kill of the process


# ----------------------------------------------------------------------------- what is still nexus's
def test_a_file_is_unchanged_only_with_its_recorded_size_and_bytes(tmp_path):
    p = put(tmp_path / "f", b"12345")
    entry = {"size": 5, "sha256": sha(b"12345")}
    assert entry_unchanged(p, entry)
    p.write_bytes(b"12346")  # a same-size edit: only the hash tells
    assert not entry_unchanged(p, entry)
    p.write_bytes(b"1234")
    assert not entry_unchanged(p, entry)
    p.write_bytes(b"12345")
    for bad in [{"size": "5", "sha256": sha(b"12345")}, {"sha256": sha(b"12345")}, {"size": 5}, "entry", None]:
        assert not entry_unchanged(p, bad), bad
    assert not entry_unchanged(tmp_path / "missing", entry)
    assert not entry_unchanged(tmp_path, entry)  # a folder where a file was recorded
    link = tmp_path / "link"
    link.symlink_to(p)
    assert not entry_unchanged(link, entry)  # the same bytes through a link: nexus writes no links


def test_an_appended_log_is_nexus_s_while_it_holds_its_bytes_then_a_prefix_of_the_pending_line(tmp_path):
    head, line = b'{"step": 1}\n', '{"note": "\u00e9t\u00e9"}\n'  # non-ASCII: the bound is in bytes, not characters
    entry = {"size": len(head), "sha256": sha(head), "grows": True, "appending": line}
    p = tmp_path / "m.jsonl"
    for k in range(len(line.encode()) + 1):  # every prefix of the line, the whole line included
        p.write_bytes(head + line.encode()[:k])
        assert entry_unchanged(p, entry), k
    p.write_bytes(head + line.encode() + b"x")  # more than the line: the user appended
    assert not entry_unchanged(p, entry)
    p.write_bytes(head + b'{"user": 1}\n'[:5])  # not a prefix of the pending line
    assert not entry_unchanged(p, entry)
    p.write_bytes(head.replace(b"1", b"2") + line.encode()[:3])  # the recorded bytes edited
    assert not entry_unchanged(p, entry)
    p.write_bytes(head + line.encode()[:3])
    assert not entry_unchanged(p, {**entry, "grows": False})  # only a growing log may hold a pending line
    assert not entry_unchanged(p, {k: v for k, v in entry.items() if k != "grows"})
    assert not entry_unchanged(p, {**entry, "appending": None})
    assert not entry_unchanged(p, {**entry, "appending": 7})
    p.write_bytes(head[:-1])  # shorter than recorded
    assert not entry_unchanged(p, entry)


def test_a_library_folder_is_unchanged_while_it_is_a_folder(tmp_path):
    (tmp_path / "tb").mkdir()
    put(tmp_path / "tb" / "events", b"anything a library writes")
    assert entry_unchanged(tmp_path / "tb", {"dir": "library"})
    put(tmp_path / "file", b"x")
    assert not entry_unchanged(tmp_path / "file", {"dir": "library"})
    assert not entry_unchanged(tmp_path / "missing", {"dir": "library"})


def test_a_nested_output_is_unchanged_while_its_own_manifest_proves_all_of_it(tmp_path):
    sub = owned(tmp_path / "step_1", {"model.bin": b"w"})
    assert entry_unchanged(sub, {"dir": True})
    put(sub / "notes.txt", b"mine")
    assert not entry_unchanged(sub, {"dir": True})
    (sub / "notes.txt").unlink()
    (sub / MARKER).unlink()
    assert not entry_unchanged(sub, {"dir": True})  # no manifest: not proven
    assert not entry_unchanged(put(tmp_path / "f", b"x"), {"dir": True})


def test_ownership_problems_is_empty_when_nexus_wrote_everything_and_names_a_folder_without_a_manifest(tmp_path):
    d = owned(tmp_path / "run", {"config.yaml": b"c", "ckpt/a/model.bin": b"w", "ckpt/b.json": b"{}"})
    owned(d / "step_1", {"x": b"1"})
    (d / "tb").mkdir()
    put(d / "tb" / "deep" / "events", b"e")
    m = read_manifest(d)
    m["files"].update({"step_1": {"dir": True}, "tb": {"dir": "library"}, "gone.txt": {"size": 1, "sha256": "0"}})
    write_manifest(d, m)
    put(d / f"{manifest.MARKER_TMP}77", b'{"created": "2026-12-0')  # a manifest's temporary cut by a kill
    assert ownership_problems(d) == []  # listed files missing (gone.txt) are no problem: nothing to delete
    assert ownership_problems(tmp_path / "nothing") == [(".", "not written by nexus")]


def test_ownership_problems_names_changed_entries_first_then_everything_unlisted_and_not_its_contents(tmp_path):
    d = owned(tmp_path / "run", {"config.yaml": b"c", "z.txt": b"z", "checkpoint/model.bin": b"w"})
    m = read_manifest(d)
    m["files"]["checkpoint"] = {"dir": True}
    write_manifest(d, m)
    owned(d / "checkpoint", {"model.bin": b"w"})
    put(d / "z.txt", b"Z")  # same size, other bytes
    put(d / "config.yaml", b"cc")
    put(d / "checkpoint_notes.txt", b"a user's file beside a recorded folder of a longer name")
    put(d / "user" / "a" / "b.txt", b"u")
    (d / "empty").mkdir()
    put(d / ".nexus-run.tmp-x", b"not a manifest temporary")
    assert ownership_problems(d) == [
        ("config.yaml", "changed"),
        ("z.txt", "changed"),
        (".nexus-run.tmp-x", "not written by nexus"),
        ("checkpoint_notes.txt", "not written by nexus"),
        ("empty", "not written by nexus"),
        ("user", "not written by nexus"),
    ]
    assert ownership_problems(d, ignore=["user", "empty"]) == [
        ("config.yaml", "changed"),
        ("z.txt", "changed"),
        (".nexus-run.tmp-x", "not written by nexus"),
        ("checkpoint_notes.txt", "not written by nexus"),
    ]


def test_ownership_problems_holds_an_entry_reached_through_a_symlink_changed_even_when_its_bytes_match(tmp_path):
    outside = owned(tmp_path / "outside", {"f": b"same"})
    d = owned(tmp_path / "run", {"a.txt": b"a"})
    m = read_manifest(d)
    m["files"]["sub/f"] = {"size": 4, "sha256": sha(b"same")}
    m["files"]["nowhere/g"] = {"size": 1, "sha256": "0"}
    write_manifest(d, m)
    (d / "sub").symlink_to(outside)
    (d / "nowhere").symlink_to(tmp_path / "missing")  # a dangling link on the way to a listed name
    # the link to a folder leads to listed names (they are reported); the dangling one is no folder: named too
    assert ownership_problems(d) == [
        ("nowhere/g", "changed"),
        ("sub/f", "changed"),
        ("nowhere", "not written by nexus"),
    ]


def test_a_listed_folder_of_files_is_not_itself_a_problem_but_an_unlisted_file_inside_it_is(tmp_path):
    d = owned(tmp_path / "run", {"a/b/c.txt": b"c"})
    assert ownership_problems(d) == []
    put(d / "a" / "b" / "mine.txt", b"m")
    put(d / "a" / "other" / "x", b"x")
    assert ownership_problems(d) == [("a/b/mine.txt", "not written by nexus"), ("a/other", "not written by nexus")]


def test_an_entry_that_is_no_record_or_a_file_turned_folder_is_changed_and_what_the_folder_holds_is_named(tmp_path):
    d = owned(tmp_path / "run", {"a.txt": b"a"})
    m = read_manifest(d)
    m["files"]["junk"] = "not an entry"  # a hand-edited manifest: never proof
    write_manifest(d, m)
    put(d / "junk", b"x")
    (d / "a.txt").unlink()
    put(d / "a.txt" / "inside", b"the user's")  # a listed file's name now a folder of the user's files
    assert ownership_problems(d) == [
        ("a.txt", "changed"),
        ("junk", "changed"),
        ("a.txt/inside", "not written by nexus"),
    ]


# ----------------------------------------------------------------------------- since the rebase (main's new code)
from nexus.outdir.manifest import (  # noqa: E402
    dead_manifest_temporary,
    holds_recorded_output,
    is_library,
    library_file_owned,
    library_files,
    library_problems,
    manifest_temporary,
    output_hash,
    remove_dead_manifest_temporaries,
)

DEAD = 2**22 + 4321  # above the kernel's pid_max default: no process has it


@pytest.mark.parametrize(
    "head, want",
    [
        (b'{"created": "2026-01-01"', True),
        (b'{\n "created": "2', True),
        (b"{", True),
        (b'{"crea', True),
        (b"", True),
        (b'{"kind": "x"}', False),
        (b"notes", False),
        (b'{\n "kind"', False),
    ],
)
def test_a_manifest_temporary_holds_the_start_of_a_manifest_under_its_name(tmp_path, head, want):
    p = put(tmp_path / f"{manifest.MARKER_TMP}{DEAD}", head)
    assert manifest_temporary(p) is want
    assert dead_manifest_temporary(p) is want  # its writer is gone


def test_only_a_regular_file_under_the_temporarys_name_is_one(tmp_path):
    real = put(tmp_path / "real", b'{"created": ')
    assert not manifest_temporary(put(tmp_path / f"{manifest.MARKER_TMP}x1", b'{"created": '))
    assert not manifest_temporary(put(tmp_path / f"{manifest.MARKER_TMP}", b'{"created": '))
    (tmp_path / f"{manifest.MARKER_TMP}5").symlink_to(real)
    assert not manifest_temporary(tmp_path / f"{manifest.MARKER_TMP}5")
    (tmp_path / f"{manifest.MARKER_TMP}6").mkdir()
    assert not manifest_temporary(tmp_path / f"{manifest.MARKER_TMP}6")


def test_a_manifest_temporary_is_dead_only_when_its_writer_no_longer_runs(tmp_path, live_process, monkeypatch):
    start = b'{"created": "'
    mine = put(tmp_path / f"{manifest.MARKER_TMP}{os.getpid()}", start)
    alive = put(tmp_path / f"{manifest.MARKER_TMP}{live_process.pid}", start)
    dead = put(tmp_path / f"{manifest.MARKER_TMP}{DEAD}", start)
    user = put(tmp_path / f"{manifest.MARKER_TMP}{DEAD + 1}", b"the user's notes")
    assert not dead_manifest_temporary(mine) and not dead_manifest_temporary(alive) and dead_manifest_temporary(dead)
    assert not dead_manifest_temporary(user)
    assert remove_dead_manifest_temporaries(tmp_path) == [f"removed {dead.name} left by an interrupted manifest update"]
    assert mine.exists() and alive.exists() and user.exists() and not dead.exists()
    assert remove_dead_manifest_temporaries(tmp_path / "missing") == []

    def denied(pid, sig):
        raise PermissionError  # another user's process under that pid: alive

    monkeypatch.setattr(manifest.os, "kill", denied)
    assert not dead_manifest_temporary(put(tmp_path / f"{manifest.MARKER_TMP}{DEAD + 2}", start))


def test_a_recorded_output_is_recognised_by_its_hash_or_its_manifests(tmp_path):
    f = put(tmp_path / "model.bin", b"weights")
    assert output_hash(f) == sha(b"weights") and holds_recorded_output(f, sha(b"weights"))
    assert holds_recorded_output(f, "enter:" + sha(b"weights")) and not holds_recorded_output(f, sha(b"other"))
    d = owned(tmp_path / "ck", {"a": b"1"})
    assert output_hash(d) == sha((d / MARKER).read_bytes()) and holds_recorded_output(d, output_hash(d))
    assert not holds_recorded_output(tmp_path / "missing", sha(b""))
    (tmp_path / "link").symlink_to(f)
    assert not holds_recorded_output(tmp_path / "link", sha(b"weights"))
    assert not holds_recorded_output(put(tmp_path / "empty" / "x", b"").parent, sha(b""))  # a folder without manifest


def test_a_library_entry_is_a_record_whose_dir_is_library():
    assert is_library({"dir": "library"}) and is_library({"dir": "library", "files": {}})
    for e in [{"dir": True}, {"dir": "lib"}, {"size": 1}, "library", None, ["dir", "library"]]:
        assert not is_library(e), e


def test_a_library_folders_files_are_listed_by_their_bytes_and_its_links_left_out(tmp_path):
    put(tmp_path / "tb" / "events.1", b"abc")
    put(tmp_path / "tb" / "run" / "events.2", b"de")
    (tmp_path / "tb" / "empty").mkdir()
    (tmp_path / "tb" / "link").symlink_to(tmp_path / "tb" / "events.1")
    assert library_files(tmp_path / "tb") == {
        "events.1": {"size": 3, "sha256": sha(b"abc")},
        "run/events.2": {"size": 2, "sha256": sha(b"de")},
    }


def test_a_library_folder_is_the_librarys_while_each_file_starts_with_its_recorded_bytes(tmp_path):
    tb = tmp_path / "tb"
    put(tb / "events.1", b"abc")
    put(tb / "run" / "events.2", b"de")
    entry = {"dir": "library", "files": library_files(tb)}
    assert library_problems(tb, entry) == []
    put(tb / "events.1", b"abcdef")  # the library appended: still its file
    put(tb / "run" / "events.2", b"Xe")  # its recorded bytes changed
    put(tb / "mine.txt", b"the user's")
    put(tb / "run" / "deeper" / "x", b"x")
    (tb / "link").symlink_to(tb / "events.1")
    assert library_problems(tb, entry) == [
        ("link", "not written by nexus"),
        ("mine.txt", "not written by nexus"),
        ("run/events.2", "changed"),
        ("run/deeper/x", "not written by nexus"),
    ]
    assert library_problems(tb, {"dir": "library"}) == []  # an older record without its files: the library's whole
    assert library_problems(tb, {"dir": "library", "files": "x"}) == []
    assert entry_unchanged(tb, entry) is False and entry_unchanged(tb, {"dir": "library"}) is True


@pytest.mark.parametrize(
    "e",
    [
        None,
        "x",
        {"sha256": "0"},
        {"size": "3", "sha256": "0"},
        {"size": True, "sha256": "0"},
        {"size": -1, "sha256": sha(b"")},
        {"size": 4, "sha256": "0"},
    ],
)
def test_a_library_file_with_an_unusable_or_longer_record_is_not_owned(tmp_path, e):
    put(tmp_path / "tb" / "f", b"abc")
    assert not library_file_owned(tmp_path / "tb", "f", {"dir": "library", "files": {"f": e}})


def test_a_library_file_is_owned_when_listed_with_its_start_or_when_the_record_lists_none(tmp_path):
    tb = tmp_path / "tb"
    put(tb / "f", b"abcdef")
    assert library_file_owned(tb, "f", {"dir": "library", "files": {"f": {"size": 3, "sha256": sha(b"abc")}}})
    assert library_file_owned(tb, "f", {"dir": "library", "files": {"f": {"size": 6, "sha256": sha(b"abcdef")}}})
    assert library_file_owned(tb, "f", {"dir": "library", "files": {"f": {"size": 0, "sha256": sha(b"")}}})
    assert not library_file_owned(tb, "f", {"dir": "library", "files": {"f": {"size": 3, "sha256": sha(b"abd")}}})
    assert not library_file_owned(tb, "g", {"dir": "library", "files": {"f": {"size": 3, "sha256": sha(b"abc")}}})
    assert library_file_owned(tb, "anything", {"dir": "library"}) and library_file_owned(tb, "f", None)
    (tb / "l").symlink_to(tb / "f")
    assert not library_file_owned(tb, "l", {"dir": "library", "files": {"l": {"size": 3, "sha256": sha(b"abc")}}})


def test_ownership_problems_names_a_library_folders_unproven_files_and_skips_ignored_entries(tmp_path):
    d = owned(tmp_path / "run", {"config.yaml": b"c", "x.txt": b"x"})
    put(d / "tb" / "events", b"e")
    record(d, "train run", library_dirs=["tb"])
    put(d / "tb" / "mine.txt", b"m")
    put(d / "x.txt", b"changed")
    put(d / "config.yaml", b"edited")  # sorted before the library folder: its problem is kept beside tb's
    assert ownership_problems(d) == [
        ("config.yaml", "changed"),
        ("tb/mine.txt", "not written by nexus"),
        ("x.txt", "changed"),
    ]
    assert ownership_problems(d, ignore=["x.txt"]) == [
        ("config.yaml", "changed"),
        ("tb/mine.txt", "not written by nexus"),
    ]
    assert ownership_problems(d, ignore=["config.yaml"]) == [
        ("tb/mine.txt", "not written by nexus"),
        ("x.txt", "changed"),
    ]


def test_checking_a_manifest_temporarys_writer_sends_it_no_signal(tmp_path, signal_noting_process):
    p = signal_noting_process
    assert not dead_manifest_temporary(put(tmp_path / f"{manifest.MARKER_TMP}{p.pid}", b'{"created": "'))
    assert p.still_running()  # the probe only asks whether the pid exists


def test_a_temporary_that_cannot_be_read_is_not_taken_for_the_manifests(tmp_path, monkeypatch):
    p = put(tmp_path / f"{manifest.MARKER_TMP}{DEAD}", b'{"created": "')

    def unreadable(*a, **k):
        raise PermissionError(13, "Permission denied")  # root reads anything: the refusal is simulated

    monkeypatch.setattr(manifest, "open", unreadable, raising=False)
    assert not manifest_temporary(p) and not dead_manifest_temporary(p)
