"""The decode-cache containers by their definitions: a SeqBuffer's filled prefix is the concatenation of
what was appended (along the time axis of (B, heads, T, hd) by default), its storage is exactly the
first chunk and then doubles, and nested caches of plain dicts are created once and kept."""

import torch

from nexus.models.cache import LayerCache, SeqBuffer, append_history, child_cache


def test_default_axis_is_time_of_a_head_major_history():
    buf = SeqBuffer()
    assert buf.view() is None  # nothing appended yet
    a, b = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 1, 4)
    buf.append(a)
    buf.append(b)
    assert torch.equal(buf.view(), torch.cat([a, b], dim=2))
    assert buf.shape == (1, 2, 4, 4)


def test_storage_is_the_first_chunk_then_doubles_when_full():
    buf = SeqBuffer(dim=1)
    sizes = []
    for t in range(9):
        buf.append(torch.full((1, 1, 2), float(t)))
        sizes.append(buf.data.shape[1])
    assert sizes == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    assert torch.equal(buf.view()[0, :, 0], torch.arange(9.0))


def test_history_in_a_plain_dict_grows_without_a_capacity():
    cache: dict = {}
    x = torch.randn(1, 2, 3, 4)
    assert torch.equal(append_history(cache, "k", x), x)
    assert cache["k"].data.shape[2] == 3  # no capacity: exactly what was appended


def test_child_cache_of_a_plain_dict_is_created_once_and_kept():
    cache: dict = {}
    child = child_cache(cache, "ho:1")
    assert isinstance(child, LayerCache) and cache["ho:1"] is child and child_cache(cache, "ho:1") is child
    outer = LayerCache(capacity=7)
    assert child_cache(outer, "x").capacity == 7 and child_cache(outer, "x") is outer["x"]
