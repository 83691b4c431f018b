"""The document-level train/validation split, decided while the documents stream by.

Documents are taken in blocks of SPLIT_BLOCK in stream order; in each block a seeded permutation holds
out round(len(block) * val_fraction) documents (at least one in the first block). The first block's
seed is `split_seed` itself, so a corpus of at most SPLIT_BLOCK documents splits exactly as one seeded
permutation of all of them; later blocks use (split_seed, block index). No count pass is needed, so a
hub stream is read once, and memory holds one block of documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

SPLIT_BLOCK = 1000  # documents per split block: a bound on the documents held while the split is decided


def block_val_positions(n: int, block: int, val_fraction: float, split_seed: int) -> set[int]:
    """Positions (0..n-1) held out in block number `block` of n documents."""
    if n == 0:
        return set()
    n_val = int(round(n * val_fraction))
    if block == 0:
        n_val = max(1, n_val)
    rng = np.random.default_rng(split_seed if block == 0 else [split_seed, block])
    return set(rng.permutation(n)[:n_val].tolist())


def split_documents(
    docs: Iterable, val_fraction: float, split_seed: int, block_size: int | None = None
) -> Iterator[tuple[object, bool | None]]:
    """(document, is_validation) in stream order. A corpus of one document yields it once with
    is_validation None: the caller holds out its tail instead."""
    size = block_size or SPLIT_BLOCK
    it = iter(docs)
    block_no = 0
    while True:
        block = []
        for doc in it:
            block.append(doc)
            if len(block) >= size:
                break
        if not block:
            return
        if block_no == 0 and len(block) == 1:
            rest = next(it, None)
            if rest is None:
                yield block[0], None
                return
            block.append(rest)
            for doc in it:  # refill the first block to its full size
                block.append(doc)
                if len(block) >= size:
                    break
        val = block_val_positions(len(block), block_no, val_fraction, split_seed)
        for i, doc in enumerate(block):
            yield doc, i in val
        block_no += 1
