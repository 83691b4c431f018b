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


def load_tokenizer(path: str | Path, hf_model_cfg=None):
    """The tokenizer a path holds: the one rule for --data.tokenizer, `nexus data prepare --tokenizer`,
    --init-from and `nexus import` (so they agree on what a file is). A file: a tokenizer.txt (nexus's
    byte tokenizers) or a tokenizer.json (nexus's byte tokenizer as exported, a nexus BPE or any HF one).
    A directory (a checkpoint, a prepared corpus, an HF export): the first of STORED_TOKENIZER_FILES it
    holds."""
    path = Path(path)
    if path.is_dir():
        found = next((path / n for n in STORED_TOKENIZER_FILES if (path / n).is_file()), None)
        if found is None:
            raise ConfigError(
                f"data.tokenizer={str(path)!r} holds no tokenizer (valid: byte, bpe, a tokenizer.json, "
                f"or a directory holding one of {', '.join(STORED_TOKENIZER_FILES)})"
            )
        path = found
    if not path.is_file():
        raise ConfigError(
            f"data.tokenizer={str(path)!r} does not exist (valid: byte, bpe, a tokenizer.json or "
            "tokenizer.txt, or a directory holding one)"
        )
    if path.name == "hf_tokenizer.json":  # imported HF tokenizer whose specials are not <eos>...
        return HFTokenizer.load_dir(path.parent)
    if path.suffix == ".txt":
        return _byte_tokenizer_named(path)
    # any HF tokenizer.json: its own EOS (</s>, <|endoftext|>, ...) when it has no nexus <eos>
    return load_any_tokenizer_json(path, hf_model_cfg)


def tokenizer_from_hf_dir(directory: Path, hf_model_cfg=None):
    """`nexus import`: -> (tokenizer or None, note). None (the byte tokenizer is used) when the directory
    has no tokenizer.json or none load_tokenizer can use; the note says which."""
    if not (Path(directory) / "tokenizer.json").is_file():
        return None, "no tokenizer.json in the HF directory: the checkpoint uses the byte tokenizer"
    try:
        tok = load_tokenizer(Path(directory) / "tokenizer.json", hf_model_cfg)
    except ConfigError as e:
        return None, f"{e}: byte tokenizer used"
    notes = {
        "byte": "tokenizer.json is nexus's byte tokenizer: restored as such",
        "bpe": "tokenizer.json has nexus specials: used as a BPE tokenizer",
        "hf": "tokenizer.json wrapped as a HF tokenizer",
    }
    return tok, notes.get(tok.kind, notes["byte"])


STORED_TOKENIZER_FILES = ("tokenizer.json", "hf_tokenizer.json", "tokenizer.txt")  # what save() of each kind writes


def has_stored_tokenizer(directory: str | Path) -> bool:
    """Whether a checkpoint holds a tokenizer. One without (a HF import that had none) still loads
    with the byte tokenizer, but that tokenizer is a fallback, not the model's own (export skips it)."""
    return any((Path(directory) / name).is_file() for name in STORED_TOKENIZER_FILES)


def load_tokenizer_from_dir(directory: str | Path):
    """Tokenizer stored beside a checkpoint; the byte tokenizer when none is stored."""
    return load_tokenizer(directory) if has_stored_tokenizer(directory) else ByteTokenizer()


def _byte_tokenizer_named(path: Path):
    """tokenizer.txt: 'byte', or 'byte_chat' (byte tokenizer + chat specials, SFT)."""
    try:
        text = path.read_text().strip()
    except UnicodeDecodeError:
        text = None
    if text not in ("byte", "byte_chat"):
        raise ConfigError(
            f"{str(path)!r} is not a text file naming a nexus tokenizer (valid: the tokenizer.txt "
            "nexus writes, 'byte' or 'byte_chat')"
        )
    return ChatByteTokenizer() if text == "byte_chat" else ByteTokenizer()
