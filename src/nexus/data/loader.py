"""Token streams for training and validation, and the batches drawn from them.

A text source is tokenized once into a prepared directory in the cache (prepare.py: one streaming pass,
document-level deterministic split, EOS after every document) and memory-mapped; a prepared directory
(`nexus data prepare`) or a bare `.bin` token file is mapped directly. Training batches are windows
chosen by the sampler (sampler.py): every token once per epoch, a pure function of (seed, sample
number). The position is the sample number at a step, part of the trainer's checkpoint (`state_dict`).
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
from ..models.lm_loss import IGNORE_INDEX
from .prepare import Progress, doc_text, prepare
from .sampler import WindowSampler
from .shards import (
    check_tokenizer,
    joined,
    open_bin,
    open_prepared,
    read_manifest,
    split_tail,
    tokenizer_identity,
    windows,
)
from .sources import resolve_source
from .tokenizer import BPETokenizer, ByteTokenizer
from .tokenizer_files import load_tokenizer


def check_cache_dir(root: Path, flag: str) -> None:
    """One line when the cache directory is a file, lies below a file, or cannot be written."""
    from ..outdir.guard import check_usable

    check_usable(root, flag)


def default_cache_dir() -> Path:
    return Path(os.environ.get("NEXUS_CACHE", Path.home() / ".cache" / "nexus"))


def default_num_proc() -> int:
    """Worker processes for tokenizing: the cores this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


