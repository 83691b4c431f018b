"""Where a command may write: the one output guard every nexus writer goes through.

Rule: nexus never removes or replaces anything it did not create. An output path is accepted when it
does not exist yet, is an empty directory, or holds a nexus output of the same kind (recognised by
its marker) and the user asked to replace it (`--overwrite`) or to continue it (a resumed run, an
experiment run again). Anything else is refused with one line before any work starts.

Markers: a checkpoint directory is recognised by its meta.json (format_version) and config.json;
every other directory output carries a `.nexus-run` JSON file naming its kind; a ternary export
file is recognised by its safetensors header. Checks only read, except one probe directory created
and removed beside the output to find out whether the place is writable.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from .config import ConfigError

MARKER = ".nexus-run"
CHECKPOINT = "checkpoint"  # model.safetensors + config.json + meta.json (train, grow, import)
TRAIN_RUN = "train run"  # a `nexus train` output directory (metrics.jsonl, step_*/, checkpoint/)
ANALYSIS = "analysis"  # a `nexus analyze` directory (<kind>.json + plots)
HF_EXPORT = "hf export"  # a `nexus export --format hf` directory
TERNARY = "ternary"  # a `nexus export --format ternary` file
EXPERIMENT = "experiment"  # a `nexus experiment` directory (plan.json, runs, report)
PREPARED = "prepared corpus"  # a `nexus data prepare` directory (manifest.json, token shards, tokenizer)
# Kernel and device filesystems: writing there is never what a user meant by an output path.
_FORBIDDEN_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def output_kind(path) -> str | None:
    """The kind of nexus output at `path`, or None when it is not one (or does not exist)."""
    p = Path(path)
    if p.is_file():
        return _file_kind(p)
    if not p.is_dir():
        return None
    marker = p / MARKER
    if marker.is_file():
        try:
            kind = json.loads(marker.read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            return None
        return kind if isinstance(kind, str) else None
    if (p / "config.json").is_file() and (p / "meta.json").is_file():
        try:
            if "format_version" in json.loads((p / "meta.json").read_text()):
                return CHECKPOINT
        except (OSError, ValueError, TypeError):
            return None
    if (p / "metrics.jsonl").is_file() and (p / "config.yaml").is_file():
        return TRAIN_RUN  # a run directory written before markers existed
    if (p / "plan.json").is_file():
        return EXPERIMENT  # likewise for experiments
    return None


def _file_kind(p: Path) -> str | None:
    try:
        from safetensors import safe_open

        with safe_open(str(p), framework="pt") as f:
            fmt = (f.metadata() or {}).get("format", "")
    except Exception:  # not a safetensors file at all (any of several error types)
        return None
    return TERNARY if fmt.startswith("nexus") else None


def write_marker(directory, kind: str) -> None:
    """Mark `directory` as a nexus output of `kind` (atomically; the directory must exist)."""
    d = Path(directory)
    tmp = d / f"{MARKER}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps({"kind": kind, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
    os.replace(tmp, d / MARKER)


def is_inside(path, other) -> bool:
    """True when `path` is `other` or lies below it (symlinks resolved)."""
    a, b = Path(path).resolve(), Path(other).resolve()
    return a == b or b in a.parents


def check_output(path, kind: str, *, flag: str = "--out", overwrite: bool = False, resume: bool = False,
                 sources=(), file: bool = False) -> Path:
    """Raise ConfigError (one line) unless `path` may receive a `kind` output; returns it as a Path.

    overwrite: an existing output of the same kind may be replaced. resume: it may be continued.
    sources: inputs of this command (checkpoints); an output inside one, or one holding a source, is
    refused because replacing it would destroy the input. file: the output is a single file."""
    p = Path(path)
    shown = f"{flag}={str(path)!r}"
    check_usable(p, flag, file=file)
    for src in sources:
        if src is not None and (is_inside(p, src) or is_inside(src, p)):
            where = "is inside" if is_inside(p, src) else "contains"
            raise ConfigError(f"{shown} {where} the source {str(src)!r} (valid: a path outside the source; "
                              "the source stays untouched)")
    if p.is_dir() and not any(p.iterdir()):
        return p  # an empty directory: nothing to lose
    if p.exists():
        found = output_kind(p)
        if found != kind:
            what = f"a nexus {found} output" if found else "not a nexus output"
            raise ConfigError(f"{shown} already exists and is {what} (valid: a new or empty "
                              f"{'file path' if file else 'directory'}, or an earlier nexus {kind} output; "
                              "nexus never replaces what it did not write)")
        if not (overwrite or resume):
            raise ConfigError(f"{shown} already holds a nexus {kind} output (valid: another {flag}, or --overwrite "
                              "to replace it)")
    return p


def claim_directory(path, kind: str, *, flag: str = "--out", overwrite: bool = False, resume: bool = False) -> Path:
    """check_output, then create the directory and mark it as a `kind` output (for writers that fill a
    directory in place over time: experiments, the environment-variable training script)."""
    p = check_output(path, kind, flag=flag, overwrite=overwrite, resume=resume)
    p.mkdir(parents=True, exist_ok=True)
    if not (p / MARKER).is_file():
        write_marker(p, kind)
    return p


def check_usable(p: Path, flag: str = "--out", file: bool = False) -> None:
    """Refuse paths nexus cannot or must not write: kernel filesystems, a file where a directory is
    needed (or the reverse), a path below a file, a directory that is not writable."""
    shown = f"{flag}={str(p)!r}"
    resolved = p.resolve()
    for root in _FORBIDDEN_ROOTS:
        if resolved == root or root in resolved.parents:
            raise ConfigError(f"{shown} is on the kernel filesystem {root} (valid: a path on a normal disk)")
    if p.exists():
        if file and p.is_dir():
            raise ConfigError(f"{shown} is a directory (valid: a file path)")
        if not file and not p.is_dir():
            raise ConfigError(f"{shown} is a file (valid: a directory path)")
    ancestor = resolved.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{shown} lies below the file {str(ancestor)!r} (valid: a path whose parents are directories)")
    for place in ([resolved] if p.is_dir() else []) + [ancestor]:
        _probe_writable(place, shown)


def _probe_writable(directory: Path, shown: str) -> None:
    # os.access says yes to root on read-only and immutable directories; only trying tells the truth.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".nexus-probe-", dir=directory))
    except OSError as e:
        raise ConfigError(f"{shown}: cannot write in {str(directory)!r} ({e.strerror or type(e).__name__}) "
                          "(valid: a writable directory)") from None
