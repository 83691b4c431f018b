"""What `data.source` names, resolved before anything is read or written.

A source is one of the forms registered in `readers/` (one Reader each): a named source (`embedded`, `stdlib`,
`hf:<name>[:<config>]`, `synthetic:<task>`, a prepared directory holding `manifest.json` from `nexus data
prepare`), or files of one registered format (text, json lines, parquet, source code, nanoGPT's `.bin` token
file, ...): a file, a folder (searched recursively), a glob (`'data/*.txt'`) or a comma-separated list of those.
Every bad form is one ConfigError line naming the value and what would be valid (listed from the registry).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError, DataConfig
from .readers import Reader, file_readers, reader, reader_for_file, readers, suffix_of, valid_sources

MANIFEST = "manifest.json"
# Files named after a split (`train.bin`, `val.jsonl`, `validation-00000-of-00001.parquet`, a `test/` folder) are
# that split, as nanoGPT and HF datasets name them: a held-out file is never read into training.
SPLIT_NAMES = {
    "train": "train",
    "training": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "dev": "val",
    "test": "test",
}
# the bare name, or the name then a numbered part (`train-00000-of-00004`, `val_1`); `test_notes` is no split
_SPLIT_STEM = re.compile(r"^(" + "|".join(sorted(SPLIT_NAMES, key=len, reverse=True)) + r")(?:[-_.]\d.*)?$", re.I)


@dataclass
class Source:
    kind: str  # embedded | stdlib | hub | synthetic | prepared | bin | files (the reader's kind)
    spec: str  # data.source as given
    files: list[Path] = field(default_factory=list)  # the files read (files, bin) or the directory (prepared)
    fmt: str = ""  # files and bin: their reader's name (text | json | parquet | code | bin ...)
    val_files: list[Path] = field(default_factory=list)  # files named as a held-out split: the validation split
    unread: list[Path] = field(default_factory=list)  # test files beside validation files: never read
    via: str = ""  # the named source's reader (files: their format, `fmt`)

    @property
    def all_files(self) -> list[Path]:
        return self.files + self.val_files

    def check_fraction_unused(self, val_fraction: float, flag: str) -> None:
        """Files named as splits choose the validation split, so a held-out fraction would be silently
        ignored: refused (one line) when one other than the default was asked for."""
        if self.val_files and val_fraction != DataConfig.val_fraction:
            names = ", ".join(p.name for p in self.val_files[:3])
            raise ConfigError(
                f"{flag}={val_fraction!r} is not used: the source names its held-out file(s) ({names}), "
                f"which are the validation split (valid: drop {flag}, or a source without files named "
                "as splits)"
            )

    def split_note(self) -> str:
        """How the validation split was chosen when files named it (empty otherwise)."""
        if not self.val_files:
            return ""
        note = (
            f"validation: the {len(self.val_files)} file(s) named as a held-out split ("
            f"{', '.join(p.name for p in self.val_files[:3])}{', ...' if len(self.val_files) > 3 else ''}), "
            f"training: the other {len(self.files)}"
        )
        if self.unread:
            note += f"; {len(self.unread)} test file(s) not read ({', '.join(p.name for p in self.unread[:3])})"
        return note

    @property
    def reader(self) -> Reader:
        """The registered reader of this source's form (its format, for files)."""
        return reader(self.via or self.fmt or self.kind)

    @property
    def tokenized(self) -> bool:
        """Whether the source already holds token ids (nothing to tokenize or cache)."""
        return self.reader.tokenized

    def bad_files(self) -> list[tuple[Path, str]]:
        """Every file that cannot be read, with why: empty, or what its reader's check finds (text readers read
        each file through once, in chunks: NUL bytes, not UTF-8; parquet and .bin are checked for size only)."""
        bad = []
        for f in self.all_files:
            why = "is empty" if f.stat().st_size == 0 else self.reader.problem(f, str(f))
            if why:
                bad.append((f, why))
        return bad

    def describe_bad(self, bad: list[tuple[Path, str]], shown: int = 20) -> str:
        listed = "; ".join(f"{str(p)!r} {why}" for p, why in bad[:shown])
        more = f"; and {len(bad) - shown} more" if len(bad) > shown else ""
        return f"{len(bad)} bad file(s): {listed}{more}"

    def check_files(self) -> None:
        """One line naming every bad file at once (bad_files), before anything is tokenized or written."""
        bad = self.bad_files()
        if bad:
            fix = (
                "non-empty token files: move the bad ones out (`nexus data prepare` reads text, not token files)"
                if self.tokenized
                else f"{self.reader.label} files with at least one document; `nexus data "
                "prepare SOURCE --skip-bad ...` leaves them out"
            )
            raise ConfigError(f"data.source={self.spec!r} holds {self.describe_bad(bad)} (valid: {fix})")

    def without(self, bad: list[tuple[Path, str]]) -> Source:
        """The same source less the given files (`nexus data prepare --skip-bad`)."""
        drop = {p for p, _ in bad}
        keep = [f for f in self.files if f not in drop]
        if not keep:
            raise ConfigError(
                f"data.source={self.spec!r}: every training file is bad ({self.describe_bad(bad, 3)}) "
                "(valid: a source with at least one readable file)"
            )
        return Source(
            self.kind, self.spec, keep, self.fmt, [f for f in self.val_files if f not in drop], self.unread, self.via
        )

    def identity(self) -> str:
        """What the source's content depends on, for cache keys (paths, sizes, modification times)."""
        return self.reader.identity(self)

    def total_bytes(self) -> int | None:
        """Bytes the documents are read from (for progress and ETA); None for a stream of unknown size."""
        return self.reader.total_bytes(self)

    def documents(self, cfg: DataConfig) -> Iterator:
        """Documents one at a time (text, or chat rows when data.chat), never the corpus as a list;
        data.max_documents (0 = all) stops the stream. Files named as a held-out split come last."""
        if self.val_files and not self.files:  # held-out files alone (resolve_source's held_out_alone)
            return self._documents(cfg, self.val_files)
        if self.val_files:
            return (doc for doc, _ in self.split_documents(cfg))
        return self._documents(cfg, self.files)

    def split_documents(self, cfg: DataConfig) -> Iterator[tuple[object, bool | None]]:
        """(document, is_validation) in stream order: split.py's seeded document-level split, or, when files
        are named as splits, the training files' documents then the held-out files' (data.max_documents
        caps each side, so a cap never drops the validation split)."""
        from .split import split_documents

        if not self.val_files:
            return split_documents(self._documents(cfg, self.files), cfg.val_fraction, cfg.split_seed)
        if not self.files:  # held-out files alone: every document is validation
            return ((d, True) for d in self._documents(cfg, self.val_files))
        import itertools

        return itertools.chain(
            ((d, False) for d in self._documents(cfg, self.files)),
            ((d, True) for d in self._documents(cfg, self.val_files)),
        )

    def _documents(self, cfg: DataConfig, files: list[Path]) -> Iterator:
        if cfg.document_per_file and "document_per_file" not in self.reader.options:
            takers = [r for r in file_readers() if "document_per_file" in r.options]
            raise ConfigError(
                f"data.document_per_file=True applies to {'/'.join(r.shown_suffixes() for r in takers)} "
                f"files, not data.source={self.spec!r} (valid: false; rows of json/parquet files, "
                "stdlib files and the like are documents already)"
            )
        return _capped(self.reader.documents(self, files, cfg), cfg.max_documents, self.spec)


