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

A temporary whose delete fails (permissions, a busy mount) or is interrupted (Ctrl-C mid-delete) outlives the
lock whose journal recorded it; in a folder with a manifest (a run directory) it is recorded there as a
leftover instead, and `retry_leftovers` removes it at the folder's next save or resume, one line each time it
removes or cannot remove one. Outside such a folder the warning line says to delete it by hand.

A finished output is entered in its folder's manifest (when the writer records it there: a run's
checkpoints and files) after its rename and before the journal says `done`. A kill between the two is
recognised on recovery: the journal's `ready` line holds the output's hash (a file's bytes, a folder's
own manifest), and a NAME with that hash whose temporary is gone is nexus's completed rename, so it is
entered then. Every kill leaves an output the same command continues.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from .config import ConfigError
from .outdir.crash import crash_point
from .outdir.lock import SIDE as _SIDE
from .outdir.lock import OutputLock, acquire_output_lock, held_lock, holder_alive, is_rank0, lock_file, read_lock
from .outdir.manifest import (
    entry_unchanged,
    forget_leftovers,
    holds_recorded_output,
    is_recorded_leftover,
    leftover_entries,
    manifest_of_tree,
    output_hash,
    ownership_problems,
    pid_alive,  # re-exported: data/prepare and the tests import it from here
    read_manifest,
    record,
    record_leftover,
    remove_dead_manifest_temporaries,
    write_manifest,
)


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


_alive = pid_alive  # the name nexus.data.prepare imports


def new_tag() -> str:
    return f"{os.getpid()}-{time.monotonic_ns()}"


def side_name(final: Path, state: str, tag: str) -> Path:
    return final.parent / f".{final.name}.{state}-{tag}"


_NAMED: set[Path] = set()  # leftovers this process has said it could not remove: said once, not at every save


def _delete(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)


def _remove(p: Path) -> bool:
    """Delete a leftover temporary; whether it is gone. A delete that fails (permissions, a busy mount)
    neither undoes a completed save nor passes silently: one line names what is left and why. In a folder
    with a manifest the leftover is recorded there (so is one whose delete is interrupted), and the folder's
    next save or resume removes it (retry_leftovers): the lock's release drops the journal that named it."""
    try:
        _delete(p)
    except OSError as e:
        later = _keep_for_retry(p)
        _NAMED.add(p)
        print(
            f"nexus: warning: could not remove {p} ({e.strerror or e}); it is not needed, "
            + (f"nexus removes it at the next save or resume of {p.parent}" if later else "delete it by hand"),
            file=sys.stderr,
        )
        return False
    except BaseException:  # interrupted mid-delete: recorded, so the next save or resume finishes the delete
        _keep_for_retry(p)
        raise
    return True


def _keep_for_retry(p: Path) -> bool:
    """Record `p` (a temporary nexus made and could not delete) in its folder's manifest; whether it was."""
    if not (p.exists() or p.is_symlink()):
        return False
    try:
        return record_leftover(p.parent, p.name)
    except (OSError, ConfigError):  # a manifest that cannot be read or written: the user is told to delete it
        return False


def retry_leftovers(folder) -> list[str]:
    """Remove the leftovers `folder`'s manifest records (nexus's own temporaries an earlier save could not
    delete), each only while it is still the very folder or file recorded; call it holding the folder's lock.
    Returns a line per leftover removed. One that still cannot be removed stays recorded and is named on one
    warning line (once per process); a name that holds something else now loses its record and is left alone."""
    d = Path(folder)
    try:
        entries = leftover_entries(read_manifest(d))
    except ConfigError:  # a manifest naming paths outside its folder: the command's own checks refuse it
        return []
    notes, drop = [], []
    for name, entry in sorted(entries.items()):
        p = d / name
        if not (p.exists() or p.is_symlink()):
            drop.append(name)  # deleted by hand meanwhile
            continue
        if not is_recorded_leftover(d, name, entry):
            drop.append(name)
            notes.append(f"left {name} alone: it is no longer the leftover nexus recorded under that name")
            continue
        try:
            _delete(p)
        except OSError as e:
            _keep_for_retry(p)  # a partial delete changed it: the record follows what is left
            if p not in _NAMED:
                _NAMED.add(p)
                print(
                    f"nexus: warning: could not remove {p} ({e.strerror or e}), left by an earlier save; it is "
                    f"not needed, nexus tries again at the next save or resume of {d}",
                    file=sys.stderr,
                )
            continue
        drop.append(name)
        notes.append(f"removed {name}, left by an earlier save that could not delete it")
    if drop:
        forget_leftovers(d, drop)
    return notes