@dataclass
class TokenStream:
    tokens: object  # np.ndarray (memmap) or shards.ShardedTokens: token ids, EOS-separated documents
    loss_mask: object | None = None  # 1 where the token is a training target (SFT); None = all

    def __len__(self) -> int:
        return len(self.tokens)

    def window(self, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.windows(np.asarray([start]), seq_len)
        return x[0], y[0]

    def windows(self, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of the windows at `starts`: [B, seq_len] each (targets shifted by one)."""
        chunk = torch.from_numpy(windows(self.tokens, starts, seq_len + 1).astype(np.int64))
        x, y = chunk[:, :-1], chunk[:, 1:].clone()
        if self.loss_mask is not None:
            m = torch.from_numpy(windows(self.loss_mask, starts + 1, seq_len).astype(bool))
            y[~m] = IGNORE_INDEX
        return x, y


def _say(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:  # one copy per run under torchrun, not one per rank
        print(f"nexus data: {msg}", file=sys.stderr, flush=True)


class DataModule:
    """Everything the trainer needs from data: tokenizer, train/val streams, batch sampling, position."""

    def __init__(self, cfg: DataConfig, seed: int = 0, tokenizer=None, quiet: bool = False):
        self.cfg, self.seed, self.quiet = cfg, seed, quiet
        self.task = None
        self.anchor = (0, 0)  # (step, samples drawn before it): the position the sampler continues from
        if cfg.source.startswith("synthetic:"):
            from .synthetic import make_task

            self.task = make_task(cfg.source.split(":", 1)[1], cfg.synthetic, cfg.seq_len)
            self.tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
            self.vocab_size = self.task.vocab_size
            return
        self.source = resolve_source(cfg.source)
        self.source.check_fraction_unused(cfg.val_fraction, "data.val_fraction")
        if self.source.tokenized and cfg.tokenizer == "bpe":
            raise ConfigError(
                f"data.tokenizer='bpe' trains a tokenizer on text, but data.source={cfg.source!r} holds "
                "token ids (valid: the tokenizer the ids were made with: --data.tokenizer PATH)"
            )
        self.tokenizer = tokenizer if tokenizer is not None else self._make_tokenizer()
        self.vocab_size = self.tokenizer.vocab_size
        if self.source.kind == "bin":
            self.source.check_files()
            self.train, self.val = self._open_bin()
        else:
            d = self.source.files[0] if self.source.kind == "prepared" else self._build_cache()
            m = read_manifest(d, str(d))
            # a tokenizer handed in is a model's (eval, resume, init-from)
            check_tokenizer(m, self.tokenizer, cfg.source, model_tokenizer=tokenizer is not None)
            streams = open_prepared(d, m, verify=self.source.kind == "prepared")  # the cache: prepare just checked it
            self.train, self.val = (TokenStream(*streams[s]) for s in ("train", "val"))
        for name, stream in (("train", self.train), ("validation", self.val)):
            if len(stream) < cfg.seq_len + 2:
                raise ConfigError(
                    f"data.source={cfg.source!r} gives only {len(stream)} {name} tokens "
                    f"(valid: at least data.seq_len+2 = {cfg.seq_len + 2}; add text or lower data.seq_len)"
                )
        self.sampler = WindowSampler(len(self.train), cfg.seq_len, seed)

    # ------------------------------------------------------------------ building
    def _make_tokenizer(self):
        cfg = self.cfg
        if cfg.tokenizer == "byte" and cfg.chat:  # chat template needs <|user|>/<|assistant|>/<|end|>
            from .chat import ChatByteTokenizer

            return ChatByteTokenizer()
        if cfg.tokenizer == "byte":
            return ByteTokenizer()
        if cfg.tokenizer == "bpe":  # trained on the training documents, streamed
            if not self.quiet:  # a pass over all the text, silent inside `tokenizers`: say what the wait is
                _say(
                    f"training a BPE tokenizer (vocabulary {cfg.bpe_vocab_size:,}) on the training documents of "
                    f"{cfg.source} (one pass over the text)"
                )
            docs = self.source.split_documents(cfg)
            return BPETokenizer.train((doc_text(d) for d, is_val in docs if not is_val), cfg.bpe_vocab_size)
        return load_tokenizer(cfg.tokenizer)

    def _cache_key(self) -> str:
        from .prepare import SHARD_BYTES, fingerprint

        fp = fingerprint(self.source, self.cfg, self.tokenizer, SHARD_BYTES)
        return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:20]

    def _build_cache(self) -> Path:
        """The source tokenized into a prepared directory under the cache (built once, resumed if cut off)."""
        from .prepare import SHARD_BYTES

        root = Path(self.cfg.cache_dir) if self.cfg.cache_dir else default_cache_dir()
        check_cache_dir(
            root,
            "data.cache_dir"
            if self.cfg.cache_dir
            else "NEXUS_CACHE"
            if os.environ.get("NEXUS_CACHE")
            else "the cache directory",
        )
        d = root / self._cache_key()
        if not (d / "manifest.json").is_file():  # a new cache: every bad file named at once, before any work
            self.source.check_files()
        nproc = self.cfg.num_proc or default_num_proc()
        prepare(
            self.source,
            self.cfg,
            self.tokenizer,
            d,
            num_proc=nproc,
            shard_bytes=SHARD_BYTES,
            progress=not self.quiet,
            label="data",
            quiet_below_s=Progress.EVERY_S,
        )
        return d

    def _open_bin(self):
        files, cfg = self.source.files, self.cfg
        train = [open_bin(f, cfg.dtype, self.vocab_size, cfg.source) for f in files]
        if self.source.val_files:  # files named as splits (nanoGPT's train.bin + val.bin)
            val = [open_bin(f, cfg.dtype, self.vocab_size, str(f)) for f in self.source.val_files]
            self.val_note = self.source.split_note()
        else:
            n_val = int(sum(len(a) for a in train) * cfg.val_fraction)
            train, val = split_tail(train, n_val)
            self.val_note = (
                f"validation: the last {cfg.val_fraction:.0%} of the tokens ({n_val:,}; a bare .bin has "
                "no document boundaries, so the split is by position)"
            )
        return TokenStream(joined(train)), TokenStream(joined(val))

    def summary(self) -> str:
        """The run's data summary: one line, with any cap the user set (the trainer prints it)."""
        cfg = self.cfg
        if self.task is not None:
            return f"{cfg.source} (synthetic task, vocab {self.vocab_size:,})"
        cap = f" | capped at data.max_documents={cfg.max_documents:,}" if cfg.max_documents else ""
        kind = self.source.kind
        note = self.val_note if kind == "bin" else self.source.split_note() if kind == "files" else ""
        extra = f" | {note}" if note else ""
        if kind == "stdlib":
            from .stdlib_corpus import describe

            extra = f" | {describe()}"
        return (
            f"{cfg.source} ({kind}) | tokenizer {tokenizer_identity(self.tokenizer)['kind']} (vocab "
            f"{self.vocab_size:,}) | train {len(self.train):,} tokens | validation {len(self.val):,} tokens{cap}{extra}"
        )

    def overlap_note(self) -> str | None:
        """One line when sampled validation windows occur verbatim in the training tokens (overlap.py says
        what is detected); None when none do, or for a synthetic task."""
        if self.task is not None:
            return None
        from .overlap import find_overlap

        found = find_overlap(self.train.tokens, self.val.tokens)
        return found.note() if found is not None else None

    # ------------------------------------------------------------------ position
    def sample_index(self, step: int, micro: int, global_bs: int, accum: int) -> int:
        a_step, a_samples = self.anchor
        return a_samples + ((step - a_step) * accum + micro) * global_bs

    def state_dict(self, step: int, global_bs: int, accum: int) -> dict:
        """The loader's position at `step`: samples drawn before it (and what they were drawn from)."""
        return {
            "step": int(step),
            "samples": int(self.sample_index(step, 0, global_bs, accum)),
            "train_tokens": int(len(self.train)) if self.task is None else 0,
        }

    def load_state_dict(self, st: dict) -> str | None:
        """Continue from a stored position; returns a note when the training tokens changed meanwhile."""
        self.anchor = (int(st["step"]), int(st["samples"]))
        if self.task is None and st.get("train_tokens") and st["train_tokens"] != len(self.train):
            return (
                f"data: the checkpoint's position was in a corpus of {st['train_tokens']:,} training tokens, "
                f"this one has {len(self.train):,}; reading continues at sample {st['samples']:,}"
            )
        return None

    def epochs(self, tokens_seen: int) -> float:
        """Training tokens seen / training tokens: above 1 the corpus has repeated."""
        return tokens_seen / len(self.train) if self.task is None else 0.0  # never empty: __init__ refuses < seq_len+2

    # ------------------------------------------------------------------ batches
    def global_train_batch(self, step: int, micro: int, global_bs: int, accum: int | None = None):
        """Global micro-batch (step, micro) of `global_bs` sequences; a pure function of (seed, position).
        Callers that do not pass `accum` get independent random windows per (step, micro) instead."""
        if self.task is not None or accum is None:
            g = torch.Generator().manual_seed(hash((self.seed, step, micro)) % (2**62))
            if self.task is not None:
                return self.task.batch(global_bs, g)
            hi = len(self.train) - self.cfg.seq_len - 1
            return self.train.windows(torch.randint(0, hi + 1, (global_bs,), generator=g).numpy(), self.cfg.seq_len)
        first = self.sample_index(step, micro, global_bs, accum)
        return self.train.windows(self.sampler.starts(first, global_bs), self.cfg.seq_len)

    def train_batch(
        self, step: int, micro: int, batch_size: int, rank: int = 0, world: int = 1, accum: int | None = None
    ):
        """The `rank`-th slice of global micro-batch (step, micro); global size batch_size * world."""
        x, y = self.global_train_batch(step, micro, batch_size * world, accum)
        sl = slice(rank * batch_size, (rank + 1) * batch_size)
        return x[sl], y[sl]

    def val_batches(self, n_batches: int, batch_size: int):
        """Deterministic validation batches: evenly spaced windows (or a fixed-seed synthetic set)."""
        if self.task is not None:
            g = torch.Generator().manual_seed(10**9 + 7)
            for _ in range(n_batches):
                yield self.task.batch(batch_size, g)
            return
        L = self.cfg.seq_len
        hi = len(self.val) - L - 1  # >= 1: __init__ refuses a validation stream below seq_len+2 tokens
        starts = np.linspace(0, hi, num=n_batches * batch_size).astype(np.int64)
        for b in range(n_batches):
            yield self.val.windows(starts[b * batch_size : (b + 1) * batch_size], L)
