"""Resizing a language model's vocabulary (`nexus train --init-from CKPT --resize-vocab`): a new
tokenizer with more tokens (e.g. byte pretraining -> byte chat SFT adds 3 special tokens) or fewer."""
from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def resize_vocab(model, vocab_size: int) -> int:
    """Give `model` (a `LanguageModel`) `vocab_size` embedding rows (and head rows when untied): rows
    of ids both sizes have are kept, new rows drawn from N(0, init_std) with the torch RNG, rows past
    the new size dropped. Updates model.cfg.vocab_size; returns the old size."""
    old = model.embed.weight
    n_old = old.shape[0]
    keep = min(n_old, vocab_size)

    def resized(weight: torch.Tensor) -> torch.Tensor:
        new = torch.empty(vocab_size, weight.shape[1], dtype=weight.dtype, device=weight.device)
        new.normal_(0.0, model.cfg.init_std)
        new[:keep] = weight[:keep]
        return new

    model.embed = nn.Embedding.from_pretrained(resized(old), freeze=False)
    if model.lm_head is not None:
        head = nn.Linear(old.shape[1], vocab_size, bias=False, device=old.device, dtype=old.dtype)
        head.weight.copy_(resized(model.lm_head.weight))
        model.lm_head = head
    model.cfg.vocab_size = vocab_size
    return n_old
