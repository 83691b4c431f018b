"""Crash-safe directory writes: write beside the target, fsync, then rename into place.

Replacing an existing directory takes two renames, and a kill between them leaves no directory
under the final name. The protocol makes every moment recoverable:

    .NAME.tmp-PID-N   being written (incomplete; thrown away on recovery)
    .NAME.new-PID-N   complete and fsynced, about to become NAME
    .NAME.old-PID-N   the previous NAME, moved aside; deleted once the new one is in place

`recover(parent)` (run by every writer before it writes, by the trainer at start and by checkpoint
readers) puts a complete `.new` (else the `.old`) back under NAME when NAME is missing, and removes
leftovers of processes that are no longer alive. Only names of this pattern are ever touched.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from .config import ConfigError

_SIDE = re.compile(r"^\.(?P<name>.+)\.(?P<state>tmp|new|old)-(?P<pid>\d+)(?:-\d+)?$")


def fsync_tree(root: Path) -> None:
    """Flush every file and directory below `root` (and root itself) to disk."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
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


def fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems do not support fsync on directories; the rename still is atomic
        pass
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _side_entries(parent: Path) -> list[tuple[Path, re.Match]]:
    if not parent.is_dir():
        return []
    out = []
    for p in parent.iterdir():
        m = _SIDE.match(p.name)
        if m:
            out.append((p, m))
    return out


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except FileNotFoundError:
        return -1.0


def recover(parent, name: str | None = None, include_own: bool = False) -> list[str]:
    """Finish or roll back interrupted swaps in `parent` (only entry `name` when given); returns a
    line per action taken. Entries of live processes (this one too unless include_own) are left alone."""
    parent = Path(parent)
    actions = []
    groups: dict[str, list[tuple[Path, re.Match]]] = {}
    for p, m in _side_entries(parent):
        pid = int(m["pid"])
        if (name is None or m["name"] == name) and ((include_own and pid == os.getpid()) or not _alive(pid)):
            groups.setdefault(m["name"], []).append((p, m))
    for nm, entries in groups.items():
        final = parent / nm
        if not final.exists():
            for state in ("new", "old"):  # a complete new version wins over the previous one
                cands = sorted((p for p, m in entries if m["state"] == state), key=_mtime)
                if cands:
                    try:
                        os.replace(cands[-1], final)
                    except FileNotFoundError:  # another process (a torchrun rank) recovered it first
                        break
                    fsync_dir(parent)
                    actions.append(f"restored {final} from an interrupted save ({state} version)")
                    entries = [(p, m) for p, m in entries if p != cands[-1]]
                    break
        for p, _ in entries:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            actions.append(f"removed {p.name} left by an interrupted save")
    return actions


def atomic_dir_write(final, write_fn, marker_kind: str | None = None) -> Path:
    """Call write_fn(tmp_dir), fsync it, then move it to `final`, replacing an older nexus output last.

    An existing `final` that is not a nexus output (see nexus.outdir) is refused, never replaced:
    commands check this up front with nexus.outdir.check_output; this is the last line of defence.
    `marker_kind` writes a `.nexus-run` marker of that kind into the new directory."""
    from .outdir import output_kind, write_marker

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover(final.parent, final.name)
    if final.exists() and (not final.is_dir() or (any(final.iterdir()) and output_kind(final) is None)):
        raise ConfigError(f"{str(final)!r} exists and is not a nexus output (valid: a new or empty directory; nexus "
                          "never replaces what it did not write)")
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    tmp = final.parent / f".{final.name}.tmp-{tag}"
    tmp.mkdir()
    try:
        write_fn(tmp)
        if marker_kind is not None:
            write_marker(tmp, marker_kind)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return swap_into_place(tmp, final, tag)


def swap_into_place(tmp: Path, final: Path, tag: str) -> Path:
    """fsync the finished `tmp` (named .NAME.tmp-TAG) and rename it to `final` by the recoverable
    protocol above; also used by the sharded (FSDP2) checkpoint writer, whose tmp all ranks fill."""
    old = None
    try:
        respect_umask(tmp)
        fsync_tree(tmp)
        if not final.exists():
            os.replace(tmp, final)
            fsync_dir(final.parent)
            return final
        ready = final.parent / f".{final.name}.new-{tag}"
        os.replace(tmp, ready)
        old = final.parent / f".{final.name}.old-{tag}"
        fsync_dir(final.parent)
        os.replace(final, old)
        os.replace(ready, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not final.exists():  # failed between the two renames: put the previous version back now
            recover(final.parent, final.name, include_own=True)
        raise
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)
    return final


def write_text_atomic(path, text: str) -> None:
    """Replace one file's contents atomically (temporary name, fsync, rename)."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
