"""Decode-time caches: the model's `KVCache`, one `LayerCache` per layer, and the histories inside them,
written in place into preallocated storage (no torch.cat per token).

A KV cache grows by one position per decoded token. Concatenating the history with the new entry
copies the whole history every step (quadratic bytes over a generation); writing into a buffer
allocated once for the whole generation copies only the new entry. `generate()` knows the final
length and passes it as the cache's capacity; without a capacity the buffer doubles when full, so
copies stay amortized O(1) per token.
"""

from __future__ import annotations

import torch


class SeqBuffer:
    """A history along one axis (time), appended to in place. `view()` is the filled prefix."""

    __slots__ = ("data", "length", "dim")

    def __init__(self, dim: int = 2):
        self.data: torch.Tensor | None = None
        self.length = 0
        self.dim = dim

    def append(self, x: torch.Tensor, capacity: int = 0) -> torch.Tensor:
        """Write x after the filled prefix; return the filled prefix (a view, history + x)."""
        d, n = self.dim, x.shape[self.dim]
        end = self.length + n
        if self.data is not None:
            same = (
                self.data.dtype == x.dtype
                and self.data.device == x.device
                and all(a == b for i, (a, b) in enumerate(zip(self.data.shape, x.shape)) if i != d)
            )
            if not same:
                raise RuntimeError(
                    f"cache holds {tuple(self.data.shape)} {self.data.dtype}; cannot append "
                    f"{tuple(x.shape)} {x.dtype} (a cache serves one batch of sequences)"
                )
        if self.data is None or self.data.shape[d] < end:
            old = 0 if self.data is None else self.data.shape[d]
            shape = list(x.shape)
            shape[d] = max(end, capacity, 2 * old)
            grown = x.new_empty(shape)
            if self.length:
                grown.narrow(d, 0, self.length).copy_(self.data.narrow(d, 0, self.length))
            self.data = grown
        self.data.narrow(d, self.length, n).copy_(x)
        self.length = end
        return self.data.narrow(d, 0, end)

    def view(self) -> torch.Tensor | None:
        return None if self.data is None else self.data.narrow(self.dim, 0, self.length)

    @property
    def shape(self) -> torch.Size:
        """Shape of the filled history (what a concatenated cache tensor would have)."""
        return self.view().shape


class LayerCache(dict):
    """One layer's decode state: a dict (layers keep what they need under their own keys) that also
    carries the capacity, in positions, that preallocated buffers should reserve."""

    def __init__(self, capacity: int = 0):
        super().__init__()
        self.capacity = capacity

    def child(self, key) -> LayerCache:
        """A nested cache (e.g. one inner attention level) with the same capacity."""
        if key not in self:
            self[key] = LayerCache(self.capacity)
        return self[key]


def append_history(cache: dict, name: str, x: torch.Tensor, dim: int = 2) -> torch.Tensor:
    """cache[name] gets x appended along `dim`; returns the whole history so far (a view)."""
    buf = cache.get(name)
    if buf is None:
        buf = cache[name] = SeqBuffer(dim)
    return buf.append(x, getattr(cache, "capacity", 0))


def child_cache(cache: dict, key) -> dict:
    """Nested cache under `key` that inherits the capacity of `cache` (plain dicts get a LayerCache)."""
    if isinstance(cache, LayerCache):
        return cache.child(key)
    return cache.setdefault(key, LayerCache())


class KVCache:
    """Per-layer dicts that each attention (or recurrent block) fills with whatever it must keep;
    `pos` is the number of tokens already consumed. `capacity` (positions) lets layers preallocate
    their histories once for a whole generation (`SeqBuffer`); 0 = grow by doubling."""

    def __init__(self, n_layers: int, capacity: int = 0):
        self.layers = [LayerCache(capacity) for _ in range(n_layers)]
        self.pos = 0
        self.capacity = capacity

    def layer(self, i: int) -> dict:
        return self.layers[i]
