"""The sources named by a word or a prefix rather than a file: the embedded corpus, this Python's stdlib sources,
a hub dataset, a synthetic task, and a prepared directory (a directory holding manifest.json)."""

from __future__ import annotations

import sys
from pathlib import Path

from ...config import ConfigError
from . import READERS, Reader


class Embedded(Reader):
    name = kind = form = "embedded"
    order = 10
    options = ("max_documents",)

    def claims(self, spec: str) -> bool:
        return spec == "embedded"

    def documents(self, source, files, cfg):
        from ..corpus import embedded_documents

        return iter(embedded_documents())

    def identity(self, source) -> str:
        return f"embedded:deduplicated:{sys.version}"  # the copies once kept are dropped: a new cache

    def total_bytes(self, source):
        return None


class Stdlib(Reader):
    name = kind = form = "stdlib"
    order = 11
    options = ("max_documents",)

    def claims(self, spec: str) -> bool:
        return spec == "stdlib"

    def documents(self, source, files, cfg):
        from ..stdlib_corpus import stdlib_documents

        return stdlib_documents()

    def identity(self, source) -> str:
        from ..stdlib_corpus import identity

        return identity()

    def total_bytes(self, source):
        from ..stdlib_corpus import stdlib_files

        return sum(p.stat().st_size for p in stdlib_files())


class Hub(Reader):
    name, kind, form = "hub", "hub", "hf:<name>[:<config>]"
    order = 12
    options = ("text_field", "chat", "max_documents")

    def claims(self, spec: str) -> bool:
        return spec.startswith("hf:")

    def check_spec(self, spec: str) -> None:
        if not spec[3:].split(":")[0]:
            raise ConfigError(f"data.source={spec!r} names no dataset (valid: hf:<name>[:<config>])")

    def documents(self, source, files, cfg):
        from ..corpus import hub_documents

        return hub_documents(source.spec, cfg)

    def identity(self, source) -> str:
        return source.spec

    def total_bytes(self, source):
        return None


class Synthetic(Reader):
    name = kind = "synthetic"
    form = "synthetic:<task>"
    order = 13
    documents_to_prepare = False  # generated on the fly, batch by batch (data/synthetic.py)
    options = ("synthetic",)

    def claims(self, spec: str) -> bool:
        return spec.startswith("synthetic:")

    def identity(self, source) -> str:
        return source.spec

    def total_bytes(self, source):
        return None


class Prepared(Reader):
    name = kind = "prepared"
    form = "a prepared directory"
    order = 14
    tokenized, documents_to_prepare = True, False

    def claims_directory(self, path: Path) -> bool:
        from ..shards import MANIFEST

        return (path / MANIFEST).is_file()

    def total_bytes(self, source):
        return None


for _r in (Embedded(), Stdlib(), Hub(), Synthetic(), Prepared()):
    READERS.register(_r.name)(_r)
