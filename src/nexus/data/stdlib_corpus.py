"""`--data stdlib`: the Python standard library's own `.py` sources, a corpus every Python install has.

The files depend on the interpreter: CPython 3.11.7 as installed here holds 1,790 `.py` files, 31.5 MB
with the `test` package and 14.4 MB without it; some distributions ship no `test` package (or strip
sources). The corpus therefore reports what it found (`describe()`), and its cache key carries the
interpreter version. Document order is the sorted relative path, so order and split are deterministic
for a given installation.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from ..config import ConfigError

# Third-party packages live below the standard library directory on most installs; they are not stdlib.
_NOT_STDLIB = {"site-packages", "dist-packages", "__pycache__"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@functools.lru_cache(maxsize=1)
def stdlib_files() -> list[Path]:
    """Every `.py` below the standard library directory, third-party packages excluded, sorted by path."""
    root = stdlib_root()
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _NOT_STDLIB]  # never walk into site-packages
        found += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    files = sorted(found, key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise ConfigError(
            f"data.source='stdlib' found no .py files under {str(root)!r} (this Python ships no "
            "standard-library sources; valid: embedded, a local file or folder)"
        )
    return files


def describe() -> str:
    """One line: what this interpreter's stdlib corpus holds (printed with the run's data summary)."""
    files = stdlib_files()
    root = stdlib_root()
    size = sum(p.stat().st_size for p in files)
    test = sum(p.stat().st_size for p in files if p.relative_to(root).parts[0] == "test")
    # the total first, then the test package as a part of it: "31.5 MB (with the test package, 17.1 MB)" read
    # as two sizes of one thing
    parts = (
        f"of which the test package is {test / 1e6:.1f} MB and the rest {(size - test) / 1e6:.1f} MB"
        if test
        else "no test package in this Python"
    )
    return (
        f"stdlib corpus: {len(files):,} .py files, {size / 1e6:.1f} MB in all ({parts}) from Python "
        f"{sys.version.split()[0]} at {root}"
    )


def stdlib_documents() -> Iterator[str]:
    """One document per source file, in sorted-path order (undecodable bytes become U+FFFD)."""
    for p in stdlib_files():
        text = p.read_bytes().decode("utf-8", errors="replace").strip()
        if text:
            yield text


def identity() -> str:
    """What the stdlib corpus depends on, for cache keys: version, location and file listing size."""
    files = stdlib_files()
    return f"stdlib:{sys.version}:{stdlib_root()}:{len(files)}:{sum(p.stat().st_size for p in files)}"
