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
from .chat import ChatByteTokenizer
from .tokenizer import BPETokenizer, ByteTokenizer

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
    def load_dir(cls, directory: Path) -> HFTokenizer:
        from tokenizers import Tokenizer

        directory = Path(directory)
        try:
            meta = json.loads((directory / STORED_META).read_text())
            return cls(
                Tokenizer.from_file(str(directory / STORED_JSON)),
                meta["bos_id"],
                meta["eos_id"],
                meta["pad_id"],
                meta.get("tokenizer_config"),
            )
        except Exception as e:  # missing/garbled meta or tokenizer file: the checkpoint is damaged
            raise ConfigError(
                f"checkpoint tokenizer in {str(directory)!r} is damaged "
                f"({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''})"
            ) from None


def _token_text(entry) -> str | None:
    """tokenizer_config.json writes specials either as "</s>" or as {"content": "</s>", ...}."""
    if isinstance(entry, dict):
        return entry.get("content")
    return entry if isinstance(entry, str) else None


def _first_id(value) -> int | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value


# End-of-sequence tokens of common tokenizer families, tried in order when a tokenizer.json comes
# without a tokenizer_config.json naming its own.
KNOWN_EOS = ("<eos>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "<|eot_id|>", "[SEP]")
KNOWN_BOS = ("<bos>", "<s>", "<|begin_of_text|>", "<|startoftext|>", "[CLS]")
KNOWN_PAD = ("<pad>", "[PAD]", "<|padding|>")


def _read_tokenizer_config(directory: Path) -> dict:
    path = Path(directory) / "tokenizer_config.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def wrap_tokenizer(tok, tcfg: dict, hf_model_cfg=None) -> HFTokenizer | None:
    """A `tokenizers.Tokenizer` with its special ids: named by tokenizer_config.json, else by the HF
    model config, else the first known name the vocabulary has. None without any end-of-sequence token."""

    def special(name: str, known: tuple) -> int | None:
        text = _token_text(tcfg.get(f"{name}_token"))
        tid = tok.token_to_id(text) if text else None
        if tid is None and hf_model_cfg is not None:
            tid = _first_id(getattr(hf_model_cfg, f"{name}_token_id", None))
        if tid is None:
            tid = next((tok.token_to_id(t) for t in known if tok.token_to_id(t) is not None), None)
        return tid

    eos = special("eos", KNOWN_EOS)
    if eos is None:
        return None
    return HFTokenizer(tok, special("bos", KNOWN_BOS), eos, special("pad", KNOWN_PAD), tcfg)


def load_any_tokenizer_json(path: Path, hf_model_cfg=None):
    """A tokenizer.json: nexus's byte tokenizer as exported (tokenizer_config.json beside it says so), a nexus
    BPE (has <eos>, named as its EOS or no EOS named) or any HF tokenizer, which keeps its own EOS (</s>,
    <|endoftext|>, ...) read from a tokenizer_config.json beside it, the HF model config or known names."""
    from tokenizers import Tokenizer

    tcfg = _read_tokenizer_config(path.parent)
    if tcfg.get("nexus_tokenizer") in BYTE_KINDS:  # a nexus byte model exported earlier: ids are raw bytes
        return BYTE_KINDS[tcfg["nexus_tokenizer"]]()
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers library raises a bare Exception on malformed JSON
        raise ConfigError(
            f"data.tokenizer={str(path)!r} is not a valid tokenizer.json ({str(e).splitlines()[0]})"
        ) from None
    if tok.token_to_id("<eos>") is not None and _token_text(tcfg.get("eos_token")) in (None, "<eos>"):
        return BPETokenizer(tok)
    wrapped = wrap_tokenizer(tok, tcfg, hf_model_cfg)
    if wrapped is None:
        raise ConfigError(
            f"data.tokenizer={str(path)!r} has no end-of-sequence token (valid: a tokenizer.json with "
            f"one of {', '.join(KNOWN_EOS)}, or a tokenizer_config.json beside it naming eos_token)"
        )
    return wrapped


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, the alphabet of `tokenizers`' ByteLevel pre-tokenizer."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_tokenizer_json(tokenizer):
    """The byte tokenizer as a `tokenizers.Tokenizer`: a BPE with no merges over the 256 byte symbols,
    so token id == byte value, plus the specials at nexus's ids (256 <bos>, 257 <eos>, 258 <pad>, and
    259.. for chat). `transformers` loads it with AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    table = _bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={table[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    specials = sorted(((tid, name) for name, tid in _byte_specials(tokenizer).items()))
    assert [tid for tid, _ in specials] == list(range(256, 256 + len(specials))), specials
    tok.add_special_tokens([name for _, name in specials])
    return tok


def _byte_specials(tokenizer) -> dict[str, int]:
    out = {"<bos>": tokenizer.bos_id, "<eos>": tokenizer.eos_id, "<pad>": tokenizer.pad_id}
    for name in ("<|user|>", "<|assistant|>", "<|end|>"):
        try:
            out[name] = tokenizer.token_id(name)
        except KeyError:
            pass
    return out


BYTE_KINDS = {"byte": ByteTokenizer, "byte_chat": ChatByteTokenizer}  # tokenizer_config "nexus_tokenizer" -> class


def write_hf_tokenizer(tokenizer, out_dir: Path, max_len: int | None = None) -> dict:
    """Write tokenizer.json + tokenizer_config.json for `transformers`. -> special ids for config.json.

    max_len: the model's context (model_max_length). Tokenizers nexus made pad on the left because
    the model is decoder-only: right padding puts pad tokens between a short prompt and its
    continuation in batched `generate`. An imported tokenizer keeps its own settings."""
    out_dir = Path(out_dir)
    if isinstance(tokenizer, ByteTokenizer):
        tok = byte_tokenizer_json(tokenizer)
        tcfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "nexus_tokenizer": tokenizer.kind,
            "model_max_length": int(max_len or 1e30),
            "padding_side": "left",
            "clean_up_tokenization_spaces": False,
        }
        chat = [n for n in _byte_specials(tokenizer) if n.startswith("<|")]
        if chat:
            tcfg["additional_special_tokens"] = chat
    elif isinstance(tokenizer, BPETokenizer):
        tok = tokenizer.tok
        tcfg = dict(getattr(tokenizer, "hf_config", {}) or {})
        if not tcfg:  # trained by nexus, not imported: the same decoder-only defaults as the byte tokenizer
            tcfg = {"padding_side": "left", "model_max_length": int(max_len or 1e30)}
        tcfg.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    else:
        return {}
    tok.save(str(out_dir / "tokenizer.json"))
    for name in ("bos", "eos", "pad"):
        tid = getattr(tokenizer, f"{name}_id", None)
        if tid is not None:
            tcfg[f"{name}_token"] = tok.id_to_token(tid)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, ensure_ascii=False))
    return {name: getattr(tokenizer, f"{name}_id", None) for name in ("bos", "eos", "pad")}
