"""One writer per output: an exclusive lock file beside the output, which is also the journal of the
temporary names the writer creates.

`.NAME.nexus-lock` (next to the output NAME) is created with O_EXCL. Its first line is the holder
(pid, host, the process's start time, the command); every later line records a temporary name before
it is created (`{"pending": "..."}`) or after it is gone (`{"done": "..."}`). Interrupted saves are
therefore recovered from the record, never from guessing at names: a later writer (or reader) that
finds the lock held by a process that no longer exists takes it over with a note and finishes or
removes exactly the temporaries the dead process recorded.

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

SUFFIX = ".nexus-lock"
_HELD: dict[Path, "OutputLock"] = {}  # output path (resolved) -> the lock this process holds on it


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
    return {"pid": os.getpid(), "host": socket.gethostname(), "proc_start": _proc_start(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": " ".join(sys.argv[:3])[:200]}


def holder_alive(h: dict) -> bool | None:
    """True/False for a holder on this host; None when it ran on another host (cannot be checked)."""
    if h.get("host") != socket.gethostname():
        return None
    pid = h.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    start = h.get("proc_start")
    return start is None or _proc_start(pid) in (None, start)


def read_lock(path: Path) -> tuple[dict, list[str]]:
    """(holder, pending temporaries not yet done) of a lock file; torn lines (a kill mid-append) are skipped."""
    holder, pending = {}, []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return holder, pending
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if i == 0:
            holder = rec
        elif isinstance(rec.get("pending"), str):
            pending.append(rec["pending"])
        elif isinstance(rec.get("done"), str) and rec["done"] in pending:
            pending.remove(rec["done"])
    return holder, pending


def _describe(h: dict) -> str:
    return (f"pid {h.get('pid')} on host {h.get('host')!r} since {h.get('started')}"
            + (f" ({h['command']})" if h.get("command") else ""))


class OutputLock:
    """Held lock on one output path. Use `acquire_output_lock`."""

    def __init__(self, target: Path, parent: "OutputLock | None" = None):
        self.target = target
        self.parent = parent  # re-entrant: the enclosing lock this process already holds
        self.file = lock_file(target)
        self.taken_over: list[str] = []  # pending temporaries of a dead holder, for the caller to recover
        self.note = ""
        self.created: list[Path] = []  # parent folders made to hold the lock: removed again if left empty

    @property
    def base(self) -> Path:
        return self.parent.base if self.parent else self.file.parent

    def pending(self, path) -> None:
        """Record a temporary name before creating it."""
        self._append({"pending": os.path.relpath(Path(path), self.base)})

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


def acquire_output_lock(target, flag: str = "--out") -> OutputLock:
    """Lock `target` for writing (its parent directory must exist). Raises ConfigError (one line)
    when another live process (or one on another host) holds it; a dead holder's lock is taken over,
    with `.note` saying so and `.taken_over` listing the temporaries it recorded."""
    target = Path(target)
    enclosing = held_lock(target)
    if enclosing is not None:
        return OutputLock(target, parent=enclosing)
    lk = OutputLock(target)
    missing = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    lk.created = missing  # deepest first
    stale_pending: list[str] = []
    for _ in range(3):
        try:
            fd = os.open(lk.file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder, pending = read_lock(lk.file)
            alive = holder_alive(holder) if holder else False
            if alive is not False:
                lk.drop_created()
            if alive is None:
                raise ConfigError(f"{flag}={str(target)!r} is locked by {_describe(holder)}, which cannot be checked from "
                                  f"here (valid: wait for it; if that process is gone, delete {str(lk.file)!r})") from None
            if alive:
                raise ConfigError(f"{flag}={str(target)!r} is being written by another nexus process: {_describe(holder)} "
                                  "(valid: wait for it to finish, or another output path)") from None
            # the holder is gone: move its lock aside (one taker wins the rename), keep its record
            aside = lk.file.with_name(f"{lk.file.name}.stale-{os.getpid()}")
            try:
                os.replace(lk.file, aside)
            except FileNotFoundError:
                continue  # another process took it over first: try again (it now holds a live lock)
            stale_pending += pending
            aside.unlink(missing_ok=True)
            lk.note = (f"took over the lock of {str(target)!r} left by {_describe(holder) if holder else 'a process'}, "
                       "which is no longer running")
            continue
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(_holder()) + "\n")
            for name in stale_pending:  # still owed: stays recorded until recovered
                f.write(json.dumps({"pending": name}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        lk.taken_over = stale_pending
        _HELD[target.resolve()] = lk
        return lk
    lk.drop_created()
    raise ConfigError(f"{flag}={str(target)!r}: could not take its lock {str(lk.file)!r} (valid: retry)")
