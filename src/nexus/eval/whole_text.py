"""Score whole documents: loss, perplexity and bits per byte, comparable across tokenizers (bare token
files, which hold no text: loss and perplexity only, bits per byte None).

Conventions follow lm-evaluation-harness's `loglikelihood_rolling` (wikitext's word_perplexity,
byte_perplexity and bits_per_byte): every document is scored on its own, its first token predicted
from one prefix token (nexus's document separator, EOS, which is what precedes a document in
training), every token of the document scored exactly once (its closing EOS is not), and

    loss            = sum of token NLL (nats) / tokens
    perplexity      = exp(loss)
    bits_per_byte   = sum of token NLL / ln 2 / UTF-8 bytes of the documents
    byte_perplexity = exp(sum NLL / bytes),   word_perplexity = exp(sum NLL / words (whitespace-split))

Windows: with stride == window ("disjoint", the default and lm-eval's rolling windows) each window
predicts `window` new tokens conditioned on the token before them; with stride < window ("sliding") each
window after the first predicts `stride` new tokens with window - stride tokens of extra context
(better estimates, window / stride times the compute).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

IGNORE = -100


def document_windows(ids: list[int], prefix_id: int, window: int, stride: int) -> Iterator[tuple[list[int], list[int]]]:
    """(inputs, labels) of at most `window` tokens covering every token of `ids` once as a target;
    labels are IGNORE where a position is context only."""
    seq = [prefix_id] + list(ids)
    n = len(seq)
    b = 1
    while b < n:
        a, b = b, min(n, (1 + window) if b == 1 else b + stride)
        lo = max(0, b - 1 - window)
        x = seq[lo : b - 1]
        y = [t if lo + 1 + i >= a else IGNORE for i, t in enumerate(seq[lo + 1 : b])]
        yield x, y


def score(
    model,
    docs: Iterable[tuple[list[int], int, int]],
    prefix_id: int,
    window: int,
    stride: int,
    batch_size: int,
    device=None,
) -> dict:
    """docs: (token ids, UTF-8 bytes, words) per document. Returns the totals and the metrics above."""
    device = device or next(model.parameters()).device
    nll = 0.0
    tokens = n_bytes = words = n_docs = 0
    batch: list[tuple[list[int], list[int]]] = []

    def flush():
        nonlocal nll, tokens
        L = max(len(x) for x, _ in batch)
        x = torch.full((len(batch), L), prefix_id, dtype=torch.long)
        y = torch.full((len(batch), L), IGNORE, dtype=torch.long)
        for i, (xi, yi) in enumerate(batch):
            x[i, : len(xi)] = torch.tensor(xi)
            y[i, : len(yi)] = torch.tensor(yi)
        with torch.no_grad():
            logits = model(x.to(device)).logits.float()
        y = y.to(device)
        nll += float(
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE, reduction="sum")
        )
        tokens += int((y != IGNORE).sum())
        batch.clear()

    model.eval()
    for ids, nb, nw in docs:
        n_docs += 1
        n_bytes += nb
        words += nw
        for w in document_windows(ids, prefix_id, window, stride):
            batch.append(w)
            if len(batch) >= batch_size:
                flush()
    if batch:
        flush()
    loss = nll / max(tokens, 1)
    return {
        "loss": loss,
        "perplexity": math.exp(min(loss, 50)),
        "bits_per_byte": nll / math.log(2) / max(n_bytes, 1),
        "byte_perplexity": math.exp(min(nll / max(n_bytes, 1), 50)),
        "word_perplexity": math.exp(min(nll / max(words, 1), 50)),
        "nll_nats": nll,
        "tokens": tokens,
        "bytes": n_bytes,
        "words": words,
        "documents": n_docs,
        "windows": "disjoint" if stride >= window else "sliding",
        "window": window,
        "stride": min(stride, window),
    }


def count_words(text: str) -> int:
    """lm-eval's word count for word_perplexity: whitespace-separated pieces."""
    return len(re.split(r"\s+", text))


def text_documents(texts: Iterable[str], tok, batch: int = 64) -> Iterator[tuple[list[int], int, int]]:
    """(ids, bytes, words) of each text, encoded in batches."""
    buf: list[str] = []
    for t in texts:
        buf.append(t)
        if len(buf) >= batch:
            yield from _encoded(buf, tok)
            buf = []
    if buf:
        yield from _encoded(buf, tok)


def _encoded(texts: list[str], tok):
    for t, ids in zip(texts, tok.encode_batch(texts)):
        yield list(ids), len(t.encode("utf-8")), count_words(t)


