"""Does the validation split repeat training text? A cheap check every run prints when it finds some.

What it detects: a sample of validation windows of WINDOW tokens (SAMPLES windows evenly spaced over the
validation tokens) that occur verbatim, at any offset, in the training tokens. A validation file read
into training, a document present in both splits, or a corpus copied twice are found; a paraphrase, or
shared text shorter than WINDOW tokens (boilerplate lines), is not. Training tokens beyond MAX_SCAN are
read as evenly spaced chunks of them, and the line says how much was read.

Windows are compared by a 64-bit polynomial hash, h = sum_j t[i+j] * B^j mod 2^64, computed for every
training position at once from prefix sums (numpy, no Python loop per token): stdlib's 30.5M byte tokens
take 1.2-1.6 s on the loaded 2-core development machine (AVX512; benchmarks/speed/overlap_check.py). \
Hand-written because no library we depend
on offers a vectorized rolling hash over a memmap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINDOW = 64  # tokens: longer than shared boilerplate lines, short enough to catch any repeated document
SAMPLES = 512  # validation windows checked
MAX_SCAN = 1 << 25  # training tokens hashed at most (33.5M, ~4 s loaded); larger corpora are read in spaced chunks
CHUNK = 1 << 20  # training tokens hashed at a time: the buffers are ~6 arrays of 8 MB

_B = np.uint64(0x9E3779B97F4A7C15)  # odd, so it has an inverse mod 2^64
_B_INV = np.uint64(pow(int(_B), -1, 1 << 64))


@dataclass
class Overlap:
    found: int  # sampled validation windows that occur in the training tokens
    sampled: int
    window: int
    scanned: int  # training tokens read
    train_tokens: int

    def note(self) -> str | None:
        """One line when the splits overlap; None when no sampled window was found."""
        if not self.found:
            return None
        read = (
            "all"
            if self.scanned >= self.train_tokens
            else f"{self.scanned:,} of {self.train_tokens:,} (evenly spaced chunks)"
        )
        return (
            f"warning: validation overlaps training: {self.found} of {self.sampled} sampled {self.window}-token "
            f"validation windows occur verbatim in the training tokens ({read} read); validation loss on "
            "repeated text is optimistic"
        )


def _powers(n: int, base: np.uint64) -> np.ndarray:
    p = np.full(n, base, dtype=np.uint64)
    p[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(p, dtype=np.uint64)  # wraps mod 2^64, as the hash wants


class WindowHasher:
    """h[i] = sum_j tokens[i+j] * B^j mod 2^64 for every i in 0..len-k, for token arrays of up to n_max tokens.
    The buffers are allocated once and reused: fresh 32 MB arrays per chunk cost more (page faults) than the
    arithmetic."""

    def __init__(self, n_max: int, k: int):
        self.k = k
        self.pw, self.ipw = _powers(n_max, _B), _powers(n_max, _B_INV)  # B^i and B^-i
        self.t = np.empty(n_max, dtype=np.uint64)
        self.s = np.zeros(n_max + 1, dtype=np.uint64)  # prefix sums of t[i] * B^i
        self.h = np.empty(n_max, dtype=np.uint64)

    def __call__(self, tokens) -> np.ndarray:
        n, k = len(tokens), self.k
        t, h = self.t[:n], self.h[: n - k + 1]
        t[...] = np.asarray(tokens)
        with np.errstate(over="ignore"):
            np.multiply(t, self.pw[:n], out=t)
            np.cumsum(t, dtype=np.uint64, out=self.s[1 : n + 1])
            np.subtract(self.s[k : n + 1], self.s[: n - k + 1], out=h)  # = h[i] * B^i
            np.multiply(h, self.ipw[: n - k + 1], out=h)
        return h


_TABLE_BITS = 20  # a 1M-entry table of the wanted hashes' low bits: most windows are ruled out by one lookup


def find_overlap(
    train, val, window: int = WINDOW, samples: int = SAMPLES, max_scan: int = MAX_SCAN, chunk: int = CHUNK
) -> Overlap | None:
    """Sampled validation windows found in the training tokens (token arrays or ShardedTokens). None when
    either split is shorter than one window."""
    n_train, n_val = len(train), len(val)
    if n_train < window or n_val < window:
        return None
    chunk = max(chunk, window)
    hasher = WindowHasher(min(chunk, n_train) + window, window)
    starts = np.unique(np.linspace(0, n_val - window, num=min(samples, n_val - window + 1)).astype(np.int64))
    want = np.array([hasher(val[int(s) : int(s) + window])[0] for s in starts])
    order = np.sort(want)
    mask = np.uint64((1 << _TABLE_BITS) - 1)
    table = np.zeros(1 << _TABLE_BITS, dtype=bool)
    table[(order & mask).astype(np.int64)] = True
    hit = np.zeros(len(order), dtype=bool)
    n_chunks = -(-n_train // chunk)
    take = min(n_chunks, max(1, max_scan // chunk))
    scanned = 0
    for c in np.unique(np.linspace(0, n_chunks - 1, num=take).astype(np.int64)):
        a = int(c) * chunk
        part = train[a : min(a + chunk + window - 1, n_train)]  # windows that start in this chunk
        scanned += min(chunk, n_train - a)
        if len(part) < window:
            continue
        h = hasher(part)
        cand = h[table[(h & mask).astype(np.int64)]]
        pos = np.clip(np.searchsorted(order, cand), 0, len(order) - 1)
        hit[pos[order[pos] == cand]] = True
    found = int(np.isin(want, order[hit]).sum())
    return Overlap(found, len(want), window, scanned, n_train)
