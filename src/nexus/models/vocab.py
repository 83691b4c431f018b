"""Resizing a language model's vocabulary (`nexus train --init-from CKPT --resize-vocab`): a new
tokenizer with more tokens (e.g. byte pretraining -> byte chat SFT adds 3 special tokens) or fewer."""

from __future__ import annotations

import torch
from torch import nn

from ..config import ConfigError


def needs_resize(n_model: int, n_tok: int, data_cfg, own_tokenizer: bool, resize: bool) -> bool:
    """Whether a model of `n_model` embedding rows must be resized for a tokenizer of `n_tok` tokens;
    ConfigError (one line) when it must and `resize` (--resize-vocab) was not asked for. A model's own
    tokenizer may be smaller than its embedding (HF models pad their vocabulary)."""
    if n_model == n_tok or (own_tokenizer and n_model > n_tok):
        return False
    if resize:
        return True
    raise ConfigError(
        f"model.vocab_size={n_model} but the tokenizer (data.tokenizer={data_cfg.tokenizer!r}"
        f"{', data.chat=true' if data_cfg.chat else ''}) has {n_tok} tokens (valid: the model's own "
        "tokenizer, a tokenizer of its size, or --resize-vocab with --init-from to fit the embedding "
        "to the tokenizer)"
    )


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
