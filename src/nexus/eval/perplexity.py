"""Validation loss and perplexity of a model on its run's held-out split."""

from __future__ import annotations

import math

import torch


def perplexity(model, cfg, tok, n_batches: int, batch_size: int) -> dict:
    """Token-weighted mean cross-entropy over deterministic validation batches."""
    from ..data.loader import DataModule

    data = DataModule(cfg.data, seed=cfg.train.seed, tokenizer=tok)
    tot, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for x, y in data.val_batches(n_batches, batch_size):
            out = model(x, labels=y)
            tot += float(out.ce_loss) * out.n_tokens
            n += out.n_tokens
    loss = tot / max(n, 1)
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50)), "tokens": n}
