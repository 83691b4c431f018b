"""nanoGPT's bare token file (`train.bin`): raw ids, no document boundaries, dtype by data.dtype. Mapped as it is
(loader.py); its ids are checked against the tokenizer when opened (shards.open_bin)."""

from __future__ import annotations

from pathlib import Path

from . import READERS, Reader


class TokenFile(Reader):
    name, label, kind = "bin", "token ids", "bin"
    suffixes = (".bin",)
    options = ("dtype",)
    order = 30
    tokenized, documents_to_prepare = True, False

    def example(self, path: Path, documents: list[str]) -> Path:
        """The documents' byte-tokenizer ids with EOS after each, as uint16 (nanoGPT's dtype)."""
        import numpy as np

        from ..tokenizer import ByteTokenizer

        tok = ByteTokenizer()
        ids = [i for d in documents for i in (*tok.encode(d), tok.eos_id)]
        np.asarray(ids, dtype=np.uint16).tofile(path)
        return path


READERS.register("bin")(TokenFile())
