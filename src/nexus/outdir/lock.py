"""One writer per output: an exclusive lock file beside the output, which is also the journal of the
temporary names the writer creates.

`.NAME.nexus-lock` (next to the output NAME) is created whole: its first line, the holder (pid, host,
the process's start time, the command), is written to a temporary and hard-linked to the lock's name,
which fails when the name exists, so a lock file never exists without its holder line. Every later
line records a temporary name before it is created (`{"pending": "..."}`), its hash once it is complete
and about to be renamed (`{"ready": "...", "sha256": "..."}`), or that it is gone (`{"done": "..."}`).
Interrupted saves are therefore recovered from the record, never from guessing at names: a later
writer (or reader) that finds the lock held by a process that no longer exists takes it over with a
note and finishes or removes exactly the temporaries the dead process recorded.

The journal is input too: a file under the lock's name that is not a nexus lock (a user's file, a
folder, a symlink) is refused, never taken over or deleted; a recorded name that is not a temporary of
the locked output (outside it, `..`, absolute, through a symlink) is refused with one line.

A lock held by a live process, or by a process on another host (whose liveness cannot be checked
from here), makes a second writer stop with one line. Locks are per process and re-entrant: writing
inside an output whose lock this process holds (a step checkpoint inside a run directory) journals
into that lock. Only torchrun's rank 0 (or a single process) takes locks.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from ..config import ConfigError
from .manifest import SIDE, confined_name, pid_alive, through_symlink

SUFFIX = ".nexus-lock"
_HELD: dict[Path, OutputLock] = {}  # output path (resolved) -> the lock this process holds on it


def lock_file(target) -> Path:
    t = Path(target)
    return t.parent / f".{t.name}{SUFFIX}"


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot): tells a reused pid from the holder."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _holder() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "proc_start": _proc_start(os.getpid()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": " ".join(sys.argv[:3])[:200],
    }


def holder_alive(h: dict) -> bool | None:
    """True/False for a holder on this host; None when it ran on another host (cannot be checked)."""
    if h.get("host") != socket.gethostname():
        return None
    pid = h.get("pid")
    if not isinstance(pid, int):
        return False
    if not pid_alive(pid):
        return False
    start = h.get("proc_start")
    return start is None or _proc_start(pid) in (None, start)


def read_lock(path: Path) -> tuple[dict, list[str]]:
    """(holder, pending temporaries not yet done) of a lock file; torn lines (a kill mid-append) are skipped."""
    holder, pending, _ = read_journal(path)
    return holder, pending


def read_journal(path: Path) -> tuple[dict, list[str], dict[str, str]]:
    """(holder, pending temporaries not yet done, {pending name: sha256 recorded when it was complete})."""
    holder: dict = {}
    pending: list[str] = []
    ready: dict[str, str] = {}
    if not path.is_file():  # nexus writes its lock as a regular file; a FIFO under the name would block the read
        return holder, pending, ready
    try:
        lines = path.read_bytes().decode("utf-8", "replace").splitlines()
    except OSError:
        return holder, pending, ready
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # a torn line, or JSON nested past Python's stack (forged)
            continue
        if not isinstance(rec, dict):
            continue
        if i == 0:
            holder = rec
        elif isinstance(rec.get("pending"), str):
            pending.append(rec["pending"])
        elif isinstance(rec.get("ready"), str) and isinstance(rec.get("sha256"), str):
            ready[rec["ready"]] = rec["sha256"]
        elif isinstance(rec.get("done"), str) and rec["done"] in pending:
            pending.remove(rec["done"])
            ready.pop(rec["done"], None)
    return holder, pending, {k: v for k, v in ready.items() if k in pending}


def is_nexus_holder(h) -> bool:
    """Whether a lock's first line is one nexus writes (`_holder`)."""
    return isinstance(h, dict) and isinstance(h.get("pid"), int) and isinstance(h.get("host"), str)


def check_lock_file(lf: Path, flag: str, target: Path) -> None:
    """Refuse (one line) a lock name held by something nexus did not write: a folder, a symlink, a file
    whose first line is not a nexus holder. Nexus never takes such a thing over, so never deletes it."""
    what = (
        "a folder"
        if lf.is_dir() and not lf.is_symlink()
        else "a symlink"
        if lf.is_symlink()
        else "not a regular file"
        if not lf.is_file()
        # a FIFO would block the read below forever
        else None
        if is_nexus_holder(read_lock(lf)[0])
        else "a file that is not a nexus lock"
    )
    if what:
        raise ConfigError(
            f"{flag}={str(target)!r}: its lock name {str(lf)!r} is {what} (valid: move it away, or "
            "another output path; nexus never deletes what it did not write)"
        )


