"""Synthetic reasoning tasks generated on the fly: MQAR, k-hop induction, induction heads.

`make_task(name, options, seq_len)` returns a task with `.vocab_size` and
`.batch(batch_size, generator) -> (x, y)`: x (B, seq_len) token ids, y (B, seq_len) targets that are
already shifted (y[t] is what position t must predict) and IGNORE_INDEX everywhere except scored positions.
Batches depend only on the torch.Generator, so training and evaluation are reproducible.

* mqar (Zoology's multi-query associative recall): `pairs` key-value pairs k1 v1 k2 v2 ... then a
  query region where every key reappears once at a random position (filler token 0 elsewhere);
  the position holding a key must predict its value. Keys come from [1, vocab/2), values from
  [vocab/2, vocab), so a key and a value are never confused.
* khop (k-hop induction, Sanford et al. 2024): from position i jump to the token after the latest
  earlier occurrence of x[i], k times; the last position must predict the token reached. A chain
  a0 -> a1 -> ... -> ak is planted as bigrams (a_j, a_{j+1}) in decreasing positions, filler tokens
  exclude the chain, so the answer exists and is unique; the label is computed by the definition.
  With `all_positions=1` every position whose k hops exist is scored as well (Sanford et al. score
  the whole sequence): 30-60x more training signal per sequence than the one planted query.
* induction (Olsson et al. 2022): a random block repeated; every position of the repeat after the
  first predicts the next token, which only a copy of the earlier block can tell.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ..config import ConfigError
from ..models.lm_loss import IGNORE_INDEX


def _options(task_cls, name: str, options: dict, seq_len: int):
    valid = {f.name for f in fields(task_cls) if f.name != "seq_len"}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ConfigError(
            f"data.synthetic.{unknown[0]}={options[unknown[0]]!r} is not an option of synthetic:{name} "
            f"(valid: {', '.join(sorted(valid))})"
        )
    for key, val in options.items():
        if isinstance(val, bool) or not isinstance(val, int):
            raise ConfigError(f"data.synthetic.{key}={val!r} (valid: an integer)")
    task = task_cls(seq_len=seq_len, **options)
    task.check()
    return task


def _need(ok: bool, field: str, value, valid: str) -> None:
    if not ok:
        raise ConfigError(f"data.synthetic.{field}={value!r} (valid: {valid})")


@dataclass
class MQAR:
    seq_len: int
    vocab: int = 64  # token ids 0..vocab-1: 0 filler, keys [1, vocab/2), values [vocab/2, vocab)
    pairs: int = 8  # key-value pairs in the context; each key is queried once

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def check(self) -> None:
        _need(self.vocab >= 4, "vocab", self.vocab, "an integer >= 4")
        _need(
            1 <= self.pairs <= self.vocab // 2 - 1,
            "pairs",
            self.pairs,
            f"1..{self.vocab // 2 - 1} (distinct keys below vocab/2)",
        )
        _need(
            self.seq_len >= 3 * self.pairs,
            "pairs",
            self.pairs,
            f"at most data.seq_len/3 = {self.seq_len // 3} (context 2*pairs plus one slot per query)",
        )

    def batch(self, batch_size: int, generator: torch.Generator):
        B, T, P, half = batch_size, self.seq_len, self.pairs, self.vocab // 2
        keys = torch.argsort(torch.rand(B, half - 1, generator=generator), dim=1)[:, :P] + 1  # distinct keys
        values = torch.randint(half, self.vocab, (B, P), generator=generator)
        x = torch.zeros(B, T, dtype=torch.long)
        y = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
        x[:, 0 : 2 * P : 2], x[:, 1 : 2 * P : 2] = keys, values
        region = T - 2 * P
        slots = torch.argsort(torch.rand(B, region, generator=generator), dim=1)[:, :P] + 2 * P  # query positions
        order = torch.argsort(torch.rand(B, P, generator=generator), dim=1)  # which key goes to which slot
        rows = torch.arange(B)[:, None]
        x[rows, slots] = keys.gather(1, order)
        y[rows, slots] = values.gather(1, order)
        return x, y


def khop_answer(seq: list[int], i: int, k: int) -> int | None:
    """The definition, one position: k times jump to the token after the latest earlier occurrence."""
    for _ in range(k):
        prev = max((j for j in range(i) if seq[j] == seq[i]), default=None)
        if prev is None:
            return None
        i = prev + 1
    return seq[i]


@dataclass
class KHop:
    seq_len: int
    vocab: int = 32  # token ids 0..vocab-1
    k: int = 2  # induction hops from the query to the answer
    all_positions: int = 0  # 1 = score every position whose k-hop answer exists, 0 = the last position only

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def check(self) -> None:
        _need(self.k >= 1, "k", self.k, "an integer >= 1")
        _need(
            self.seq_len >= 2 * self.k + 2,
            "k",
            self.k,
            f"at most (data.seq_len-2)/2 = {(self.seq_len - 2) // 2} (k bigrams and the query must fit)",
        )
        _need(
            self.vocab >= self.k + 3,
            "vocab",
            self.vocab,
            f"an integer >= k+3 = {self.k + 3} (chain of k+1 tokens plus filler)",
        )
        _need(self.all_positions in (0, 1), "all_positions", self.all_positions, "0 or 1")

    def batch(self, batch_size: int, generator: torch.Generator):
        B, T, k = batch_size, self.seq_len, self.k
        x = torch.empty(B, T, dtype=torch.long)
        y = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
        for b in range(B):
            perm = torch.randperm(self.vocab, generator=generator)
            chain, filler = perm[: k + 1], perm[k + 1 :]
            x[b] = filler[torch.randint(0, len(filler), (T,), generator=generator)]
            # k non-overlapping bigram starts in [0, T-3]: choose k of the T-1-k "gaps" positions
            starts = torch.sort(torch.randperm(T - 1 - k, generator=generator)[:k]).values + torch.arange(k)
            for j in range(k):  # hop j+1 reads bigram (a_j, a_{j+1}); later hops sit earlier
                s = int(starts[k - 1 - j])
                x[b, s], x[b, s + 1] = chain[j], chain[j + 1]
            x[b, T - 1] = chain[0]
            y[b, T - 1] = chain[k]
        if self.all_positions:
            y = khop_labels(x, k)
        return x, y


def khop_labels(x: torch.Tensor, k: int) -> torch.Tensor:
    """k-hop answer at every position of x (B, T), IGNORE_INDEX where a hop finds no earlier occurrence.
    The same definition as khop_answer, vectorized: prev[i] = latest j < i with x[j] == x[i]."""
    B, T = x.shape
    idx = torch.arange(T)
    earlier_same = (x[:, :, None] == x[:, None, :]) & (idx[None, :] < idx[:, None])  # [b, i, j]: j < i, same token
    prev = torch.where(earlier_same, idx, torch.full_like(idx, -1)).amax(dim=2)  # (B, T), -1 = none
    pos = idx.expand(B, T).clone()
    valid = torch.ones(B, T, dtype=torch.bool)
    for _ in range(k):
        p = prev.gather(1, pos)
        valid &= p >= 0
        pos = (p + 1).clamp_min(0)  # where invalid, any in-range index: the label is masked anyway
    return torch.where(valid, x.gather(1, pos), torch.full_like(x, IGNORE_INDEX))


@dataclass
class Induction:
    seq_len: int
    vocab: int = 32  # token ids 0..vocab-1

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def check(self) -> None:
        _need(self.vocab >= 2, "vocab", self.vocab, "an integer >= 2")
        _need(self.seq_len >= 4, "seq_len", self.seq_len, "data.seq_len >= 4")

    def batch(self, batch_size: int, generator: torch.Generator):
        B, T = batch_size, self.seq_len
        half = T // 2
        block = torch.randint(0, self.vocab, (B, half), generator=generator)
        x = torch.cat([block, block, block], dim=1)[:, :T]
        y = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
        y[:, half : T - 1] = x[:, half + 1 : T]  # inside the repeat the next token is the copy's next token
        return x, y


TASKS = {"mqar": MQAR, "khop": KHop, "induction": Induction}


def make_task(name: str, options: dict | None, seq_len: int):
    """Build a task from `synthetic:<name>` and the data.synthetic options dict."""
    if name not in TASKS:
        raise ConfigError(f"data.source='synthetic:{name}' (valid: synthetic:{'|synthetic:'.join(sorted(TASKS))})")
    if not isinstance(options, dict):
        raise ConfigError(f"data.synthetic={options!r} (valid: a mapping of task options)")
    return _options(TASKS[name], name, options, seq_len)
