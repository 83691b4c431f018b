"""The language-model loss shared by every architecture (cross-entropy, z-loss, auxiliary losses) and the
output it fills in."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass
class LMOutput:
    logits: torch.Tensor | None  # None when a chunked loss never formed them (model.loss_chunk_tokens, training)
    loss: torch.Tensor | None = None  # mean CE over valid tokens + z-loss + auxiliary losses
    ce_loss: torch.Tensor | None = None  # mean cross-entropy alone (what validation reports)
    n_valid: torch.Tensor | int = 0  # valid target tokens; kept a tensor so compiled graphs need no host sync
    aux_losses: dict = field(default_factory=dict)  # name -> scalar tensor already weighted (MoE, ...)
    hidden_states: list | None = None  # residual stream after embedding and after each layer

    @property
    def n_tokens(self) -> int:
        """Valid target tokens as a Python int (synchronizes; call outside compiled code)."""
        return int(self.n_valid)

    @n_tokens.setter
    def n_tokens(self, value) -> None:
        self.n_valid = value


class AuxLossModule(nn.Module):
    """A layer with training-time auxiliary losses (MoE load balancing, router z-loss). Each forward
    stores them in `aux_losses_out` (name -> scalar already weighted; empty when not training), and
    the LM adds the sum over all such layers to its loss once (`collect_aux_losses`)."""

    aux_losses_out: dict[str, torch.Tensor] = {}


def collect_aux_losses(model: nn.Module) -> dict[str, torch.Tensor]:
    """name -> sum over every AuxLossModule in `model` of the losses its last forward stored."""
    total: dict[str, torch.Tensor] = {}
    for m in model.modules():
        if isinstance(m, AuxLossModule):
            for name, v in m.aux_losses_out.items():
                total[name] = total[name] + v if name in total else v
    return total


def _flat_ce(logits: torch.Tensor, labels: torch.Tensor):
    """(mean CE, fp32 flat logits, valid mask, valid count, denominator) over the valid targets.
    Tensor arithmetic only (no int() / boolean indexing): no host sync, and torch.compile keeps the
    loss in one graph."""
    flat, labels = logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1)
    valid = labels != IGNORE_INDEX
    n = valid.sum()
    denom = n.clamp(min=1).to(flat.dtype)
    ce = F.cross_entropy(flat, labels, ignore_index=IGNORE_INDEX, reduction="sum") / denom
    return ce, flat, valid, n, denom


def cross_entropy_mean(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean CE over the valid targets (IGNORE_INDEX skipped), computed in fp32, without a host sync."""
    return _flat_ce(logits, labels)[0]


def lm_loss(out: LMOutput, labels: torch.Tensor, z_loss: float, main: torch.Tensor | None = None) -> LMOutput:
    """Fill loss fields: loss = main + z-loss + auxiliary losses, where `main` defaults to the mean CE
    of out.logits (deep supervision passes its CE summed over steps); ce_loss is that CE. z-loss is
    added exactly once here, never inside layers."""
    ce, logits, valid, n, denom = _flat_ce(out.logits, labels)
    loss = ce if main is None else main
    if z_loss > 0:
        lse = torch.logsumexp(logits, dim=-1)
        loss = loss + z_loss * (lse.pow(2) * valid).sum() / denom
    return finish_output(out, loss, ce, n)


def finish_output(out: LMOutput, loss: torch.Tensor, ce: torch.Tensor, n) -> LMOutput:
    """Add the auxiliary losses once and fill the output's loss fields."""
    for v in out.aux_losses.values():
        loss = loss + v
    out.loss, out.ce_loss, out.n_valid = loss, ce, n
    return out
