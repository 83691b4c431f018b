"""Where documents come from: the embedded default corpus, local files, or the HF hub."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

from ..config import ConfigError, DataConfig

# Standard-library modules whose docstrings extend the embedded corpus (all ship with CPython).
_DOC_MODULES = [
    "collections",
    "functools",
    "itertools",
    "json",
    "pathlib",
    "re",
    "string",
    "textwrap",
    "argparse",
    "logging",
    "unittest",
    "typing",
    "dataclasses",
    "statistics",
    "fractions",
    "decimal",
    "datetime",
    "calendar",
    "heapq",
    "bisect",
    "csv",
    "difflib",
    "inspect",
    "ast",
]


def embedded_documents() -> list[str]:
    """English prose that every Python installation carries: the interpreter's bundled language
    reference topics (pydoc_data.topics, ~0.5 MB) plus standard-library docstrings. No download."""
    docs: list[str] = []
    try:
        from pydoc_data.topics import topics

        docs.extend(t.strip() for _, t in sorted(topics.items()) if t.strip())
    except ImportError:  # some distributions strip pydoc_data; docstrings still give a usable corpus
        pass
    import importlib
    import warnings

    for name in _DOC_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for _, obj in sorted(vars(mod).items()):
            with warnings.catch_warnings():  # typing's deprecated aliases warn when touched
                warnings.simplefilter("ignore", DeprecationWarning)
                doc = inspect.getdoc(obj) if (inspect.isclass(obj) or inspect.isfunction(obj)) else None
            if doc and len(doc) > 200 and getattr(obj, "__module__", None) == name:
                docs.append(doc)
    if not docs:
        raise ConfigError("data.source='embedded' found no bundled text in this Python (valid: a local file path)")
    # Some docstrings are shared word for word (typing's generics, statistics' medians): one copy each, or the
    # split would put a copy on each side and validation would score text it trained on.
    return list(dict.fromkeys(docs))


def _rows_to_text(rows, field: str, path: str) -> Iterator[str]:
    for i, row in enumerate(rows):
        if field not in row:
            raise ConfigError(f"data.text_field={field!r} not in row {i} of {path} (valid: one of {sorted(row)})")
        yield str(row[field])


_READ_CHUNK = 1 << 20  # characters (bytes when checking the encoding) read at a time from a .txt corpus


# Share of undecodable sequences (per character) above which a file is taken for binary or a different encoding, not
# UTF-8 text with a few damaged characters.
MAX_BAD_SHARE = 0.01
_WARNED: set = set()  # files whose replaced bytes were already reported (the data build reads a file twice)


def check_utf8_file(p: Path, shown: str) -> None:
    """Refuse binary files (NUL bytes) and files in another encoding; warn once about a few undecodable
    bytes (they become U+FFFD). Reads in chunks: the file is never held whole."""
    problem = text_problem(p, shown)
    if problem:
        raise ConfigError(f"data.source={shown!r} {problem} (valid: a UTF-8 text file; convert it with iconv)")


def text_problem(p: Path, shown: str, opener=open) -> str | None:
    """Why a file is not UTF-8 text: "looks binary (NUL bytes)" or "is not UTF-8 text (...)"; None for
    text (a few undecodable bytes are warned about once and become U+FFFD). opener: how the file's bytes are
    read (gzip.open: a compressed file's text is checked, not its compressed bytes)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    nul = bad = chars = 0
    first, offset = None, 0
    with opener(p, "rb") as f:
        while True:
            raw = f.read(_READ_CHUNK)
            final = not raw
            if raw.count(0):
                nul += raw.count(0)
                break
            pending = decoder.getstate()[0]  # the previous chunk's unfinished sequence, decoded with this one
            text = decoder.decode(raw, final=final)
            replaced = text.count("\ufffd") - raw.count("\ufffd".encode())  # not the U+FFFD the file really holds
            if replaced > 0 and first is None:
                try:
                    (pending + raw).decode("utf-8")
                except UnicodeDecodeError as e:  # a sequence cut at the chunk's (or the file's) end starts before it
                    first = offset - len(pending) + e.start
            bad += max(replaced, 0)
            chars += len(text)
            offset += len(raw)
            if final:
                break
    if nul:
        return "looks binary (NUL bytes)"
    if bad > MAX_BAD_SHARE * max(chars, 1):
        return f"is not UTF-8 text ({bad:,} undecodable sequences in {offset:,} bytes, the first at byte {first})"
    key = (str(p.resolve()), p.stat().st_mtime_ns)
    if bad and key not in _WARNED:
        _WARNED.add(key)
        import sys

        print(
            f"nexus: warning: data.source={shown!r}: {bad:,} undecodable byte sequences (the first at byte {first}) "
            "replaced by U+FFFD",
            file=sys.stderr,
        )
    return None


def read_utf8_text(p: Path, shown: str) -> str:
    """A text file as str, after check_utf8_file's rules (the embedded tests and small files)."""
    check_utf8_file(p, shown)
    return p.read_bytes().decode("utf-8", errors="replace")


def _txt_documents(p: Path, shown: str | None = None, whole: bool = False) -> Iterator[str]:
    """Blank-line separated documents, read in chunks: the same documents as splitting the whole text
    on "\n\n", without holding the file in memory (the tail after the last separator is carried).
    whole: the file is one document (data.document_per_file)."""
    check_utf8_file(p, shown or str(p))
    if whole:
        text = p.read_bytes().decode("utf-8", errors="replace").strip()
        if text:
            yield text
        return
    carry = ""
    with open(p, encoding="utf-8", errors="replace") as f:
        while True:
            chunk = f.read(_READ_CHUNK)
            if not chunk:
                break
            parts = (carry + chunk).split("\n\n")
            carry = parts.pop()
            for d in parts:
                if d.strip():
                    yield d.strip()
    if carry.strip():
        yield carry.strip()


def _table_rows(files: list[Path], path: str, kind: str | None = None) -> Iterator[dict]:
    """Rows of json lines or parquet files as an HF IterableDataset (streamed; no Arrow copy in the HF cache).
    kind: the `datasets` builder (the reader's; None: parquet by the first file's suffix, else json)."""
    import datasets

    kind = kind or ("parquet" if files[0].suffix.lower() == ".parquet" else "json")
    _quiet_reader_errors()
    try:
        ds = datasets.load_dataset(kind, data_files=[str(p) for p in files], split="train", streaming=True)
        yield from ds
    except ConfigError:
        raise
    except Exception as e:  # datasets raises many exception types for malformed files
        raise ConfigError(
            f"data.source={path!r} could not be read as {kind} ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
        ) from None


def file_documents(files: list[Path], fmt: str, spec: str, cfg: DataConfig) -> Iterator:
    """Documents of local files in order: .txt (blank-line separated documents), json lines or parquet
    rows (their data.text_field, or whole rows for chat)."""
    if fmt == "text":
        for p in files:
            yield from _txt_documents(p, str(p) if len(files) > 1 else spec, cfg.document_per_file)
        return
    rows = _table_rows(files, spec)
    yield from (rows if cfg.chat else _rows_to_text(rows, cfg.text_field, spec))


def hub_documents(spec: str, cfg: DataConfig) -> Iterator:
    """hf:<name>[:<config>] streamed from the hub one row at a time (e.g. hf:HuggingFaceFW/fineweb-edu:sample-10BT);
    never held as a list. Failing to open the stream (offline, unknown or gated dataset) is one line."""
    parts = spec[3:].split(":")
    name, conf = parts[0], (parts[1] if len(parts) > 1 else None)
    rows = _open_hub_stream(name, conf, spec)
    yield from (rows if cfg.chat else _rows_to_text(rows, cfg.text_field, spec))


class _DropReaderErrors:
    """datasets logs a malformed file's error itself and then raises it; nexus turns the raise into its one
    line, so the library's copy printed before it is dropped (a logging filter: datasets has no option)."""

    def filter(self, record) -> bool:
        return not record.getMessage().startswith(("Failed to load JSON from file", "Failed to read file"))


def _quiet_reader_errors() -> None:
    import logging

    for name in ("datasets.packaged_modules.json.json", "datasets.packaged_modules.parquet.parquet"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropReaderErrors) for f in logger.filters):
            logger.addFilter(_DropReaderErrors())


