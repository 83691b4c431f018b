"""What `data.source` can name, one registered `Reader` per form (issue 49 item 2): a file format found by its
suffixes (text, json lines, parquet, source code, token files) or a named source (embedded, stdlib, hf:, synthetic:,
a prepared directory). Each reader carries what it reads: its suffixes, the data.* options it honours, the check of
one file before anything is tokenized, its documents, and (for file formats) how to write a small example file,
which the registry-wide tests (tests/test_data_readers.py) use to hold every registered format to the same rules.

A reader is a module of this package that registers an instance:

    class TsvReader(Reader):
        name, suffixes, label = "tsv", (".tsv",), "tab-separated rows"
        def documents(self, source, files, cfg): ...
    READERS.register("tsv")(TsvReader())

The package is scanned on the first lookup, so a new format is a new file; every message and help text that lists
what a source may be is built from the registry (`valid_sources`, `file_forms`). Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ...plugins import Registry


class Reader:
    """One form of data.source. File readers set `suffixes`; named sources override `claims` (a spec string) or
    `claims_directory` (a directory that is theirs as a whole, e.g. a prepared directory)."""

    name: str = ""
    label: str = ""  # what messages call its files ("text", "json lines"): the mixed-formats line lists these
    form: str = ""  # how the list of valid sources names a named source ("embedded", "hf:<name>[:<config>]")
    suffixes: tuple[str, ...] = ()  # file readers: the endings of the file names it reads, lower case (".jsonl.gz")
    kind: str = "files"  # Source.kind: files (documents) | bin (token ids) | or the named source's own kind
    options: tuple[str, ...] = ()  # the data.* fields it reads beyond data.source (a field it does not read is refused)
    tokenized: bool = False  # it holds token ids: nothing to tokenize, `nexus data prepare` refuses it
    documents_to_prepare: bool = True  # `nexus data prepare` tokenizes its documents (False: ids or a generator)
    whole_files: bool = False  # file readers: each file is one document whatever data.document_per_file says
    order: int = 100  # where lists of sources name it (named sources first, then documents, then token files)

    def claims(self, spec: str) -> bool:
        """Whether the data.source string is this named source's (looked at before any path)."""
        return False

    def claims_directory(self, path: Path) -> bool:
        """Whether a directory is one source of this reader as a whole (not a folder of files)."""
        return False

    def check_spec(self, spec: str) -> None:
        """A named source's own rules on the spec string (ConfigError, one line)."""

    def problem(self, path: Path, shown: str) -> str | None:
        """Why one (non-empty) file cannot be read, in words after its name; None when it can. Run on every file
        before anything is tokenized or written, so all bad files are named at once."""
        return None

    def documents(self, source, files: list[Path], cfg) -> Iterator:
        """The documents (str, or chat rows) of `files` (file readers) or of the named source, one at a time."""
        from ...config import ConfigError

        raise ConfigError(f"data.source={source.spec!r} holds token ids, not documents (valid here: a text source)")

    def identity(self, source) -> str:
        """What the source's content depends on, for cache keys (paths, sizes, modification times)."""
        ident = ";".join(_stamp(p) for p in source.files)
        if source.val_files:  # the split rule is part of what the tokens are
            ident += "|val:" + ";".join(_stamp(p) for p in source.val_files)
        return ident

    def total_bytes(self, source) -> int | None:
        """Bytes the documents are read from (progress and ETA); None for a stream of unknown size."""
        return sum(p.stat().st_size for p in source.all_files) if self.suffixes and not self.tokenized else None

    def example(self, path: Path, documents: list[str]) -> Path:
        """File readers: write `documents` as one file of this format at `path` (which ends with one of its
        suffixes) and return it. The registry-wide tests read every suffix's file back through
        `nexus data prepare` and through training."""
        raise NotImplementedError(f"reader {self.name!r} writes no example file")

    def shown_suffixes(self) -> str:
        return "/".join(self.suffixes)


def _stamp(p: Path) -> str:
    return f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}"


READERS: Registry[Reader] = Registry("data.source reader", __name__)


def readers() -> list[Reader]:
    """Every registered reader, by `order` (then as registered: this package's modules by name, then plugins)."""
    return sorted((r for _, r in READERS.items()), key=lambda r: r.order)


def file_readers() -> list[Reader]:
    return [r for r in readers() if r.suffixes]


def reader(name: str) -> Reader:
    return READERS.get(name)


def reader_for_file(path: Path) -> Reader | None:
    """The file reader whose longest suffix ends the file's name (`a.jsonl.gz` is json's `.jsonl.gz`), or None."""
    low = path.name.lower()
    best, size = None, 0
    for r in file_readers():
        for s in r.suffixes:
            if low.endswith(s) and len(s) > size and len(low) > len(s):
                best, size = r, len(s)
    return best


def suffix_of(path: Path) -> str:
    """How a message names a file's suffix: the registered one that ends it, else its last one."""
    r = reader_for_file(path)
    if r is not None:
        return max((s for s in r.suffixes if path.name.lower().endswith(s)), key=len)
    return path.suffix or "(none)"


def all_suffixes() -> str:
    """Every registered file suffix, as one list for a message: `.txt, .md, ..., .bin`."""
    return ", ".join(s for r in file_readers() for s in r.suffixes)


def file_forms(readers_=None, sep: str = "; ") -> str:
    """The file formats, each as its suffixes and label: `.txt/.md/.text (text); .jsonl/... (json lines); ...`."""
    return sep.join(f"{r.shown_suffixes()} ({r.label})" for r in (readers_ if readers_ is not None else file_readers()))


def named_forms(prepare_only: bool = False) -> list[str]:
    return [r.form for r in readers() if r.form and (r.documents_to_prepare or not prepare_only)]


def valid_sources(prepare_only: bool = False) -> str:
    """What data.source may be, built from the registry (every "valid:" and help text that lists sources).
    prepare_only: the sources `nexus data prepare` tokenizes (documents, not token ids or a generator)."""
    files = [r for r in file_readers() if r.documents_to_prepare or not prepare_only]
    return (
        f"{', '.join(named_forms(prepare_only))}, or a file, folder, glob or comma-separated list of files of one "
        f"format: {file_forms(files)}"
    )
