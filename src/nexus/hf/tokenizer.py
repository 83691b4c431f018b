"""Tokenizers that travel with HF checkpoints.

A HF `tokenizer.json` that already has nexus's `<eos>` is used as a plain `BPETokenizer`. Most HF
tokenizers name their specials differently (`</s>`, `<|endoftext|>`), so `HFTokenizer` wraps the same
`tokenizers` object with the special ids taken from tokenizer_config.json / config.json. It is stored
in a nexus checkpoint as `hf_tokenizer.json` (the file verbatim) plus `hf_tokenizer_meta.json`
(special ids and the original tokenizer_config.json, so export can write it back unchanged).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError
from ..data.tokenizer import BPETokenizer

STORED_JSON = "hf_tokenizer.json"
STORED_META = "hf_tokenizer_meta.json"


class HFTokenizer(BPETokenizer):
    """A HF `tokenizers` tokenizer whose special tokens are given by id rather than by nexus's names."""

    kind = "hf"

    def __init__(self, tok, bos_id: int | None, eos_id: int, pad_id: int | None, hf_config: dict | None = None):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.hf_config = hf_config or {}  # the original tokenizer_config.json (chat template, classes)

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        self.tok.save(str(directory / STORED_JSON))
        meta = {"bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id, "tokenizer_config": self.hf_config}
        (directory / STORED_META).write_text(json.dumps(meta, indent=1))

    @classmethod
    def load_dir(cls, directory: Path) -> "HFTokenizer":
        from tokenizers import Tokenizer

        directory = Path(directory)
        try:
            meta = json.loads((directory / STORED_META).read_text())
            return cls(Tokenizer.from_file(str(directory / STORED_JSON)), meta["bos_id"], meta["eos_id"],
                       meta["pad_id"], meta.get("tokenizer_config"))
        except Exception as e:  # missing/garbled meta or tokenizer file: the checkpoint is damaged
            raise ConfigError(f"checkpoint tokenizer in {str(directory)!r} is damaged "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''})") from None


def _token_text(entry) -> str | None:
    """tokenizer_config.json writes specials either as "</s>" or as {"content": "</s>", ...}."""
    if isinstance(entry, dict):
        return entry.get("content")
    return entry if isinstance(entry, str) else None


def _first_id(value) -> int | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def tokenizer_from_hf_dir(directory: Path, hf_model_cfg=None):
    """-> (tokenizer or None, note). None when the directory has no usable tokenizer.json."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        return None, "no tokenizer.json in the HF directory: the checkpoint uses the byte tokenizer"
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers library raises a bare Exception for formats it cannot read
        return None, f"tokenizer.json could not be read by `tokenizers` ({str(e).splitlines()[0][:80]}): byte tokenizer used"
    if tok.token_to_id("<eos>") is not None:
        return BPETokenizer(tok), "tokenizer.json has nexus specials: used as a BPE tokenizer"
    tcfg_path = Path(directory) / "tokenizer_config.json"
    try:
        tcfg = json.loads(tcfg_path.read_text()) if tcfg_path.is_file() else {}
    except json.JSONDecodeError:
        tcfg = {}

    def special(name: str) -> int | None:
        text = _token_text(tcfg.get(f"{name}_token"))
        tid = tok.token_to_id(text) if text else None
        if tid is None and hf_model_cfg is not None:
            tid = _first_id(getattr(hf_model_cfg, f"{name}_token_id", None))
        return tid

    eos = special("eos")
    if eos is None:
        return None, "tokenizer.json names no end-of-sequence token: byte tokenizer used"
    return HFTokenizer(tok, special("bos"), eos, special("pad"), tcfg), "tokenizer.json wrapped as a HF tokenizer"


def write_hf_tokenizer(tokenizer, out_dir: Path) -> dict:
    """Write tokenizer.json + tokenizer_config.json for `transformers`. -> special ids for config.json."""
    out_dir = Path(out_dir)
    if not isinstance(tokenizer, BPETokenizer):
        return {}  # the byte tokenizer has no tokenizer.json form; ids are the raw UTF-8 bytes
    tokenizer.tok.save(str(out_dir / "tokenizer.json"))
    tcfg = dict(getattr(tokenizer, "hf_config", {}) or {})
    tcfg.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    for name in ("bos", "eos", "pad"):
        tid = getattr(tokenizer, f"{name}_id", None)
        if tid is not None:
            tcfg[f"{name}_token"] = tokenizer.tok.id_to_token(tid)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, ensure_ascii=False))
    return {name: getattr(tokenizer, f"{name}_id", None) for name in ("bos", "eos", "pad")}