def recover_recorded(lock: OutputLock) -> list[str]:
    """Finish or roll back the interrupted swaps whose temporaries a dead holder of `lock` recorded
    (`lock.taken_over`); returns a line per action. Names that do not follow the pattern are left."""
    actions = []
    entries = []
    for rel in lock.taken_over:
        p = lock.base / rel
        m = _SIDE.match(p.name)
        if m:
            entries.append((p, m, lock.taken_ready.get(rel)))
    for state in ("new", "old", "tmp", "del"):  # a complete new version wins over the previous one
        for p, m, ready in entries:
            final = p.parent / m["name"]
            if m["state"] != state:
                continue
            if not (p.exists() or p.is_symlink()):
                if ready and state in ("tmp", "new") and enter_completed(final, ready):
                    actions.append(f"recorded {final}, whose save completed just before the writer stopped")
                continue
            if state in ("new", "old") and not final.exists():
                os.replace(p, final)
                fsync_dir(p.parent)
                if state == "new" and ready:
                    enter_completed(final, ready)
                actions.append(f"restored {final} from an interrupted save ({state} version)")
            else:
                if _remove(p):  # else _remove said what is left
                    actions.append(f"removed {p.name} left by an interrupted save")
    for rel in lock.taken_over:
        lock.done(lock.base / rel)
    lock.taken_over, lock.taken_ready = [], {}
    return actions


def _ready_hash(path: Path, enter: bool) -> str:
    return ("enter:" if enter else "") + output_hash(path)


def enter_completed(final: Path, ready: str) -> bool:
    """After a kill: `final` holds the output whose hash the journal recorded (`ready`, prefixed with
    `enter:` when its writer enters it in the folder's manifest). Enter it there if so; whether it was
    nexus's completed rename."""
    if not holds_recorded_output(final, ready):
        return False
    if ready.startswith("enter:"):
        enter_in_folder(final)
    return True


def enter_in_folder(final: Path) -> None:
    """Enter `final` (just renamed into place by nexus) in its folder's manifest, when the folder has one:
    a folder output as a nested nexus output, a file by its bytes (an append-only log stays one)."""
    m = read_manifest(final.parent)
    if m is None:
        return
    if final.is_dir():
        record(final.parent, m["kind"], dirs=[final.name])
    else:
        grows = isinstance(m["files"].get(final.name), dict) and m["files"][final.name].get("grows")
        record(final.parent, m["kind"], **({"grows": [final.name]} if grows else {"files": [final.name]}))


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
        if lk.parent is None:
            notes += remove_dead_manifest_temporaries(Path(path))
            notes += retry_leftovers(Path(path))
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
    try:
        if lk.taken_over:
            recover_recorded(lk)
        if held_lock(final.parent) is not None:  # the folder's writer (a run): its leftovers are retried at each save
            for note in retry_leftovers(final.parent):
                print(f"nexus: note: {note}", file=sys.stderr)
    except BaseException:
        lk.release()
        raise
    return lk


