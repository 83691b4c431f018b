"""What `data.source` names, resolved before anything is read or written.

A source is one of: `embedded`, `stdlib`, `hf:<name>[:<config>]`, `synthetic:<task>`, a prepared
directory (holding `manifest.json`, from `nexus data prepare`), a bare token file (`.bin`, nanoGPT's
format), or documents in files: a file, a folder (searched recursively), a glob (`'data/*.txt'`) or a
comma-separated list of those. Files of one source must share one format (text, json lines or parquet).
Every bad form is one ConfigError line naming the value and what would be valid.
"""
from __future__ import annotations

import glob
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..config import ConfigError, DataConfig

MANIFEST = "manifest.json"
# suffix -> format; files of one source must share a format
FORMATS = {".txt": "text", ".md": "text", ".text": "text", ".jsonl": "json", ".json": "json",
           ".parquet": "parquet", ".bin": "bin"}
VALID = ("embedded, stdlib, hf:<name>[:<config>], synthetic:<task>, a prepared directory, a .bin token file, "
         "or a .txt/.md/.jsonl/.json/.parquet file, folder, glob or comma-separated list of them")


@dataclass
class Source:
    kind: str  # embedded | stdlib | hub | synthetic | prepared | bin | files
    spec: str  # data.source as given
    files: list[Path] = field(default_factory=list)  # the files read (files, bin) or the directory (prepared)
    fmt: str = ""  # text | json | parquet | bin (files and bin)

    @property
    def tokenized(self) -> bool:
        """Whether the source already holds token ids (nothing to tokenize or cache)."""
        return self.kind in ("prepared", "bin")

    def identity(self) -> str:
        """What the source's content depends on, for cache keys (paths, sizes, modification times)."""
        if self.kind == "embedded":
            return f"embedded:{sys.version}"
        if self.kind == "stdlib":
            from .stdlib_corpus import identity

            return identity()
        if self.kind in ("files", "bin", "prepared"):
            return ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in self.files)
        return self.spec

    def total_bytes(self) -> int | None:
        """Bytes the documents are read from (for progress and ETA); None for a stream of unknown size."""
        if self.kind == "files":
            return sum(p.stat().st_size for p in self.files)
        if self.kind == "stdlib":
            from .stdlib_corpus import stdlib_files

            return sum(p.stat().st_size for p in stdlib_files())
        return None

    def documents(self, cfg: DataConfig) -> Iterator:
        """Documents one at a time (text, or chat rows when data.chat), never the corpus as a list;
        data.max_documents (0 = all) stops the stream."""
        from . import corpus as C

        if self.kind == "embedded":
            docs = iter(C.embedded_documents())
        elif self.kind == "stdlib":
            from .stdlib_corpus import stdlib_documents

            docs = stdlib_documents()
        elif self.kind == "hub":
            docs = C.hub_documents(self.spec, cfg)
        elif self.kind == "files":
            docs = C.file_documents(self.files, self.fmt, self.spec, cfg)
        else:
            raise ConfigError(f"data.source={self.spec!r} holds token ids, not documents (valid here: a text source)")
        return _capped(docs, cfg.max_documents, self.spec)


def _capped(docs: Iterator, cap: int, spec: str) -> Iterator:
    n = 0
    for doc in docs:
        if cap and n >= cap:
            return
        n += 1
        yield doc
    if n == 0:
        raise ConfigError(f"data.source={spec!r} holds no documents (valid: a source with at least one document)")


def resolve_source(spec: str) -> Source:
    """data.source -> Source, checking paths, globs and formats; reads no document."""
    if spec in ("embedded", "stdlib"):
        return Source(spec, spec)
    if spec.startswith("hf:"):
        if not spec[3:].split(":")[0]:
            raise ConfigError(f"data.source={spec!r} names no dataset (valid: hf:<name>[:<config>])")
        return Source("hub", spec)
    if spec.startswith("synthetic:"):
        return Source("synthetic", spec)
    parts = [spec] if Path(spec).exists() else [s.strip() for s in spec.split(",") if s.strip()]
    files: list[Path] = []
    for part in parts:
        files += _expand(part, spec)
    if len(files) == 1 and files[0].is_dir():
        return Source("prepared", spec, files)
    if any(f.is_dir() for f in files):
        raise ConfigError(f"data.source={spec!r} mixes a prepared directory with other inputs (valid: one prepared "
                          "directory alone)")
    by_fmt: dict[str, list[Path]] = {}
    for f in files:
        by_fmt.setdefault(FORMATS.get(f.suffix.lower(), f.suffix or "(no suffix)"), []).append(f)
    unknown = [k for k in by_fmt if k not in FORMATS.values()]
    if unknown:
        bad = by_fmt[unknown[0]][0]
        raise ConfigError(f"data.source={spec!r}: {str(bad)!r} has suffix {bad.suffix or '(none)'!r} "
                          "(valid: .txt, .md, .text, .jsonl, .json, .parquet or .bin)")
    if len(by_fmt) > 1:
        counts = ", ".join(f"{k}: {len(v)} file(s)" for k, v in sorted(by_fmt.items()))
        raise ConfigError(f"data.source={spec!r} mixes file formats ({counts}) (valid: files of one format: "
                          "text, json lines, parquet or .bin)")
    fmt = next(iter(by_fmt))
    dup = len(files) != len({f.resolve() for f in files})
    if dup:
        raise ConfigError(f"data.source={spec!r} names a file more than once (valid: each file once; a repeated "
                          "file would repeat its documents silently)")
    for f in files:
        if f.stat().st_size == 0:
            raise ConfigError(f"data.source={spec!r}: {str(f)!r} is empty (valid: files with at least one document)")
    return Source("bin" if fmt == "bin" else "files", spec, files, fmt)


def _expand(part: str, spec: str) -> list[Path]:
    """One element of a source list: a file, a directory (prepared, or a folder of documents) or a glob."""
    p = Path(part).expanduser()
    if p.is_file():
        return [p]
    if p.is_dir():
        if (p / MANIFEST).is_file():
            return [p]
        found = sorted((f for f in p.rglob("*") if f.is_file() and not _hidden(f.relative_to(p))),
                       key=lambda f: f.relative_to(p).as_posix())
        if not found:
            raise ConfigError(f"data.source={spec!r}: folder {part!r} holds no files (valid: a folder of "
                              ".txt/.md/.jsonl/.json/.parquet/.bin files, or a prepared directory)")
        return found
    if glob.has_magic(part):
        found = sorted(Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file())
        if not found:
            raise ConfigError(f"data.source={spec!r}: the glob {part!r} matches no file (valid: a pattern that "
                              "matches at least one file)")
        return found
    raise ConfigError(f"data.source={spec!r}: {part!r} does not exist (valid: {VALID})")


def _hidden(rel: Path) -> bool:
    """.DS_Store, .git/ and nexus's own side files are not documents."""
    return any(part.startswith(".") for part in rel.parts)
