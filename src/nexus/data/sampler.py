"""Which training windows a run reads, in what order: every token once per epoch.

The training tokens are cut into n = (N - 1) // seq_len windows of seq_len + 1 tokens (neighbours share
one token: the last target of one is the first input of the next). Each epoch visits all n windows in
its own seeded random order, shifted by a seeded offset within the slack N - 1 - n * seq_len, so the
run never repeats a window before it has seen every other one. Sample number i (counted over the whole
run) is window perm_e[i mod n] of epoch e = i // n: a pure function of (seed, i), so the position is one
integer, the slices of a global batch that different ranks take are disjoint, and a resumed run that
starts at the stored sample number sees exactly the windows the uninterrupted run would have.
"""

from __future__ import annotations

import numpy as np


class WindowSampler:
    def __init__(self, n_tokens: int, seq_len: int, seed: int):
        self.seq_len, self.seed = seq_len, seed
        self.n_windows = max((n_tokens - 1) // seq_len, 1)
        self.slack = max(n_tokens - 1 - self.n_windows * seq_len, 0)
        self._cached: tuple[int, np.ndarray, int] | None = None

    def _epoch(self, e: int) -> tuple[np.ndarray, int]:
        if self._cached is None or self._cached[0] != e:
            rng = np.random.default_rng([self.seed, e, 0x6E6578])
            perm = rng.permutation(self.n_windows).astype(np.uint32 if self.n_windows < 2**32 else np.int64)
            self._cached = (e, perm, int(rng.integers(0, self.slack + 1)))
        return self._cached[1], self._cached[2]

    def starts(self, first: int, count: int) -> np.ndarray:
        """Token offsets of samples first .. first + count - 1."""
        idx = np.arange(first, first + count, dtype=np.int64)
        epochs = idx // self.n_windows
        out = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):
            perm, off = self._epoch(int(e))
            sel = epochs == e
            out[sel] = perm[idx[sel] % self.n_windows].astype(np.int64) * self.seq_len + off
        return out