def _go_offline_if_hub_unreachable() -> bool:
    """One TCP connection to the hub (3 s at most) before anything asks it: when it cannot be reached, hub
    access is switched to offline (HF_HUB_OFFLINE), so a dataset in the local cache still loads and any
    other fails at once with one line, instead of huggingface_hub's 5 retries over ~40 s, each logged.
    Skipped behind a proxy (a direct connection says nothing there). True when it switched."""
    import os
    import socket
    import sys
    from urllib.parse import urlparse

    if _hub_offline() or any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=3).close()
        return False
    except OSError:
        pass
    os.environ["HF_HUB_OFFLINE"] = "1"
    for mod, attr in (
        ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_DATASETS_OFFLINE"),
    ):  # read once at import: set where already imported
        if mod in sys.modules and hasattr(sys.modules[mod], attr):
            setattr(sys.modules[mod], attr, True)
    return True


def _open_hub_stream(name: str, conf: str | None, spec: str) -> Iterator:
    went_offline = _go_offline_if_hub_unreachable()
    import datasets

    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity_error()  # one line of ours, not the library's warnings and retries
    try:
        ds = datasets.load_dataset(name, conf, split="train", streaming=True)
        it = iter(ds)
        first = next(it, None)
    except Exception as e:  # offline, unknown dataset, gated: one line, no traceback
        offline = (
            " (the hub is unreachable from here, so only the local cache was looked in)"
            if went_offline
            else " (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)"
            if _hub_offline()
            else ""
        )
        raise ConfigError(
            f"data.source={spec!r} could not be loaded from the hub{offline} ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:160] if str(e) else ''}) (valid: an online dataset name, or "
            "a local file, folder or prepared directory)"
        ) from None
    finally:
        datasets.logging.set_verbosity(verbosity)
    if first is None:
        return
    yield first
    yield from it


def _hub_offline() -> bool:
    import os

    return any(
        os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )
