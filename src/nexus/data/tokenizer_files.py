"""Which tokenizer a file or checkpoint directory holds: byte, chat byte, nexus BPE or HF.

These dispatchers sit above `tokenizer`, `chat` and `hf_tokenizer` (they pick among all three), so the
tokenizer classes never import each other in a circle.
"""
from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from .chat import ChatByteTokenizer
from .hf_tokenizer import HFTokenizer, load_any_tokenizer_json
from .tokenizer import ByteTokenizer


def load_tokenizer_json(path: str | Path):
    """data.tokenizer=<path>: a tokenizer.json (or a directory holding one), nexus BPE or any HF one."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"data.tokenizer={str(path)!r} (valid: byte, bpe, or an existing tokenizer.json)")
    # any HF tokenizer.json: its own EOS (</s>, <|endoftext|>, ...) when it has no nexus <eos>
    return load_any_tokenizer_json(path)


STORED_TOKENIZER_FILES = ("tokenizer.json", "hf_tokenizer.json", "tokenizer.txt")  # what save() of each kind writes


def has_stored_tokenizer(directory: str | Path) -> bool:
    """Whether a checkpoint holds a tokenizer. One without (a HF import that had none) still loads
    with the byte tokenizer, but that tokenizer is a fallback, not the model's own (export skips it)."""
    return any((Path(directory) / name).is_file() for name in STORED_TOKENIZER_FILES)


def load_tokenizer_from_dir(directory: str | Path):
    """Tokenizer stored beside a checkpoint (tokenizer.json for BPE, tokenizer.txt for bytes); the
    byte tokenizer when none is stored."""
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        return load_tokenizer_json(directory / "tokenizer.json")
    if (directory / "hf_tokenizer.json").is_file():  # imported HF tokenizer whose specials are not <eos>...
        return HFTokenizer.load_dir(directory)
    txt = directory / "tokenizer.txt"
    if txt.is_file() and _text_of(txt).strip() == "byte_chat":  # byte tokenizer + chat specials (SFT)
        return ChatByteTokenizer()
    return ByteTokenizer()


def _text_of(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{str(path)!r} is not a text file (valid: the tokenizer.txt nexus writes, 'byte' or "
                          "'byte_chat')") from None
