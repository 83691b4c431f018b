"""Where a command may write: the one output guard every nexus writer goes through.

Rule: nexus never removes or replaces anything it did not create. An output path is accepted when it
does not exist yet, is an empty directory, or holds a nexus output of the same kind and the user asked
to replace it (`--overwrite`) or to continue it (a resumed run, an experiment run again). What nexus
wrote is proven by the output's manifest (nexus.outdir.manifest), never guessed from file names: a
directory without one is not nexus's, whatever it holds.

`--overwrite` replaces only files the manifest lists and that still hold the recorded bytes. Every
writer refuses it (one line, naming the file) when the output also holds something nexus cannot prove
it wrote (a file added by the user, or a listed file the user changed): nothing is deleted, the user
moves it. A ternary export file is recognised by its safetensors header. Checks only read, except one
probe directory created and removed beside the output to find out whether the place is writable.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from ..config import ConfigError
from .lock import SIDE, check_lock_file, confined_pending, holder_alive, lock_file, read_journal
from .manifest import dead_manifest_temporary, holds_recorded_output, ownership_problems, read_manifest

CHECKPOINT = "checkpoint"  # model.safetensors + config.json + meta.json (train, grow, import)
TRAIN_RUN = "train run"  # a `nexus train` output directory (metrics.jsonl, step_*/, checkpoint/)
ANALYSIS = "analysis"  # a `nexus analyze` directory (<kind>.json + plots)
HF_EXPORT = "hf export"  # a `nexus export --format hf` directory
TERNARY = "ternary"  # a `nexus export --format ternary` file
EXPERIMENT = "experiment"  # a `nexus experiment` directory (plan.json, runs, report)
PREPARED = "prepared corpus"  # a `nexus data prepare` directory (manifest.json, token shards, tokenizer)
# Kernel pseudo-filesystems: writing there is never what a user meant by an output path. A RAM disk
# (tmpfs, /dev/shm) is a normal place for outputs and is allowed.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "mqueue",
        "binfmt_misc",
        "efivarfs",
        "hugetlbfs",
        "autofs",
        "rpc_pipefs",
        "nsfs",
        "selinuxfs",
    }
)
_PSEUDO_FALLBACK = (Path("/proc"), Path("/sys"))  # where /proc/self/mounts cannot be read


def output_kind(path) -> str | None:
    """The kind of nexus output at `path` by its manifest (a ternary file: its header), or None."""
    p = Path(path)
    if p.is_file():
        return _file_kind(p)
    if not p.is_dir():
        return None
    m = read_manifest(p)
    return m["kind"] if m else None


def _file_kind(p: Path) -> str | None:
    try:
        from safetensors import safe_open

        with safe_open(str(p), framework="pt") as f:
            fmt = (f.metadata() or {}).get("format", "")
    except Exception:  # not a safetensors file at all (any of several error types)
        return None
    return TERNARY if fmt.startswith("nexus") else None


def is_inside(path, other) -> bool:
    """True when `path` is `other` or lies below it (symlinks resolved)."""
    a, b = Path(path).resolve(), Path(other).resolve()
    return a == b or b in a.parents


def recorded_temporaries(p: Path, flag: str = "--out") -> set[str]:
    """Names below `p` that a dead writer of `p` recorded in its lock (recovered once the lock is taken):
    its temporaries, and the outputs it renamed into place but was killed before entering in the manifest
    (the journal's `ready` hash proves them). A lock name holding something else, or a journal naming a
    path that is no temporary of `p`, is refused (one line)."""
    lf = lock_file(p)
    if not (lf.exists() or lf.is_symlink()):
        return set()
    check_lock_file(lf, flag, p)
    holder, pending, ready = read_journal(lf)
    if holder_alive(holder) is not False:
        return set()
    out = set()
    for rel in confined_pending(p, lf.parent, pending, lf, flag):
        q = lf.parent / rel
        if p in q.parents:
            out.add(q.relative_to(p).as_posix())
            m = SIDE.match(q.name)
            assert m is not None  # confined_pending refuses any name that is not a SIDE temporary
            final = q.parent / m["name"]
            if rel in ready and not (q.exists() or q.is_symlink()) and holds_recorded_output(final, ready[rel]):
                out.add(final.relative_to(p).as_posix())
    return out


def refuse_unproven(p: Path, shown: str) -> None:
    """One line naming the first thing in `p` nexus cannot prove it wrote."""
    problems = ownership_problems(p, ignore=recorded_temporaries(p))
    if problems:
        rel, why = problems[0]
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        what = "was changed since nexus wrote it" if why == "changed" else "was not written by nexus"
        raise ConfigError(
            f"{shown}: {rel!r}{more} {what} (valid: move it out of the folder, or another output path; "
            "--overwrite replaces only files nexus wrote and never deletes anything else)"
        )


def _older_run_hint(p: Path, found, kind: str) -> str:
    """A run written before manifests looks like any user folder and stays untouched; its checkpoint
    can still be read, so say how to continue it elsewhere."""
    if kind != TRAIN_RUN or found or not (p / "checkpoint" / "meta.json").is_file():
        return ""
    return (
        f"; if it is a run from a nexus release before manifests, continue it in a new folder: "
        f"--resume {p / 'checkpoint'} --out NEW_DIR"
    )


def check_output(
    path,
    kind: str,
    *,
    flag: str = "--out",
    overwrite: bool = False,
    resume: bool = False,
    sources=(),
    file: bool = False,
    kinds=(),
) -> Path:
    """Raise ConfigError (one line) unless `path` may receive a `kind` output; returns it as a Path.

    overwrite: an earlier output of the same kind may be replaced (only if nexus can prove it wrote
    all of it). resume: it may be continued in place. sources: inputs of this command (checkpoints);
    an output inside one, or one holding a source, is refused because replacing it would destroy the
    input. file: the output is a single file. kinds: further kinds accepted in place of `kind`."""
    p = Path(path)
    shown = f"{flag}={str(path)!r}"
    check_usable(p, flag, file=file)
    for src in sources:
        if src is not None and (is_inside(p, src) or is_inside(src, p)):
            where = "is inside" if is_inside(p, src) else "contains"
            raise ConfigError(
                f"{shown} {where} the source {str(src)!r} (valid: a path outside the source; "
                "the source stays untouched)"
            )
    if p.is_dir() and all(dead_manifest_temporary(q) for q in p.iterdir()):
        return p  # an empty directory (or one a writer killed before its first manifest left): nothing to lose
    if p.exists():
        found = output_kind(p)
        if found != kind and found not in kinds:
            what = f"a nexus {found} output" if found else "not a nexus output (it has no nexus manifest)"
            raise ConfigError(
                f"{shown} already exists and is {what} (valid: a new or empty "
                f"{'file path' if file else 'directory'}, or an earlier nexus {kind} output; "
                f"nexus never replaces what it did not write){_older_run_hint(p, found, kind)}"
            )
        if not (overwrite or resume):
            raise ConfigError(
                f"{shown} already holds a nexus {kind} output (valid: another {flag}, or --overwrite to replace it)"
            )
        if overwrite and p.is_dir():
            refuse_unproven(p, shown)
    return p


def claim_directory(path, kind: str, *, flag: str = "--out", overwrite: bool = False, resume: bool = False) -> Path:
    """check_output, then create the directory and give it a manifest of `kind` (for writers that fill a
    directory in place over time: experiments, training runs)."""
    p = check_output(path, kind, flag=flag, overwrite=overwrite, resume=resume)
    p.mkdir(parents=True, exist_ok=True)
    write_marker(p, kind)
    return p


def write_marker(directory, kind: str) -> None:
    """Give `directory` (which must exist) an empty manifest of `kind` unless it has one: for writers that
    fill a directory in place and record their files as they finish them (nexus.outdir.record)."""
    from .manifest import new_manifest, write_manifest

    if read_manifest(directory) is None:
        write_manifest(directory, new_manifest(kind))


def _filesystem_type(path: Path) -> str | None:
    """fstype of the mount holding `path` (longest mount point above it), from /proc/self/mounts. Of two
    mounts on one point the later line wins: it was mounted over the other, which is hidden."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    best, fstype = -1, None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (path == Path(mnt) or Path(mnt) in path.parents) and len(mnt) >= best:
            best, fstype = len(mnt), parts[2]
    return fstype


def check_usable(p: Path, flag: str = "--out", file: bool = False) -> None:
    """Refuse paths nexus cannot or must not write: kernel pseudo-filesystems, over-long names, symlink
    loops and dangling symlinks, a file where a directory is needed (or the reverse), a path below a
    file, a directory that is not writable."""
    shown = f"{flag}={str(p)!r}"
    for part in p.parts:
        if len(os.fsencode(part)) > 255:
            raise ConfigError(
                f"{shown}: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long (valid: names "
                "of at most 255 bytes)"
            )
    try:
        resolved = p.resolve(strict=False)
        for q in (p, *p.parents):  # a dangling link anywhere on the way would be written through
            if q.is_symlink():
                os.stat(q)
        if len(os.fsencode(str(resolved))) >= 4096:  # PATH_MAX on Linux
            raise OSError(errno.ENAMETOOLONG, "path too long")
    except RuntimeError:  # Path.resolve on a symlink loop (Python < 3.13)
        raise ConfigError(f"{shown} is a symlink loop (valid: a path that resolves to a directory)") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(f"{shown} is a symlink loop (valid: a path that resolves to a directory)") from None
        if e.errno == errno.ENOENT:
            link = next(q for q in (p, *p.parents) if q.is_symlink() and not q.exists())
            where = "is" if link == p else f"lies below {str(link)!r},"
            raise ConfigError(
                f"{shown} {where} a symlink to {os.readlink(link)!r}, which does not exist (valid: a "
                "path that exists or can be created; nexus does not write through dangling symlinks)"
            ) from None
        if e.errno == errno.ENAMETOOLONG:
            raise ConfigError(f"{shown} is too long for the filesystem (valid: a shorter path)") from None
        raise
    try:  # undecodable bytes (surrogate escapes) would fail later, in a plot title or a printed path
        str(resolved).encode("utf-8")
    except UnicodeEncodeError as e:
        shown_bytes = str(p).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ConfigError(
            f"{flag}='{shown_bytes}' is not valid UTF-8 (byte "
            f"{str(resolved)[e.start].encode('utf-8', 'surrogateescape')!r}) (valid: a path whose names "
            "are UTF-8 text)"
        ) from None
    ancestor = resolved.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    fstype = _filesystem_type(resolved)  # a path not there yet lies on the mount of the folder above it
    if fstype in PSEUDO_FILESYSTEMS or (
        fstype is None and any(resolved == r or r in resolved.parents for r in _PSEUDO_FALLBACK)
    ):
        raise ConfigError(
            f"{shown} is on the kernel filesystem {fstype or 'proc/sys'} (valid: a path on a disk or a "
            "RAM disk such as /dev/shm)"
        )
    if p.exists():
        if file and p.is_dir():
            raise ConfigError(f"{shown} is a directory (valid: a file path)")
        if not file and not p.is_dir():
            raise ConfigError(f"{shown} is a file (valid: a directory path)")
    if not ancestor.is_dir():
        raise ConfigError(
            f"{shown} lies below the file {str(ancestor)!r} (valid: a path whose parents are directories)"
        )
    for place in ([resolved] if p.is_dir() else []) + [ancestor]:
        _probe_writable(place, shown)


def _probe_writable(directory: Path, shown: str) -> None:
    # os.access says yes to root on read-only and immutable directories; only trying tells the truth.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".nexus-probe-", dir=directory))
    except OSError as e:
        raise ConfigError(
            f"{shown}: cannot write in {str(directory)!r} ({e.strerror or type(e).__name__}) "
            "(valid: a writable directory)"
        ) from None