def _capped(docs: Iterator, cap: int, spec: str) -> Iterator:
    n = 0
    for doc in docs:
        if cap and n >= cap:
            return
        n += 1
        yield doc
    if n == 0:
        raise ConfigError(f"data.source={spec!r} holds no documents (valid: a source with at least one document)")


def resolve_source(spec: str, held_out_alone: bool = False) -> Source:
    """data.source -> Source, checking paths, globs and formats; reads no document. held_out_alone: a source of
    held-out files only (val.bin) is the validation split with no training files (`nexus eval` scores it), not
    refused as it is for training."""
    for r in readers():
        if r.claims(spec):
            r.check_spec(spec)
            return Source(r.kind, spec, via=r.name)
    parts = [spec] if Path(spec).exists() else [s.strip() for s in spec.split(",") if s.strip()]
    files: list[Path] = []
    for part in parts:
        files += _expand(part, spec)
    if len(files) == 1 and files[0].is_dir():
        r = _directory_reader(files[0])
        return Source(r.kind, spec, files, via=r.name)
    if any(f.is_dir() for f in files):
        raise ConfigError(
            f"data.source={spec!r} mixes a prepared directory with other inputs (valid: one prepared directory alone)"
        )
    by_fmt: dict[str, list[Path]] = {}
    for f in files:
        r = reader_for_file(f)
        if r is None:
            raise ConfigError(
                f"data.source={spec!r}: {str(f)!r} has suffix {suffix_of(f)!r} (valid: a registered "
                f"format: {', '.join(s for fr in file_readers() for s in fr.suffixes)})"
            )
        by_fmt.setdefault(r.name, []).append(f)
    if len(by_fmt) > 1:
        counts = ", ".join(f"{reader(k).label}: {len(v)} file(s)" for k, v in sorted(by_fmt.items()))
        raise ConfigError(
            f"data.source={spec!r} mixes file formats ({counts}) (valid: files of one format: "
            f"{', '.join(r.label for r in file_readers())})"
        )
    fmt = next(iter(by_fmt))
    dup = len(files) != len({f.resolve() for f in files})
    if dup:
        raise ConfigError(
            f"data.source={spec!r} names a file more than once (valid: each file once; a repeated "
            "file would repeat its documents silently)"
        )
    train, val, unread = split_named(files, parts)
    sibling = files[0].with_name("val.bin")
    if (
        fmt == "bin" and [f.name for f in files] == ["train.bin"] and sibling.is_file()
    ):  # nanoGPT's pair, train.bin named
        val = [sibling]
    if val and not train and not held_out_alone:
        raise ConfigError(
            f"data.source={spec!r} holds only held-out files ({', '.join(p.name for p in val[:3])}) "
            "(valid: training files beside them, e.g. train.bin or train.jsonl)"
        )
    return Source(reader(fmt).kind, spec, train, fmt, val, unread)