def confined_pending(target: Path, base: Path, pending, lf: Path, flag: str = "--out") -> list[str]:
    """The recorded temporaries of a lock on `target` (relative to `base`, the lock's folder), each
    checked to be one nexus could have made for this output: a `.NAME.STATE-TAG` name beside `target`
    for `target` itself, or below `target`, never through a symlink. Anything else is refused (one
    line): acting on it could rename or delete a file outside the output."""
    target, base = Path(target), Path(base)
    for rel in pending:
        q = base / rel if confined_name(rel) else None
        m = SIDE.match(q.name) if q is not None else None
        ok = m is not None and not through_symlink(base, rel)
        if ok and q.parent == target.parent:
            assert m is not None  # ok holds only with a match
            ok = m["name"] == target.name
        elif ok:
            ok = target == q.parent or target in q.parent.parents
        if not ok:
            raise ConfigError(
                f"{flag}={str(target)!r}: the lock {str(lf)!r} records {rel!r}, which is not a "
                "temporary of this output (valid: delete that lock file if no nexus process is "
                "writing there; nothing was touched)"
            )
    return list(pending)


def _describe(h: dict) -> str:
    return f"pid {h.get('pid')} on host {h.get('host')!r} since {h.get('started')}" + (
        f" ({h['command']})" if h.get("command") else ""
    )