def atomic_dir_write(final, write_fn, kind: str, hashes=None, enter: bool = False) -> Path:
    """Call write_fn(tmp_dir), write its ownership manifest (of `kind`, listing every file; `hashes`:
    callable(tmp_dir) -> {relative path: sha256} already known), fsync it, then move it to `final`,
    replacing an earlier nexus output last. enter: also enter `final` in its folder's manifest (a run's
    checkpoint), as one recoverable step with the rename.

    An existing `final` nexus cannot prove it wrote entirely (see nexus.outdir.manifest) is refused,
    never replaced: commands check this up front with nexus.outdir.check_output; this is the last
    line of defence."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    lk = output_lock(final)
    try:
        if final.exists() and (not final.is_dir() or (any(final.iterdir()) and ownership_problems(final))):
            raise ConfigError(
                f"{str(final)!r} exists and holds files nexus did not write (valid: a new or empty "
                "directory; nexus never replaces what it did not write)"
            )
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
        return swap_into_place(tmp, final, tag, lk, enter=enter)
    finally:
        if lk:
            lk.release()


def swap_into_place(tmp: Path, final: Path, tag: str, lk: OutputLock | None, enter: bool = False) -> Path:
    """fsync the finished `tmp` (named .NAME.tmp-TAG) and rename it to `final` by the recoverable
    protocol above; also used by the sharded (FSDP2) checkpoint writer, whose tmp all ranks fill.
    enter: enter `final` in its folder's manifest before the journal says done."""
    note = lk.pending if lk else (lambda p: None)
    old = ready = None
    try:
        respect_umask(tmp)
        fsync_tree(tmp)
        crash_point("swap-before-rename")
        if not final.exists():
            if lk:
                lk.ready(tmp, _ready_hash(tmp, enter))
            os.replace(tmp, final)
            fsync_dir(final.parent)
            crash_point("dir-after-rename", final.name)
            if enter:
                enter_in_folder(final)
            if lk:
                lk.done(tmp)
            return final
        ready = side_name(final, "new", tag)
        old = side_name(final, "old", tag)
        note(ready)
        note(old)
        os.replace(tmp, ready)
        if lk:
            lk.ready(ready, _ready_hash(ready, enter))
        fsync_dir(final.parent)
        os.replace(final, old)
        crash_point("swap-between-renames")
        os.replace(ready, final)
        crash_point("swap-after-renames")
        fsync_dir(final.parent)
        if enter:
            enter_in_folder(final)
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


def write_file_atomic(final: Path, write_fn, lk: OutputLock | None = None, enter: bool = False) -> Path:
    """write_fn(tmp_path) writes a file; it is fsynced and renamed to `final` (the temporary is
    recorded in `lk`'s journal and removed on any failure). The file is entered in its folder's
    manifest when `enter` is set or the manifest lists it already (its entry must follow its bytes), in
    the same recoverable step as the rename. A listed file the user changed is refused, never replaced."""
    final = Path(final)
    m = read_manifest(final.parent)
    listed = m is not None and final.name in m["files"]
    if listed and m is not None and final.exists() and not entry_unchanged(final, m["files"][final.name]):
        raise ConfigError(
            f"{str(final)!r} was changed since nexus wrote it, and nexus would replace it (valid: move it "
            "out of the folder; nexus never replaces what it did not write)"
        )
    enter = (enter or listed) and m is not None
    tmp = side_name(final, "tmp", new_tag())
    lk = lk or held_lock(final)
    if lk:
        lk.pending(tmp)
    # the bytes the manifest describes now, kept by a hard link until the new ones are entered: an error while
    # entering them (a manifest that cannot be written) puts these back, so the folder stays as its manifest says
    aside = _keep_aside(final, lk) if enter else None
    try:
        write_fn(tmp)
        respect_umask(tmp)
        fsync_file(tmp)
        if lk:
            lk.ready(tmp, _ready_hash(tmp, enter))
        crash_point("file-before-rename")
        os.replace(tmp, final)
        fsync_dir(final.parent)
        crash_point("file-after-rename", final.name)
        if enter:
            try:
                enter_in_folder(final)
            except BaseException:
                if aside is not None:
                    os.replace(aside, final)
                    fsync_dir(final.parent)
                raise
    finally:
        tmp.unlink(missing_ok=True)
        if aside is not None:
            aside.unlink(missing_ok=True)
        if lk:
            lk.done(tmp)
            if aside is not None:
                lk.done(aside)
    return final


def _keep_aside(final: Path, lk) -> Path | None:
    """A hard link to `final`'s current bytes under a journalled side name (None where there is no plain file or
    the file system has no hard links: then an error after the rename leaves the new bytes, as before)."""
    if not final.is_file() or final.is_symlink():
        return None
    aside = side_name(final, "old", new_tag())
    if lk:
        lk.pending(aside)
    try:
        os.link(final, aside)
    except OSError:
        if lk:
            lk.done(aside)
        return None
    return aside


def write_text_atomic(path, text: str, enter: bool = False) -> None:
    """Replace one file's contents atomically (temporary name, fsync, rename); enter: see write_file_atomic."""

    def write(tmp: Path) -> None:
        tmp.write_text(text)

    write_file_atomic(Path(path), write, enter=enter)


__all__ = [
    "atomic_dir_write",
    "swap_into_place",
    "recover_recorded",
    "recover_interrupted",
    "remove_recorded",
    "retry_leftovers",
    "write_file_atomic",
    "write_text_atomic",
    "read_manifest",
    "fsync_tree",
    "fsync_dir",
]