def token_documents(tokens, eos_id: int, chunk: int = 1 << 22) -> Iterator[list[int]]:
    """Documents of an EOS-separated token stream (a prepared split), read in chunks (never whole)."""
    carry: list[int] = []
    for i in range(0, len(tokens), chunk):
        part = np.asarray(tokens[i : i + chunk]).astype(np.int64)
        ends = np.flatnonzero(part == eos_id)
        start = 0
        for e in ends.tolist():
            yield carry + part[start:e].tolist()
            carry, start = [], e + 1
        carry += part[start:].tolist()
    if carry:
        yield carry


def evaluate_source(model, cfg, tok, source: str, split: str, window: int, stride: int, batch_size: int) -> dict:
    """Score every document of `source` (split "all"), or of its document-level validation split ("val",
    the same rule and seed as training: data.val_fraction, data.split_seed). A prepared directory is
    scored from its token shards, with the byte counts its manifest recorded."""
    import copy

    from ..config import ConfigError
    from ..data.prepare import doc_text
    from ..data.shards import check_tokenizer, open_prepared, read_manifest
    from ..data.sources import resolve_source

    src = resolve_source(source, held_out_alone=True)  # `--data val.bin` alone: score it
    if src.kind == "synthetic":
        raise ConfigError(f"--data={source!r} is a synthetic task (valid: text, or `nexus eval --task`)")
    if src.kind == "bin":
        res = _score_token_files(model, cfg, tok, src, source, split, window, stride, batch_size)
    elif src.kind == "prepared":
        d = src.files[0]
        m = read_manifest(d, source)
        check_tokenizer(m, tok, source, model_tokenizer=True)
        streams = open_prepared(d, m)
        splits = ("val",) if split == "val" else ("train", "val")
        docs = ((ids, 0, 0) for s in splits for ids in token_documents(streams[s][0], tok.eos_id))
        res = score(model, docs, tok.eos_id, window, stride, batch_size)
        n_bytes = sum(m["bytes"][s] for s in splits)
        res.update(
            bytes=n_bytes,
            bits_per_byte=res["nll_nats"] / math.log(2) / max(n_bytes, 1),
            byte_perplexity=math.exp(min(res["nll_nats"] / max(n_bytes, 1), 50)),
            word_perplexity=None,
            words=None,
        )
    else:
        dcfg = copy.deepcopy(cfg.data)
        dcfg.source = source
        if split == "val":
            texts = _val_texts(src.split_documents(dcfg), dcfg, doc_text)
        else:
            texts = (doc_text(d) for d in src.documents(dcfg))
        res = score(model, text_documents(texts, tok), tok.eos_id, window, stride, batch_size)
    # what the numbers are: loss in nats per token always; bits per byte only where the bytes were counted
    res.update(source=source, split=split, loss_unit="nats per token")
    return res


def _score_token_files(
    model, cfg, tok, src, source: str, split: str, window: int, stride: int, batch_size: int
) -> dict:
    """Bare token files (nanoGPT's train.bin / val.bin): loss and perplexity in nats per token only. The files
    hold ids, not text, so their byte and word counts are unknown: bits per byte and word perplexity are None,
    never a guess. The validation split is the one training reads (files named as splits, else the last
    data.val_fraction of the tokens); documents are the EOS-separated pieces, each scored as a prepared
    directory's are (a file without EOS is one document)."""
    from ..data.shards import open_bin, split_tail

    open_ = [open_bin(f, cfg.data.dtype, tok.vocab_size, str(f)) for f in src.files]
    if src.val_files:
        val = [open_bin(f, cfg.data.dtype, tok.vocab_size, str(f)) for f in src.val_files]
        train = open_
    else:
        train, val = split_tail(open_, int(sum(len(a) for a in open_) * cfg.data.val_fraction))
    arrays = val if split == "val" else train + val
    docs = ((ids, 0, 0) for a in arrays for ids in token_documents(a, tok.eos_id))
    res = score(model, docs, tok.eos_id, window, stride, batch_size)
    res.update(
        bytes=None,
        bits_per_byte=None,
        byte_perplexity=None,
        word_perplexity=None,
        words=None,
        files=len(src.files) + len(src.val_files),
    )
    return res


def _val_texts(split_docs, dcfg, doc_text):
    for d, is_val in split_docs:
        if is_val is None:  # one document: its tail is the validation text, as in training
            text = doc_text(d)
            yield text[int(len(text) * (1 - dcfg.val_fraction)) :]
        elif is_val:
            yield doc_text(d)
