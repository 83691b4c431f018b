"""Tokenized, split, cached token streams and the batches drawn from them.

Documents are split train/validation at the document level with a seeded permutation, tokenized
with EOS between documents, and cached as memory-mapped arrays. Training batches are random
windows drawn from a generator seeded by (seed, step, micro-step): the data cursor is the step
number, so resume and multi-process runs see exactly the same batches as a single process.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError, DataConfig
from ..models.output import IGNORE_INDEX
from .corpus import iter_documents
from .tokenizer import BPETokenizer, ByteTokenizer
from .tokenizer_files import load_tokenizer_json


def default_cache_dir() -> Path:
    return Path(os.environ.get("NEXUS_CACHE", Path.home() / ".cache" / "nexus"))


@dataclass
class TokenStream:
    tokens: np.ndarray  # token ids, EOS-separated documents
    loss_mask: np.ndarray | None = None  # 1 where the token is a training target (SFT); None = all

    def __len__(self) -> int:
        return len(self.tokens)

    def window(self, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = torch.from_numpy(self.tokens[start:start + seq_len + 1].astype(np.int64))
        x, y = chunk[:-1], chunk[1:].clone()
        if self.loss_mask is not None:
            m = torch.from_numpy(self.loss_mask[start + 1:start + seq_len + 1].astype(bool))
            y[~m] = IGNORE_INDEX
        return x, y


class DataModule:
    """Everything the trainer needs from data: tokenizer, train/val streams, batch sampling."""

    def __init__(self, cfg: DataConfig, seed: int = 0, tokenizer=None):
        self.cfg, self.seed = cfg, seed
        self.task = None
        if cfg.source.startswith("synthetic:"):
            from .synthetic import make_task

            self.task = make_task(cfg.source.split(":", 1)[1], cfg.synthetic, cfg.seq_len)
            self.tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
            self.vocab_size = self.task.vocab_size
            return
        if tokenizer is None:
            if cfg.tokenizer == "byte" and cfg.chat:  # chat template needs <|user|>/<|assistant|>/<|end|>
                from .chat import ChatByteTokenizer

                tokenizer = ChatByteTokenizer()
            elif cfg.tokenizer == "byte":
                tokenizer = ByteTokenizer()
            elif cfg.tokenizer == "bpe":  # trained on the training documents, streamed
                val = self._val_indices(_count(iter_documents(cfg)))
                tokenizer = BPETokenizer.train((_doc_text(doc) for i, doc in enumerate(iter_documents(cfg))
                                                if i not in val), cfg.bpe_vocab_size)
            else:
                tokenizer = load_tokenizer_json(cfg.tokenizer)
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self.train, self.val = self._load_or_build()
        for name, stream in (("train", self.train), ("validation", self.val)):
            if len(stream) < cfg.seq_len + 2:
                raise ConfigError(f"data.source={cfg.source!r} gives only {len(stream)} {name} tokens "
                                  f"(valid: at least data.seq_len+2 = {cfg.seq_len + 2}; add text or lower data.seq_len)")

    # ------------------------------------------------------------------ building
    def _val_indices(self, n: int) -> set[int]:
        """Document-level split: a seeded permutation of the n documents, the first n_val held out."""
        if n <= 1:
            return set()
        order = np.random.default_rng(self.cfg.split_seed).permutation(n)
        n_val = max(1, int(round(n * self.cfg.val_fraction)))
        return set(order[:n_val].tolist())

    def _cache_key(self) -> str:
        c = self.cfg
        src = c.source
        if src not in ("embedded",) and not src.startswith("hf:"):
            st = Path(src).stat()
            src = f"{Path(src).resolve()}:{st.st_size}:{st.st_mtime_ns}"
        elif src == "embedded":
            src = f"embedded:{sys.version}"
        tok_id = self.tokenizer.kind
        if isinstance(self.tokenizer, BPETokenizer):
            tok_id += hashlib.sha256(self.tokenizer.tok.to_str().encode()).hexdigest()[:16]
        key = json.dumps([src, tok_id, c.split_seed, c.val_fraction, c.text_field, c.max_documents, c.chat, 1])
        return hashlib.sha256(key.encode()).hexdigest()[:20]

    def _load_or_build(self):
        src = self.cfg.source
        if src != "embedded" and not src.startswith("hf:"):
            check_local_source(src)
        root = Path(self.cfg.cache_dir) if self.cfg.cache_dir else default_cache_dir()
        d = root / self._cache_key()
        if (d / "meta.json").is_file():
            try:
                return self._open(d)
            except (OSError, ValueError, KeyError):
                pass  # a damaged cache is rebuilt, never trusted
        self._build(d)
        return self._open(d)

    def _build(self, d: Path) -> None:
        """Tokenize the corpus into memory-mapped train/val shards under a temporary name, then rename.

        Two streaming passes over the documents (count, then tokenize in batches with encode_batch);
        memory holds one batch of documents and the validation index set, never the whole corpus."""
        n = _count(iter_documents(self.cfg))
        val = self._val_indices(n)
        dtype = np.uint16 if self.vocab_size < 65536 else np.uint32
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = d.with_name(d.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            writers = {name: ShardWriter(tmp, name, dtype, self.cfg.chat) for name in ("train", "val")}
            if n == 1:  # a single document: hold out its tail instead
                text = _doc_text(next(iter_documents(self.cfg)))
                cut = int(len(text) * (1 - self.cfg.val_fraction))
                writers["train"].add(self.tokenizer, [text[:cut]])
                writers["val"].add(self.tokenizer, [text[cut:]])
            else:
                batches = {"train": [], "val": []}
                for i, doc in enumerate(iter_documents(self.cfg)):
                    name = "val" if i in val else "train"
                    batches[name].append(doc)
                    if len(batches[name]) >= ENCODE_BATCH:
                        writers[name].add(self.tokenizer, batches[name])
                        batches[name] = []
                for name, docs in batches.items():
                    writers[name].add(self.tokenizer, docs)
            meta = {name: w.close() for name, w in writers.items()}
            (tmp / "meta.json").write_text(json.dumps(meta))
            os.replace(tmp, d)
        except OSError:
            if not (d / "meta.json").is_file():
                raise
        finally:  # another process that won the race wrote the same cache
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)

    def _open(self, d: Path):
        meta = json.loads((d / "meta.json").read_text())
        out = []
        for name in ("train", "val"):
            m = meta[name]
            toks = np.memmap(d / f"{name}.bin", dtype=m["dtype"], mode="r", shape=(m["n"],))
            mask = np.memmap(d / f"{name}.mask", dtype=np.uint8, mode="r", shape=(m["n"],)) if m["mask"] else None
            out.append(TokenStream(toks, mask))
        return out

    # ------------------------------------------------------------------ batches
    def global_train_batch(self, step: int, micro: int, global_bs: int):
        """Global micro-batch (step, micro) of `global_bs` sequences; a pure function of (seed, step, micro)."""
        g = torch.Generator().manual_seed(hash((self.seed, step, micro)) % (2 ** 62))
        if self.task is not None:
            return self.task.batch(global_bs, g)
        hi = len(self.train) - self.cfg.seq_len - 1
        starts = torch.randint(0, hi + 1, (global_bs,), generator=g).tolist()
        xs, ys = zip(*(self.train.window(s, self.cfg.seq_len) for s in starts))
        return torch.stack(xs), torch.stack(ys)

    def train_batch(self, step: int, micro: int, batch_size: int, rank: int = 0, world: int = 1):
        """The `rank`-th slice of global micro-batch (step, micro); global size batch_size * world."""
        x, y = self.global_train_batch(step, micro, batch_size * world)
        sl = slice(rank * batch_size, (rank + 1) * batch_size)
        return x[sl], y[sl]

    def val_batches(self, n_batches: int, batch_size: int):
        """Deterministic validation batches: evenly spaced windows (or a fixed-seed synthetic set)."""
        if self.task is not None:
            g = torch.Generator().manual_seed(10 ** 9 + 7)
            for _ in range(n_batches):
                yield self.task.batch(batch_size, g)
            return
        L = self.cfg.seq_len
        hi = len(self.val) - L - 1
        total = n_batches * batch_size
        starts = np.linspace(0, hi, num=total).astype(np.int64).tolist() if hi > 0 else [0] * total
        for b in range(n_batches):
            xs, ys = zip(*(self.val.window(s, L) for s in starts[b * batch_size:(b + 1) * batch_size]))
            yield torch.stack(xs), torch.stack(ys)


ENCODE_BATCH = 512  # documents tokenized per encode_batch call


class ShardWriter:
    """Appends tokenized documents (EOS after each) to <name>.bin (+ <name>.mask for chat SFT)."""

    def __init__(self, directory: Path, name: str, dtype, chat: bool):
        self.name, self.dtype, self.chat = name, dtype, chat
        self.tokens = open(directory / f"{name}.bin", "wb")
        self.mask = open(directory / f"{name}.mask", "wb") if chat else None
        self.n = 0

    def add(self, tokenizer, docs: list) -> None:
        if not docs:
            return
        if self.chat:
            from .chat import encode_conversation

            for doc in docs:
                t, m = encode_conversation(tokenizer, doc)
                self._write(np.asarray(t, dtype=self.dtype), np.asarray(m, dtype=np.uint8))
            return
        ids = tokenizer.encode_batch([_doc_text(doc) for doc in docs])
        flat = np.fromiter((t for doc_ids in ids for t in (*doc_ids, tokenizer.eos_id)), dtype=self.dtype,
                           count=sum(len(x) + 1 for x in ids))
        self._write(flat, None)

    def _write(self, tokens: np.ndarray, mask: np.ndarray | None) -> None:
        tokens.tofile(self.tokens)
        if self.mask is not None:
            mask.tofile(self.mask)
        self.n += len(tokens)

    def close(self) -> dict:
        self.tokens.close()
        if self.mask is not None:
            self.mask.close()
        return {"n": self.n, "dtype": np.dtype(self.dtype).name, "mask": self.chat}


def _count(docs) -> int:
    return sum(1 for _ in docs)


def check_local_source(path: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data.source={path!r} (valid: embedded, an existing .txt/.jsonl/.parquet file, hf:<name>, synthetic:<task>)")
    if p.stat().st_size == 0:
        raise ConfigError(f"data.source={path!r} is empty (valid: a file with at least one document)")


def _doc_text(doc) -> str:
    if isinstance(doc, str):
        return doc
    if isinstance(doc, dict) and "messages" in doc:
        return "\n".join(str(m.get("content", "")) for m in doc["messages"])
    return str(doc)
