"""Table rows through HF `datasets` (streamed, no Arrow copy in the HF cache): json lines (plain or gzip-compressed)
and parquet. A row's data.text_field is a document, or with data.chat the whole row is a conversation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from . import READERS, Reader


class Rows(Reader):
    builder = ""  # the `datasets` builder that reads the files
    options = ("text_field", "chat", "max_documents")

    def documents(self, source, files, cfg):
        from ..corpus import _rows_to_text, _table_rows

        rows = _table_rows(files, source.spec, self.builder)
        return rows if cfg.chat else _rows_to_text(rows, cfg.text_field, source.spec)


class JsonLines(Rows):
    name, label, builder = "json", "json lines", "json"
    # .gz: `datasets` decompresses by the name's ending; the UTF-8 check below reads the decompressed bytes
    suffixes = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
    order = 21

    def problem(self, path: Path, shown: str) -> str | None:
        from ..corpus import text_problem

        if not path.name.lower().endswith(".gz"):
            return text_problem(path, shown)
        try:
            why = text_problem(path, shown, opener=gzip.open)
        except (OSError, EOFError) as e:  # BadGzipFile is an OSError; a cut-off stream ends in EOFError
            return f"is not a complete gzip file ({type(e).__name__}: {str(e)[:80]})"
        return f"{why} once decompressed" if why else None

    def example(self, path: Path, documents: list[str]) -> Path:
        lines = "".join(json.dumps({"text": d}) + "\n" for d in documents)
        with (gzip.open if path.name.lower().endswith(".gz") else open)(path, "wt", encoding="utf-8") as f:
            f.write(lines)
        return path


class Parquet(Rows):
    name, label, builder = "parquet", "parquet", "parquet"
    suffixes = (".parquet",)
    order = 22

    def example(self, path: Path, documents: list[str]) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": documents}), path)
        return path


READERS.register("json")(JsonLines())
READERS.register("parquet")(Parquet())