class OutputLock:
    """Held lock on one output path. Use `acquire_output_lock`."""

    def __init__(self, target: Path, parent: OutputLock | None = None):
        self.target = target
        self.parent = parent  # re-entrant: the enclosing lock this process already holds
        self.file = lock_file(target)
        self.taken_over: list[str] = []  # pending temporaries of a dead holder, for the caller to recover
        self.taken_ready: dict[str, str] = {}  # their hashes where the dead holder recorded them complete
        self.note = ""
        self.created: list[Path] = []  # parent folders made to hold the lock: removed again if left empty

    @property
    def base(self) -> Path:
        return self.parent.base if self.parent else self.file.parent

    def pending(self, path) -> None:
        """Record a temporary name before creating it."""
        self._append({"pending": os.path.relpath(Path(path), self.base)})

    def ready(self, path, sha256: str) -> None:
        """Record that the temporary `path` is complete (its bytes' sha256, or its manifest's for a folder)
        and about to be renamed: after a kill, the renamed output is recognised as nexus's by this hash."""
        self._append({"ready": os.path.relpath(Path(path), self.base), "sha256": sha256})

    def done(self, path) -> None:
        self._append({"done": os.path.relpath(Path(path), self.base)})

    def _append(self, rec: dict) -> None:
        if self.parent is not None:
            return self.parent._append(rec)
        with open(self.file, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def release(self) -> None:
        if self.parent is None:
            _HELD.pop(self.target.resolve(), None)
            self.file.unlink(missing_ok=True)
            self.drop_created()

    def drop_created(self) -> None:
        for d in self.created:  # deepest first: a command that failed early leaves no empty folders
            try:
                d.rmdir()
            except OSError:
                break

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def held_lock(target) -> OutputLock | None:
    """The lock this process holds on `target` or on a directory above it."""
    t = Path(target).resolve()
    for p in (t, *t.parents):
        if p in _HELD:
            return _HELD[p]
    return None


def is_rank0() -> bool:
    return os.environ.get("RANK", "0") in ("", "0")


def _create_whole(lf: Path, lines: list[dict]) -> bool:
    """Create `lf` holding `lines` only if the name is free (False when it exists): written to a
    temporary, fsynced, then hard-linked to the name, so the lock never exists half-written."""
    tmp = lf.with_name(f"{lf.name}.tmp-{os.getpid()}")
    _remove_dead_lock_temporaries(lf)
    with open(tmp, "w") as f:
        f.write("".join(json.dumps(rec) + "\n" for rec in lines))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, lf)
    except FileExistsError:
        return False
    except OSError:  # a filesystem without hard links: O_EXCL still creates the name only when it is free
        try:
            fd = os.open(lf, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(tmp.read_text())
            f.flush()
            os.fsync(f.fileno())
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _remove_dead_lock_temporaries(lf: Path) -> None:
    """A lock's own temporary (`.NAME.nexus-lock.tmp-PID`) left by a process killed before its link:
    removed when it is provably that: a nexus holder line naming PID, on this host, no longer running."""
    for t in lf.parent.glob(f"{lf.name}.tmp-*"):
        pid = t.name.rsplit("-", 1)[1]
        if not pid.isdigit() or t.is_symlink() or not t.is_file():
            continue
        holder = read_lock(t)[0]
        if is_nexus_holder(holder) and holder["pid"] == int(pid) and holder_alive(holder) is False:
            t.unlink(missing_ok=True)


def _same_file(p: Path, seen: os.stat_result) -> bool:
    """Whether `p` is still the very file `seen` was taken of (same inode), not another under its name."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return False
    return (st.st_ino, st.st_dev) == (seen.st_ino, seen.st_dev)


def acquire_output_lock(target, flag: str = "--out") -> OutputLock:
    """Lock `target` for writing (its parent directory must exist). Raises ConfigError (one line)
    when another live process (or one on another host) holds it, or when the lock's name holds
    something that is not a nexus lock; a dead holder's lock is taken over, with `.note` saying so and
    `.taken_over` listing the temporaries it recorded."""
    target = Path(target)
    enclosing = held_lock(target)
    if enclosing is not None:
        return OutputLock(target, parent=enclosing)
    lk = OutputLock(target)
    missing = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    lk.created = missing  # deepest first
    stale_pending: list[str] = []
    stale_ready: dict[str, str] = {}
    try:
        for _ in range(3):
            carried = [{"pending": n} for n in stale_pending] + [
                {"ready": n, "sha256": h} for n, h in stale_ready.items()
            ]
            if _create_whole(lk.file, [_holder(), *carried]):  # still owed: stays recorded until recovered
                lk.taken_over, lk.taken_ready = stale_pending, stale_ready
                _HELD[target.resolve()] = lk
                return lk
            try:
                seen = os.lstat(lk.file)
            except FileNotFoundError:
                continue  # released meanwhile: try to create it again
            check_lock_file(lk.file, flag, target)
            holder, pending, ready = read_journal(lk.file)
            if not _same_file(lk.file, seen):
                continue  # replaced while being read: look again
            alive = holder_alive(holder)
            if alive is None:
                raise ConfigError(
                    f"{flag}={str(target)!r} is locked by {_describe(holder)}, which cannot be checked from "
                    f"here (valid: wait for it; if that process is gone, delete {str(lk.file)!r})"
                )
            if alive:
                raise ConfigError(
                    f"{flag}={str(target)!r} is being written by another nexus process: {_describe(holder)} "
                    "(valid: wait for it to finish, or another output path)"
                )
            confined_pending(target, lk.file.parent, pending, lk.file, flag)
            # the holder is gone: move its lock aside (one taker wins the rename), keep its record
            aside = lk.file.with_name(f"{lk.file.name}.stale-{os.getpid()}")
            try:
                os.replace(lk.file, aside)
            except FileNotFoundError:
                continue  # another process took it over first: try again (it now holds a live lock)
            if not _same_file(aside, seen):
                # Between the read and the rename another process took the dead lock over and created its
                # own, live one under the name: that is what was moved. Put it back, and look again.
                try:
                    os.link(aside, lk.file)
                    aside.unlink()
                except FileExistsError:  # a third writer's lock is there now: keep the moved one, say so
                    raise ConfigError(
                        f"{flag}={str(target)!r}: several processes took over its stale lock at once; "
                        f"{str(aside)!r} holds one of their records (valid: wait for them to finish, "
                        "then retry)"
                    ) from None
                continue
            stale_pending += pending
            stale_ready.update(ready)
            aside.unlink(missing_ok=True)
            lk.note = f"took over the lock of {str(target)!r} left by {_describe(holder)}, which is no longer running"
    except BaseException:
        lk.drop_created()
        raise
    lk.drop_created()
    raise ConfigError(f"{flag}={str(target)!r}: could not take its lock {str(lk.file)!r} (valid: retry)")
