"""Token files on disk: the prepared-directory format and memory-mapped views of token shards.

A prepared directory (written by `nexus data prepare` and by the automatic cache) holds
`manifest.json`, the tokenizer it was made with (`tokenizer.json` / `tokenizer.txt` / `hf_tokenizer*`),
and per split numbered shards `train-00000.bin`, `val-00000.bin` (+ `.mask` for chat SFT): raw token
ids in the manifest's dtype, EOS after every document, in document order. The manifest records the
tokenizer identity, dtype, the source, the split rule and per shard the tokens, documents, UTF-8 bytes
and largest id. Opening one maps the shards (np.memmap): nothing is read until a batch needs it.
A bare `.bin` is nanoGPT's format: ids only, dtype not recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from ..config import ConfigError

FORMAT = "nexus-prepared"
VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "val")
VERIFY_NOTE_BYTES = 1 << 30  # shards hashed on open (~0.4 GB/s a core): from this size the wait is announced


def tokenizer_identity(tok) -> dict:
    """What makes two tokenizers give the same ids: kind, vocabulary size, EOS and the serialized model."""
    inner = getattr(tok, "tok", None)
    body = inner.to_str() if inner is not None else tok.kind
    return {
        "kind": tok.kind,
        "vocab_size": int(tok.vocab_size),
        "eos_id": int(tok.eos_id),
        "sha256": hashlib.sha256(body.encode()).hexdigest()[:16],
    }


def token_dtype(vocab_size: int):
    """uint16 when every id fits (nanoGPT's choice), else uint32."""
    return np.uint16 if vocab_size <= 65536 else np.uint32


class ShardedTokens:
    """Several token arrays read as one sequence (shards concatenated in order), without copying."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = [a for a in arrays if len(a)]
        self.starts = np.cumsum([0] + [len(a) for a in self.arrays])
        self.dtype = self.arrays[0].dtype if self.arrays else np.dtype(np.uint16)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, sl):
        if not isinstance(sl, slice) or sl.step not in (None, 1):
            raise TypeError("ShardedTokens supports contiguous slices only")
        a, b, _ = sl.indices(len(self))
        if b <= a:
            return np.empty(0, self.dtype)
        i = int(np.searchsorted(self.starts, a, side="right")) - 1
        parts = []
        while a < b:
            lo = a - int(self.starts[i])
            take = min(b - a, len(self.arrays[i]) - lo)
            parts.append(self.arrays[i][lo : lo + take])
            a += take
            i += 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __array__(self, dtype=None, copy=None):
        out = np.concatenate(self.arrays) if self.arrays else np.empty(0, self.dtype)
        return out.astype(dtype) if dtype is not None else out


def joined(arrays: list[np.ndarray]):
    """One array as itself (a plain memmap), several as a ShardedTokens view."""
    arrays = [a for a in arrays if len(a)]
    return arrays[0] if len(arrays) == 1 else ShardedTokens(arrays)


def split_tail(arrays: list[np.ndarray], n_tail: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(head, tail) views: the last n_tail tokens of the arrays taken as one sequence, and the rest."""
    head: list[np.ndarray] = list(arrays)
    tail: list[np.ndarray] = []
    while n_tail > 0 and head:
        last = head.pop()
        take = min(n_tail, len(last))
        tail.insert(0, last[len(last) - take :])
        if take < len(last):
            head.append(last[: len(last) - take])
        n_tail -= take
    return head, tail


def windows(tokens, starts: np.ndarray, length: int) -> np.ndarray:
    """tokens[s:s+length] for every s in starts, as one [len(starts), length] array."""
    if isinstance(tokens, np.ndarray):  # one gather for the whole batch
        return tokens[starts[:, None] + np.arange(length)]
    return np.stack([tokens[int(s) : int(s) + length] for s in starts])


def read_manifest(directory: Path, shown: str) -> dict:
    try:
        m = json.loads((Path(directory) / MANIFEST).read_text())
        if m.get("format") != FORMAT:
            raise ValueError(f"format {m.get('format')!r}")
        if m.get("version") != VERSION:
            raise ValueError(f"version {m.get('version')!r}, this nexus reads {VERSION}")
        for split in SPLITS:
            for e in m["shards"][split]:
                int(e["tokens"]), str(e["file"])
        np.dtype(m["dtype"])
        m["tokenizer"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"data.source={shown!r}: manifest.json is not a nexus prepared-corpus manifest "
            f"({type(e).__name__}: {e}) (valid: a directory written by `nexus data prepare`)"
        ) from None
    return m


def check_tokenizer(manifest: dict, tok, shown: str, model_tokenizer: bool = False) -> None:
    """The tokenizer in use must be the one the corpus was prepared with, and its ids must fit. A new run can
    switch to the corpus's tokenizer; a model's own (eval, resume, init-from: model_tokenizer) cannot be swapped,
    its embedding rows are its ids, so the advice is a corpus prepared with it."""
    want, have = manifest["tokenizer"], tokenizer_identity(tok)
    if (want["kind"], want["sha256"], want["vocab_size"]) != (have["kind"], have["sha256"], have["vocab_size"]):
        whose, fix = (
            (
                "the model's tokenizer (from its checkpoint)",
                "a corpus prepared with the model's tokenizer: "
                "nexus data prepare TEXT --tokenizer CHECKPOINT --out DIR",
            )
            if model_tokenizer
            else ("the run's data.tokenizer", f"--data.tokenizer {shown}, the tokenizer stored with the corpus")
        )
        raise ConfigError(
            f"data.source={shown!r} was prepared with tokenizer {want['kind']} (vocab {want['vocab_size']}, "
            f"sha256 {want['sha256']}), but {whose} is {have['kind']} (vocab {have['vocab_size']}, sha256 "
            f"{have['sha256']}) (valid: {fix})"
        )


def open_prepared(directory: Path, manifest: dict, verify: bool = True) -> dict:
    """{split: (tokens, mask or None)} memory-mapped; shard files are checked against the manifest's sizes and
    sha256 first (one read of the corpus, at disk speed: a shard changed after prepare is never trained on).
    verify=False: the caller has just checked or written them (the automatic cache, through `prepare`)."""
    directory = Path(directory)
    dtype = np.dtype(manifest["dtype"])
    if verify:
        _verify_shards(directory, manifest, dtype)
    out = {}
    for split in SPLITS:
        toks, masks = [], []
        for e in manifest["shards"][split]:
            toks.append(_map(directory / e["file"], dtype, int(e["tokens"])))
            if e.get("mask"):
                masks.append(_map(directory / e["mask"], np.dtype(np.uint8), int(e["tokens"])))
        out[split] = (joined(toks) if toks else np.empty(0, dtype), joined(masks) if masks else None)
    return out


def _verify_shards(directory: Path, manifest: dict, dtype) -> None:
    size = sum(
        int(e["tokens"]) * (dtype.itemsize + (1 if e.get("mask") else 0)) for s in SPLITS for e in manifest["shards"][s]
    )
    if size >= VERIFY_NOTE_BYTES and os.environ.get("RANK", "0") in ("", "0"):  # a wait of seconds is said
        print(
            f"nexus data: checking {size / 1e9:,.1f} GB of shards in {directory} against their sha256",
            file=sys.stderr,
            flush=True,
        )
    bad = shard_problems(directory, [e for s in SPLITS for e in manifest["shards"][s]], dtype)
    if bad:
        name, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ConfigError(
            f"data.source={str(directory)!r}: shard {name} {why}{more} (valid: an intact prepared "
            "directory: run the `nexus data prepare` command that made it again; a changed shard must "
            "be deleted first)"
        )


def shard_problems(directory: Path, entries: list[dict], dtype) -> list[tuple[str, str]]:
    """(file name, what is wrong) for every shard file of `entries` (manifest shard entries) that is missing
    or whose bytes are not the ones prepare wrote: size against the token count, then sha256 (entries from
    before hashes were recorded are checked by size only)."""
    directory = Path(directory)
    bad = []
    for e in entries:
        for key, hkey in (("file", "sha256"), ("mask", "mask_sha256")):
            if not e.get(key):
                continue
            path = directory / e[key]
            want = int(e["tokens"]) * (1 if key == "mask" else np.dtype(dtype).itemsize)
            if not path.is_file():
                bad.append((e[key], "missing"))
            elif path.stat().st_size != want:
                bad.append(
                    (e[key], f"is {path.stat().st_size:,} bytes, the manifest says {want:,} (truncated or damaged)")
                )
            elif e.get(hkey) and _sha256(path) != e[hkey]:
                bad.append(
                    (
                        e[key],
                        f"does not match the sha256 the manifest recorded ({e[hkey][:16]}...): its bytes "
                        "changed after it was prepared",
                    )
                )
    return bad


def _sha256(path: Path) -> str:
    """Hashed through a memory map: the page cache is read in place, no copy of the shard is made."""
    import mmap

    h = hashlib.sha256()
    with open(path, "rb") as f:
        if path.stat().st_size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                h.update(mm)
    return h.hexdigest()


def _map(path: Path, dtype, n: int) -> np.ndarray:
    if n == 0:
        return np.empty(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


BIN_DTYPES = ("uint16", "uint32")


def open_bin(path: Path, dtype_name: str, vocab_size: int, shown: str) -> np.ndarray:
    """A bare token file (nanoGPT's train.bin): `dtype_name` auto means uint16 for a vocabulary of at most
    65,536 ids (nanoGPT's convention), else uint32. Its length must be a multiple of the dtype's size and
    every id must fit the tokenizer's vocabulary (checked in chunks; the file is never read whole)."""
    dtype = np.dtype(token_dtype(vocab_size) if dtype_name == "auto" else dtype_name)
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise ConfigError(
            f"data.source={shown!r}: {path.name} is {size:,} bytes, not a multiple of {dtype.name}'s "
            f"{dtype.itemsize} (valid: --data.dtype {' or '.join(d for d in BIN_DTYPES if d != dtype.name)}"
            f", or a complete token file)"
        )
    mm = np.memmap(path, dtype=dtype, mode="r")
    if dtype == np.uint16 and looks_like_wider_ids(mm):
        raise ConfigError(
            f"data.source={shown!r}: {path.name} read as uint16 has 0 at every odd position (ids "
            f"written as uint32 read as uint16 look so; a split of another dtype reads half its ids "
            f"as 0) (valid: every split in one dtype, --data.dtype uint32 when they are uint32)"
        )
    hi = max_id(mm)
    if hi >= vocab_size:
        raise ConfigError(
            f"data.source={shown!r}: {path.name} holds id {hi} but the tokenizer has {vocab_size} ids "
            "(valid: the tokenizer the file was made with, --data.tokenizer PATH, or the right --data.dtype)"
        )
    return mm


def looks_like_wider_ids(tokens, sample: int = 1 << 20) -> bool:
    """True when uint16 ids are every second one 0 and the others mostly not: little-endian uint32 ids below
    65,536 read as uint16 (their high halves). Real text never puts id 0 at every odd position of a sample."""
    head = np.asarray(tokens[:sample])
    if head.size < 64:
        return False
    odd, even = head[1::2], head[0::2]
    return bool((odd == 0).all() and (even != 0).mean() > 0.5)


def max_id(tokens, chunk: int = 1 << 24) -> int:
    return max((int(tokens[i : i + chunk].max()) for i in range(0, len(tokens), chunk)), default=-1)
