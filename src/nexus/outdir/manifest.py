"""The ownership manifest: the `.nexus-run` file nexus writes into every output directory it creates.

It names the output's kind and every entry nexus wrote there, each with its size and sha256, so what
nexus owns is proven by the record, never guessed from file names:

    {"kind": "train run", "created": "...", "files": {
        "config.yaml":   {"size": 812, "sha256": "..."},
        "metrics.jsonl": {"size": 4096, "sha256": "...", "grows": true,    # nexus appends to it
                          "appending": "{...}\\n"},  # the line being appended: the file is nexus's when it
                          # holds the recorded bytes, then at most a prefix of this line (a kill mid-append)
        "step_0000100":  {"dir": true},      # a nested nexus output, proven by its own manifest
        "tb":            {"dir": "library", "files": {"events.out": {"size": 88, "sha256": "..."}}}
    }}                   # a folder a logging library nexus started writes (TensorBoard, W&B): the files it
                         # had written when nexus last recorded it; the library appends to its files, so a
                         # listed file is the library's while it starts with the recorded bytes

A folder that nexus fills in place (a run directory) may also list `"leftovers"`: nexus's own temporaries
(`.checkpoint.old-TAG`, `.step_N.del-TAG`, see nexus.atomic) whose delete failed or was interrupted, each by its
inode and modification time, so the next save or resume of the folder removes them (nexus.atomic.retry_leftovers).
A name that holds anything else by then (a folder the user put there under that name, even on a reused inode) is
not nexus's and is left alone.

Whole-directory outputs (a checkpoint, an analysis, an HF export) list every file below them by its
relative path. A file that is listed and unchanged is nexus's; a listed file whose bytes changed, and
anything not listed, is the user's.

The manifest is input like any other: an entry that is not a plain relative path inside the directory
(absolute, `..`, empty parts) makes the whole manifest refused with one line (ManifestError), and an
entry reached through a symlink is never nexus's (nexus writes no symlinks), so a forged or corrupted
manifest can never point a delete outside the output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path, PurePosixPath

from ..config import ConfigError
from .crash import crash_point

MARKER = ".nexus-run"
LEFTOVERS = "leftovers"  # the manifest's record of nexus's own temporaries it could not delete yet
# the temporary names nexus.atomic creates beside an output NAME: .NAME.tmp|new|old|del-PID-NS
SIDE = re.compile(r"^\.(?P<name>.+)\.(?P<state>tmp|new|old|del)-(?P<tag>\d+-\d+)$")
MARKER_TMP = ".nexus-run.tmp-"  # + pid: the manifest's own temporary (per process: torchrun ranks may mark
# one shared cache directory at once); a kill mid-write can leave one, which is never taken for a user's file


def sha256_of(path: Path, limit: int | None = None) -> str:
    """sha256 of a file's bytes (of its first `limit` bytes when given)."""
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h.hexdigest()


def _is_marker_tmp(name: str) -> bool:
    return name.startswith(MARKER_TMP) and name[len(MARKER_TMP) :].isdigit()


# how write_manifest's text begins (sort_keys puts "created" first; indented or not)
_MANIFEST_STARTS = (b'{"created": "', b'{\n "created": "')


def manifest_temporary(p: Path) -> bool:
    """Whether `p` is the manifest's own temporary: named `.nexus-run.tmp-PID`, a regular file, and holding
    the start of a manifest as write_manifest writes it (or a part of that start: a kill mid-write). A
    user's file under such a name holds something else, and stays the user's."""
    if not _is_marker_tmp(p.name) or p.is_symlink() or not p.is_file():
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return any(head.startswith(s) or s.startswith(head) for s in _MANIFEST_STARTS)


