"""Tokenizers: byte-level by default (no training, no download), HF `tokenizers` BPE optionally."""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError


class ByteTokenizer:
    """UTF-8 bytes 0..255 plus three specials. Lossless for any text."""

    kind = "byte"

    def __init__(self):
        self.bos_id, self.eos_id, self.pad_id = 256, 257, 258
        self.vocab_size = 259

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(t.encode("utf-8")) for t in texts]

    def encode_batch_flat(self, texts: list[str]):
        """(all ids concatenated as uint8, length of each text's ids): no Python int per byte."""
        raw = [t.encode("utf-8") for t in texts]
        import numpy as np

        return np.frombuffer(b"".join(raw), dtype=np.uint8), np.fromiter(map(len, raw), np.int64, len(raw))

    def decode(self, ids) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def token_id(self, special: str) -> int:
        return {"<bos>": self.bos_id, "<eos>": self.eos_id, "<pad>": self.pad_id}[special]

    def save(self, directory: Path) -> None:
        (Path(directory) / "tokenizer.txt").write_text("byte\n")


SPECIALS = ["<bos>", "<eos>", "<pad>", "<|user|>", "<|assistant|>", "<|end|>"]


class BPETokenizer:
    """Byte-level BPE from HF `tokenizers`, trained on the corpus or loaded from a tokenizer.json."""

    kind = "bpe"

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.bos_id = tok.token_to_id("<bos>")
        self.eos_id = tok.token_to_id("<eos>")
        self.pad_id = tok.token_to_id("<pad>")
        if self.eos_id is None:
            raise ConfigError(
                "data.tokenizer: tokenizer.json has no '<eos>' token "
                "(valid: a nexus-trained BPE or one with <bos>/<eos>/<pad>)"
            )

    @classmethod
    def train(cls, texts, vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many documents at once: `tokenizers` encodes them in parallel in Rust."""
        return [e.ids for e in self.tok.encode_batch(texts)]

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids])

    def token_id(self, special: str) -> int:
        return self.tok.token_to_id(special)

    def save(self, directory: Path) -> None:
        self.tok.save(str(Path(directory) / "tokenizer.json"))
