"""Crash-safe writes: write beside the target, fsync, then rename into place.

Replacing an existing output takes two renames, and a kill between them leaves nothing under the
final name. Every temporary name is recorded in the writer's lock journal (nexus.outdir.lock) before
it is created, so every moment is recoverable from the record:

    .NAME.tmp-TAG   being written (incomplete; removed on recovery)
    .NAME.new-TAG   complete and fsynced, about to become NAME
    .NAME.old-TAG   the previous NAME, moved aside; removed once the new one is in place
    .NAME.del-TAG   an old step checkpoint being pruned (renamed first, so a half-deleted folder is
                    never left under a final name)

`recover_recorded` finishes or rolls back exactly the names a dead writer recorded: a complete `.new`
(else the `.old`) goes back under NAME when NAME is missing; the rest is removed. Nothing nexus did
not record is ever touched.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

from .config import ConfigError
from .outdir.crash import crash_point
from .outdir.lock import OutputLock, acquire_output_lock, held_lock, holder_alive, is_rank0, lock_file, read_lock
from .outdir.manifest import manifest_of_tree, ownership_problems, read_manifest, write_manifest

_SIDE = re.compile(r"^\.(?P<name>.+)\.(?P<state>tmp|new|old|del)-(?P<tag>\d+-\d+)$")


def fsync_tree(root: Path) -> None:
    """Flush every file and directory below `root` (and root itself) to disk."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            fsync_file(Path(dirpath) / f)
        fsync_dir(Path(dirpath))


def umask_file_mode() -> int:
    """The mode a plain `open(path, "w")` gives a new file under this process's umask."""
    mask = os.umask(0)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return 0o666 & ~mask


def respect_umask(root: Path) -> None:
    """Give every file below `root` (or `root` itself, a file) the umask's mode. safetensors writes its
    files 0600 whatever the umask, which leaves a checkpoint on a shared disk unreadable to collaborators."""
    mode = umask_file_mode()
    root = Path(root)
    files = [root] if root.is_file() else [Path(d) / f for d, _, fs in os.walk(root) for f in fs]
    for f in files:
        os.chmod(f, mode)  # nexus writes no executables


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems do not support fsync on directories; the rename still is atomic
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (this one included)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_alive = pid_alive  # the name nexus.data.prepare imports


def new_tag() -> str:
    return f"{os.getpid()}-{time.monotonic_ns()}"


def side_name(final: Path, state: str, tag: str) -> Path:
    return final.parent / f".{final.name}.{state}-{tag}"


def _remove(p: Path) -> bool:
    """Delete a leftover temporary; whether it is gone. A delete that fails (permissions, a busy mount)
    neither undoes a completed save nor passes silently: one line names what is left and why."""
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    except OSError as e:
        print(f"nexus: warning: could not remove {p} ({e.strerror or e}); it is not needed, delete it by hand",
              file=sys.stderr)
        return False
    return True


def recover_recorded(lock: OutputLock) -> list[str]:
    """Finish or roll back the interrupted swaps whose temporaries a dead holder of `lock` recorded
    (`lock.taken_over`); returns a line per action. Names that do not follow the pattern are left."""
    actions = []
    entries = []
    for rel in lock.taken_over:
        p = lock.base / rel
        m = _SIDE.match(p.name)
        if m:
            entries.append((p, m))
    for state in ("new", "old", "tmp", "del"):  # a complete new version wins over the previous one
        for p, m in entries:
            if m["state"] != state or not (p.exists() or p.is_symlink()):
                continue
            final = p.parent / m["name"]
            if state in ("new", "old") and not final.exists():
                os.replace(p, final)
                fsync_dir(p.parent)
                actions.append(f"restored {final} from an interrupted save ({state} version)")
            else:
                if _remove(p):  # else _remove said what is left
                    actions.append(f"removed {p.name} left by an interrupted save")
    for rel in lock.taken_over:
        lock.done(lock.base / rel)
    lock.taken_over = []
    return actions


def recover_interrupted(path) -> list[str]:
    """Before reading `path` (a checkpoint): when the lock of it, or of the folder holding it, was left
    by a dead writer, finish that writer's recorded swaps. A live writer's lock is left alone."""
    p = Path(path)
    actions = []
    for target in (p, p.parent):
        lf = lock_file(target)
        if not lf.is_file():
            continue
        holder, _ = read_lock(lf)
        if holder and holder_alive(holder) is not False:
            continue
        try:
            with acquire_output_lock(target) as lk:
                actions += recover_recorded(lk)
        except (ConfigError, OSError):
            pass  # another process is recovering it, or the place is read-only: the reader reports what it finds
    return actions


def guard_output(path, kind: str, **check):
    """The one entry of every writer: check the output path (nexus.outdir.check_output, with `check`'s
    keywords), take its one-writer lock (rank 0 only), finish a dead writer's recorded swaps, and check
    again under the lock (the path may have changed while waiting). Release the lock when done (it is a
    context manager); a lock taken over from a dead process is noted on stderr."""
    from .outdir import check_output

    check_output(path, kind, **check)
    if not is_rank0():
        import contextlib

        return contextlib.nullcontext()
    lk = acquire_output_lock(Path(path), check.get("flag", "--out"))
    try:
        notes = [lk.note] if lk.note else []
        if lk.taken_over:
            notes += recover_recorded(lk)
        for note in notes:
            print(f"nexus: note: {note}", file=sys.stderr)
        check_output(path, kind, **check)
    except BaseException:
        lk.release()
        raise
    return lk