def _directory_reader(path: Path) -> Reader:
    return next(r for r in readers() if r.claims_directory(path))


def split_of(path: Path, root: Path | None) -> str | None:
    """The split a file's name or folder names (train | val | test), or None. Folders count below `root`."""
    m = _SPLIT_STEM.match(path.name.split(".")[0])
    if m:
        return SPLIT_NAMES[m.group(1).lower()]
    if root is not None:
        for part in path.relative_to(root).parts[:-1]:
            if part.lower() in SPLIT_NAMES:
                return SPLIT_NAMES[part.lower()]
    return None


def split_named(files: list[Path], parts: list[str]) -> tuple[list[Path], list[Path], list[Path]]:
    """(training, validation, unread) files: files named as validation are the validation split; test files
    are the validation split only when no validation file exists (else they are not read at all)."""
    roots = [Path(p).expanduser() for p in parts if Path(p).expanduser().is_dir()]

    def root_of(f: Path) -> Path | None:
        return next((r for r in roots if f.is_relative_to(r)), None)

    named = {f: split_of(f, root_of(f)) for f in files}
    val = [f for f in files if named[f] == "val"]
    test = [f for f in files if named[f] == "test"]
    if not val:
        val, test = test, []
    return [f for f in files if named[f] in (None, "train")], val, test


def _expand(part: str, spec: str) -> list[Path]:
    """One element of a source list: a file, a directory (prepared, or a folder of documents) or a glob."""
    p = Path(part).expanduser()
    if p.is_file():
        return [p]
    if p.is_dir():
        if any(r.claims_directory(p) for r in readers()):  # a prepared directory is one source, not its files
            return [p]
        found = sorted(
            (f for f in p.rglob("*") if f.is_file() and not _hidden(f.relative_to(p))),
            key=lambda f: f.relative_to(p).as_posix(),
        )
        if not found:
            raise ConfigError(
                f"data.source={spec!r}: folder {part!r} holds no files (valid: a folder of files of "
                f"one format: {', '.join(r.shown_suffixes() for r in file_readers())}; or a prepared "
                "directory)"
            )
        return found
    if glob.has_magic(part):
        found = sorted(Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file())
        if not found:
            raise ConfigError(
                f"data.source={spec!r}: the glob {part!r} matches no file (valid: a pattern that "
                "matches at least one file)"
            )
        return found
    raise ConfigError(f"data.source={spec!r}: {part!r} does not exist (valid: {valid_sources()})")


def _hidden(rel: Path) -> bool:
    """.DS_Store, .git/ and nexus's own side files are not documents."""
    return any(part.startswith(".") for part in rel.parts)
