"""Plain-text files: prose (blank lines separate documents) and source code (one document per file)."""

from __future__ import annotations

from pathlib import Path

from . import READERS, Reader


class Text(Reader):
    """`.txt`/`.md`: documents separated by blank lines, or the whole file with data.document_per_file."""

    name = label = "text"
    suffixes = (".txt", ".md", ".text")
    options = ("document_per_file", "max_documents")
    order = 20

    def problem(self, path: Path, shown: str) -> str | None:
        from ..corpus import text_problem

        return text_problem(path, shown)  # NUL bytes or not UTF-8, read through once in chunks

    def documents(self, source, files, cfg):
        from ..corpus import _txt_documents

        whole = cfg.document_per_file or self.whole_files
        for p in files:
            yield from _txt_documents(p, str(p) if len(files) > 1 else source.spec, whole)

    def example(self, path: Path, documents: list[str]) -> Path:
        path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
        return path


class Code(Text):
    """Source code: one document per file. Blank lines separate functions, not documents, so cutting code at them
    would put a file's pieces on both sides of the train/validation split (issue 50 item 4)."""

    name, label = "code", "source code"
    suffixes = (
        ".py",
        ".pyi",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".rs",
        ".go",
        ".java",
        ".js",
        ".ts",
        ".sh",
        ".rb",
        ".lua",
        ".jl",
    )
    order = 23
    whole_files = True


READERS.register("text")(Text())
READERS.register("code")(Code())