def dead_manifest_temporary(p: Path) -> bool:
    """The manifest's temporary left by a writer no longer running (killed while replacing the manifest):
    the manifest beside it, if any, is the previous whole one, and the temporary is nothing."""
    if not manifest_temporary(p):
        return False
    return not pid_alive(int(p.name[len(MARKER_TMP) :]))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (this one included; one of another user too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ManifestError(ConfigError):
    """A manifest naming something outside its own directory: refused, never acted on."""


def confined_name(rel) -> bool:
    """Whether `rel` is a plain relative path that stays inside the directory it is relative to:
    no absolute path, no `..` or `.` part, no empty part, not the manifest itself."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        return False
    parts = rel.split("/")  # an absolute path's first part is empty
    # a name longer than any filesystem allows is none nexus wrote (and os.lstat on it raises ENAMETOOLONG)
    return all(part not in ("", ".", "..") and len(os.fsencode(part)) <= 255 for part in parts) and rel != MARKER


def through_symlink(directory: Path, rel: str) -> bool:
    """Whether `directory / rel`, or a folder on the way to it below `directory`, is a symlink."""
    p = Path(directory)
    for part in PurePosixPath(rel).parts:
        p = p / part
        if p.is_symlink():
            return True
    return False


def read_manifest(directory) -> dict | None:
    """The manifest of `directory`, or None when it has none (or an unreadable one: not proof).
    Raises ManifestError (one line) when an entry names a path outside `directory`."""
    f = Path(directory) / MARKER
    if not f.is_file() or f.is_symlink():  # nexus writes its manifest as a plain file
        return None
    try:
        m = json.loads(f.read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested past Python's stack (forged)
        return None
    if not isinstance(m, dict) or not isinstance(m.get("kind"), str):
        return None
    files = m.get("files")
    m["files"] = files if isinstance(files, dict) else {}
    for rel in m["files"]:
        if not confined_name(rel):
            raise ManifestError(
                f"{str(f)!r} lists {rel!r}, which is not a path inside {str(Path(directory))!r} "
                "(valid: relative names without '..'; nexus never writes such an entry, so the "
                "file was edited: restore it or move the folder's contents out by hand)"
            )
    return m


def write_manifest(directory, manifest: dict, durable: bool = True) -> None:
    """Write `manifest` atomically (temporary name in the same directory, fsync, rename). durable=False
    skips the fsync: the rename alone survives any kill of the process (the page cache is the kernel's);
    only a power loss can undo it."""
    d = Path(directory)
    tmp = d / f"{MARKER_TMP}{os.getpid()}"
    with open(tmp, "w") as f:
        # indented to be read by people, except on the per-line path (the C encoder skips indentation)
        f.write(json.dumps(manifest, indent=1 if durable else None, sort_keys=True) + "\n")
        f.flush()
        if durable:
            os.fsync(f.fileno())
    crash_point("manifest-before-rename")
    os.replace(tmp, d / MARKER)


def remove_dead_manifest_temporaries(out: Path) -> list[str]:
    """The manifest's own temporary (`.nexus-run.tmp-PID`) left by a writer killed while replacing it:
    removed once its process is gone (the manifest beside it is the previous whole one). Call it holding
    the output's lock. Returns a line per file removed."""
    notes = []
    for p in sorted(Path(out).glob(f"{MARKER_TMP}*")) if Path(out).is_dir() else []:
        if dead_manifest_temporary(p):
            p.unlink()
            notes.append(f"removed {p.name} left by an interrupted manifest update")
    return notes


def output_hash(path: Path) -> str:
    """What a lock journal's `ready` line records: a file's sha256, or a folder output's own manifest's
    (which lists the sha256 of every file in it)."""
    return sha256_of(path / MARKER if path.is_dir() else path)


def holds_recorded_output(final: Path, ready: str) -> bool:
    """Whether `final` holds the output a journal's `ready` line recorded (`ready`: its hash, prefixed with
    `enter:` when the writer enters it in its folder's manifest): nexus's rename completed before a kill."""
    if final.is_symlink() or not (final.is_dir() or final.is_file()):
        return False
    try:
        return output_hash(final) == ready.removeprefix("enter:")
    except OSError:
        return False


def file_entry(path: Path, grows: bool = False, sha256: str | None = None) -> dict:
    entry = {"size": path.stat().st_size, "sha256": sha256 or sha256_of(path)}
    if grows:
        entry["grows"] = True
    return entry


def new_manifest(kind: str) -> dict:
    return {"kind": kind, "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "files": {}}


def manifest_of_tree(directory, kind: str, hashes: dict[str, str] | None = None) -> dict:
    """A manifest listing every file below `directory` (a whole-directory output written by nexus);
    `hashes` reuses digests already computed (a checkpoint's meta.json)."""
    d = Path(directory)
    m = new_manifest(kind)
    for p in sorted(d.rglob("*")):
        if p.is_file() and p.name != MARKER and not _is_marker_tmp(p.name):
            rel = p.relative_to(d).as_posix()
            m["files"][rel] = file_entry(p, sha256=(hashes or {}).get(rel))
    return m


def record(directory, kind: str, files=(), grows=(), dirs=(), library_dirs=()) -> None:
    """Add (or refresh) entries nexus just wrote in `directory`, creating its manifest of `kind` if it
    has none. files/grows: file names (grows: append-only logs); dirs: nested nexus outputs;
    library_dirs: directories a logging library writes."""
    d = Path(directory)
    m = read_manifest(d) or new_manifest(kind)
    for name in files:
        m["files"][name] = file_entry(d / name)
    for name in grows:
        m["files"][name] = file_entry(d / name, grows=True)
    for name in dirs:
        m["files"][name] = {"dir": True}
    for name in library_dirs:
        m["files"][name] = {"dir": "library", "files": library_files(d / name)}
    write_manifest(d, m)


def is_library(entry) -> bool:
    return isinstance(entry, dict) and entry.get("dir") == "library"


def library_files(folder: Path) -> dict:
    """{relative path: {size, sha256}} of every regular file below a logging library's folder (symlinks are
    not followed: the library writes none)."""
    found = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                found[p.relative_to(folder).as_posix()] = file_entry(p)
    return found


def library_problems(folder: Path, entry: dict) -> list[tuple[str, str]]:
    """[(path relative to `folder`, "changed" | "not written by nexus")] for what in a logging library's
    folder nexus cannot prove the library wrote: a file the record does not list (a user's, dropped into
    it), or a listed file that no longer starts with the recorded bytes. An entry of an older manifest
    without its files is the library's as a whole."""
    listed = entry.get("files")
    if not isinstance(listed, dict):
        return []
    problems = []
    for dirpath, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            p = Path(dirpath) / name
            rel = p.relative_to(folder).as_posix()
            if p.is_dir() and not p.is_symlink():
                continue
            e = listed.get(rel)
            if not confined_name(rel) or e is None:
                problems.append((rel, "not written by nexus"))
            elif not _starts_with_recorded(p, e):
                problems.append((rel, "changed"))
    return problems


def _starts_with_recorded(p: Path, e) -> bool:
    if (
        p.is_symlink()
        or not p.is_file()
        or not isinstance(e, dict)
        or not isinstance(e.get("size"), int)
        or isinstance(e.get("size"), bool)
        or e["size"] < 0
    ):
        return False
    return p.stat().st_size >= e["size"] and sha256_of(p, e["size"]) == e.get("sha256")


def library_file_owned(folder: Path, rel: str, entry: dict) -> bool:
    """Whether `folder/rel` is a file the library wrote (listed, starting with its recorded bytes)."""
    listed = entry.get("files") if isinstance(entry, dict) else None
    return not isinstance(listed, dict) or _starts_with_recorded(folder / rel, listed.get(rel))


def forget(directory, names) -> None:
    """Drop entries from `directory`'s manifest (before nexus removes them)."""
    m = read_manifest(directory)
    if m is None:
        return
    for name in names:
        m["files"].pop(name, None)
    write_manifest(directory, m)


def record_growing(directory, kind: str, name: str, size: int, sha256: str, appending: str | None = None) -> None:
    """Record an append-only log nexus writes line by line: its bytes so far (`size`, `sha256`, known
    to the writer without reading the file again) and the line it is about to append. Not fsynced: the
    lines themselves are not (a log is flushed, not synced, per line), and an fsync per line cost ~6 ms
    on an ext4 virtual disk (benchmarks/speed/metrics_sink_overhead.py)."""
    d = Path(directory)
    m = read_manifest(d) or new_manifest(kind)
    entry = {"size": size, "sha256": sha256, "grows": True}
    if appending:
        entry["appending"] = appending
    m["files"][name] = entry
    write_manifest(d, m, durable=False)


def entry_unchanged(path: Path, entry: dict) -> bool:
    """True when `path` still holds what the manifest entry records. Nothing reached through a symlink
    is (nexus writes none); callers pass paths below the manifest's directory."""
    if not isinstance(entry, dict) or path.is_symlink():
        return False
    if entry.get("dir") == "library":
        return path.is_dir() and not library_problems(path, entry)
    if entry.get("dir"):
        return path.is_dir() and read_manifest(path) is not None and not ownership_problems(path)
    if not path.is_file() or not isinstance(entry.get("size"), int):
        return False
    size = path.stat().st_size
    if size == entry["size"]:
        return sha256_of(path) == entry.get("sha256")
    pending = entry.get("appending") if entry.get("grows") else None
    if not isinstance(pending, str) or not entry["size"] < size <= entry["size"] + len(pending.encode()):
        return False  # a log nexus appends to holds its recorded bytes, then at most the line being appended
    with open(path, "rb") as f:
        f.seek(entry["size"])
        tail = f.read()
    return pending.encode().startswith(tail) and sha256_of(path, entry["size"]) == entry.get("sha256")


def leftover_entries(m: dict | None) -> dict[str, dict]:
    """The leftovers a manifest records ({name: {"ino": N, "mtime_ns": T}}), each a temporary's name (one part,
    `.NAME.STATE-TAG`) with its inode and modification time; anything else under the key (an edited manifest) is
    ignored, never acted on."""
    found = m.get(LEFTOVERS) if isinstance(m, dict) else None
    if not isinstance(found, dict):
        return {}
    return {
        name: e
        for name, e in found.items()
        if confined_name(name)
        and "/" not in name
        and SIDE.match(name)
        and isinstance(e, dict)
        and isinstance(e.get("ino"), int)
        and isinstance(e.get("mtime_ns"), int)
    }


def is_recorded_leftover(directory, name: str, entry: dict) -> bool:
    """Whether `directory/name` is still the very leftover the manifest recorded: the same inode and modification
    time, not a symlink (a folder or file put under the name since is someone else's, even on a reused inode)."""
    p = Path(directory) / name
    try:
        st = os.lstat(p)
    except OSError:
        return False
    return not p.is_symlink() and (st.st_ino, st.st_mtime_ns) == (entry.get("ino"), entry.get("mtime_ns"))


def owned_leftovers(directory, m: dict | None = None) -> set[str]:
    """The names of `directory` that are leftovers its manifest records and that are still those very ones."""
    m = read_manifest(directory) if m is None else m
    return {n for n, e in leftover_entries(m).items() if is_recorded_leftover(directory, n, e)}


def record_leftover(directory, name: str) -> bool:
    """Record `directory/name`, a temporary nexus made there and could not delete (its delete failed or was
    interrupted), in the folder's manifest so the next save or resume of the folder removes it (recorded again
    after a retry that deleted part of it). Only a folder with a manifest holds such a record; returns whether
    it was recorded."""
    d = Path(directory)
    m = read_manifest(d)
    if m is None or not SIDE.match(name):
        return False
    st = os.lstat(d / name)
    m[LEFTOVERS] = {**leftover_entries(m), name: {"ino": st.st_ino, "mtime_ns": st.st_mtime_ns}}
    write_manifest(d, m)
    return True


def forget_leftovers(directory, names) -> None:
    """Drop leftovers from `directory`'s record (gone, or no longer the ones recorded)."""
    m = read_manifest(directory)
    if m is None or LEFTOVERS not in m:
        return
    left = {n: e for n, e in leftover_entries(m).items() if n not in set(names)}
    if left:
        m[LEFTOVERS] = left
    else:
        del m[LEFTOVERS]
    write_manifest(directory, m)


def ownership_problems(directory, ignore=()) -> list[tuple[str, str]]:
    """[(relative path, "changed" | "not written by nexus")] for everything in `directory` nexus cannot
    prove it wrote; empty when it owns all of it. `ignore`: names to leave out (recorded temporaries).
    A leftover the manifest records (and that is still the one recorded) is nexus's."""
    d = Path(directory)
    m = read_manifest(d)
    if m is None:
        return [(".", "not written by nexus")]
    ignore = {*ignore, *owned_leftovers(d, m)}
    listed = m["files"]
    problems = []
    for rel, entry in sorted(listed.items()):
        p = d / rel
        if rel in ignore:
            continue
        if is_library(entry) and p.is_dir() and not through_symlink(d, rel):
            problems += [(f"{rel}/{inner}", why) for inner, why in library_problems(p, entry)]
        elif through_symlink(d, rel) or (p.exists() and not entry_unchanged(p, entry)):
            problems.append((rel, "changed"))
    covered = {rel for rel, e in listed.items() if isinstance(e, dict) and e.get("dir")}
    parents = {q.as_posix() for rel in listed for q in Path(rel).parents}  # every folder above a listed name
    skip = set(covered) | set(ignore)  # folders whose contents are accounted for (or reported) as a whole
    for p in sorted(d.rglob("*")):
        rel = p.relative_to(d).as_posix()
        if (
            rel == MARKER
            or manifest_temporary(p)
            or rel in listed
            or rel in skip
            or any(rel.startswith(c + "/") for c in skip)
        ):
            continue
        if p.is_dir() and rel in parents:
            continue  # a folder that holds listed files
        problems.append((rel, "not written by nexus"))
        if p.is_dir():
            skip.add(rel)
    return problems