def output_lock(final: Path) -> OutputLock | None:
    """The lock to journal `final`'s temporaries into: the one this process holds on it (or above it),
    else a new one for the duration of the write. None on torchrun ranks other than 0."""
    if not is_rank0():
        return None
    lk = acquire_output_lock(final)
    if lk.taken_over:
        recover_recorded(lk)
    return lk


def atomic_dir_write(final, write_fn, kind: str, hashes=None) -> Path:
    """Call write_fn(tmp_dir), write its ownership manifest (of `kind`, listing every file; `hashes`:
    callable(tmp_dir) -> {relative path: sha256} already known), fsync it, then move it to `final`,
    replacing an earlier nexus output last.

    An existing `final` nexus cannot prove it wrote entirely (see nexus.outdir.manifest) is refused,
    never replaced: commands check this up front with nexus.outdir.check_output; this is the last
    line of defence."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    lk = output_lock(final)
    try:
        if final.exists() and (not final.is_dir() or (any(final.iterdir()) and ownership_problems(final))):
            raise ConfigError(f"{str(final)!r} exists and holds files nexus did not write (valid: a new or empty "
                              "directory; nexus never replaces what it did not write)")
        tag = new_tag()
        tmp = side_name(final, "tmp", tag)
        if lk:
            lk.pending(tmp)
        tmp.mkdir()
        try:
            write_fn(tmp)
            write_manifest(tmp, manifest_of_tree(tmp, kind, hashes(tmp) if hashes else None))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return swap_into_place(tmp, final, tag, lk)
    finally:
        if lk:
            lk.release()


def swap_into_place(tmp: Path, final: Path, tag: str, lk: OutputLock | None) -> Path:
    """fsync the finished `tmp` (named .NAME.tmp-TAG) and rename it to `final` by the recoverable
    protocol above; also used by the sharded (FSDP2) checkpoint writer, whose tmp all ranks fill."""
    note = lk.pending if lk else (lambda p: None)
    old = ready = None
    try:
        respect_umask(tmp)
        fsync_tree(tmp)
        crash_point("swap-before-rename")
        if not final.exists():
            os.replace(tmp, final)
            fsync_dir(final.parent)
            if lk:
                lk.done(tmp)
            return final
        ready = side_name(final, "new", tag)
        old = side_name(final, "old", tag)
        note(ready)
        note(old)
        os.replace(tmp, ready)
        fsync_dir(final.parent)
        os.replace(final, old)
        crash_point("swap-between-renames")
        os.replace(ready, final)
        crash_point("swap-after-renames")
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not final.exists() and old.exists():  # failed between the renames: put the old one back
            os.replace(old, final)
        elif ready is not None and not ready.exists() and old.exists():  # failed after them: the new one is in place
            _remove(old)  # the lock's release drops its record, so nothing else would ever remove it
        if ready is not None:  # the complete new version rolled back with it: the lock's release drops its record
            _remove(ready)
        raise
    _remove(old)
    if lk:
        for p in (tmp, ready, old):
            lk.done(p)
    return final


def remove_recorded(lk: OutputLock | None, path: Path) -> None:
    """Remove a nexus-owned folder by renaming it aside first (recorded), then deleting: a kill
    mid-delete leaves only a recorded temporary, never a half-deleted folder under its real name."""
    aside = side_name(path, "del", new_tag())
    if lk:
        lk.pending(aside)
    os.replace(path, aside)
    fsync_dir(path.parent)
    crash_point("prune-after-rename")
    _remove(aside)
    if lk:
        lk.done(aside)


def write_file_atomic(final: Path, write_fn, lk: OutputLock | None = None) -> Path:
    """write_fn(tmp_path) writes a file; it is fsynced and renamed to `final` (the temporary is
    recorded in `lk`'s journal and removed on any failure)."""
    final = Path(final)
    tmp = side_name(final, "tmp", new_tag())
    lk = lk or held_lock(final)
    if lk:
        lk.pending(tmp)
    try:
        write_fn(tmp)
        respect_umask(tmp)
        fsync_file(tmp)
        crash_point("file-before-rename")
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        tmp.unlink(missing_ok=True)
        if lk:
            lk.done(tmp)
    return final


def write_text_atomic(path, text: str) -> None:
    """Replace one file's contents atomically (temporary name, fsync, rename)."""
    def write(tmp: Path) -> None:
        tmp.write_text(text)

    write_file_atomic(Path(path), write)


__all__ = ["atomic_dir_write", "swap_into_place", "recover_recorded", "recover_interrupted", "remove_recorded",
           "write_file_atomic", "write_text_atomic", "read_manifest", "fsync_tree", "fsync_dir"]
