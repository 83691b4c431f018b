"""Model output and the language-model loss shared by every architecture."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass
class LMOutput:
    logits: torch.Tensor
    loss: torch.Tensor | None = None  # mean CE over valid tokens + z-loss + auxiliary losses
    ce_loss: torch.Tensor | None = None  # mean cross-entropy alone (what validation reports)
    n_tokens: int = 0  # valid target tokens in this batch
    aux_losses: dict = field(default_factory=dict)  # name -> scalar tensor already weighted (MoE, ...)
    hidden_states: list | None = None  # residual stream after embedding and after each layer


def lm_loss(out: LMOutput, labels: torch.Tensor, z_loss: float) -> LMOutput:
    """Fill loss fields. z-loss is added exactly once here, never inside layers."""
    logits = out.logits.float().reshape(-1, out.logits.shape[-1])
    labels = labels.reshape(-1)
    valid = labels != IGNORE_INDEX
    n = int(valid.sum())
    ce = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum") / max(n, 1)
    loss = ce
    if z_loss > 0:
        lse = torch.logsumexp(logits[valid], dim=-1)
        loss = loss + z_loss * lse.pow(2).sum() / max(n, 1)
    for v in out.aux_losses.values():
        loss = loss + v
    out.loss, out.ce_loss, out.n_tokens = loss, ce, n
    return out
