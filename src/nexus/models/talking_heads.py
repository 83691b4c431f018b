"""Talking-heads attention (Shazeer et al. 2020, arXiv:2003.02436; cited by Nexusformer, Sec. 2.2).

Standard multi-head attention computes each head's weights from that head alone. Talking-heads mixes
the heads twice, with learned h x h matrices:

    J_h  = Q_h K_h^T / sqrt(d)                  per-head logits
    L_h' = sum_h J_h P_l[h, h']                 logits mixed across heads (before the softmax)
    W_h' = softmax(L_h' + causal mask)
    U_h  = sum_h' W_h' P_w[h', h]               weights mixed across heads (after the softmax)
    O_h  = U_h V_h

Here heads in and out are the model's query heads (the paper's h_k = h = h_v); with GQA the key/value
heads are repeated to the query heads first. The mask is added after the logit mixing so no future
position ever reaches a weight. P_l and P_w start as the identity, so a talking-heads layer starts as
standard attention (our choice: the seeds do not give the paper's initialization). The weights need
the whole (T, T) map per head, so this runs the explicit softmax, not the fused SDPA kernel.

Everything else (projections, gate, QK-norm, RoPE, anchor mixing, KV cache, width-growth roles) is
the base Attention's; P_l and P_w are h x h, so width growth leaves them alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..config import ModelConfig
from .attention import Attention, causal_mask
from .cache import append_history
from .kinds import ATTENTION_KINDS, LayerKind


class TalkingHeadsAttention(Attention):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        mix_logits: bool = True,
        mix_weights: bool = True,
        mixer=None,
        **attention_kwargs,
    ):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim, **attention_kwargs)
        self.logit_mix = nn.Parameter(torch.eye(n_heads)) if mix_logits else None  # P_l[h_in, h_out]
        self.weight_mix = nn.Parameter(torch.eye(n_heads)) if mix_weights else None  # P_w[h_in, h_out]
        self.mixer = mixer  # registered last, as in Attention

    def reset_special_parameters(self) -> None:
        # the global init draws no values for bare Parameters; the identity makes the layer standard attention
        for p in (self.logit_mix, self.weight_mix):
            if p is not None:
                with torch.no_grad():
                    p.copy_(torch.eye(p.shape[0], dtype=p.dtype, device=p.device))

    def attend(self, q, k, v, cache: dict | None) -> torch.Tensor:
        """q (B,H,T,hd), k/v (B,KV,T,hd) with RoPE applied -> (B,H,T,hd)."""
        if cache is not None:
            k, v = append_history(cache, "k", k), append_history(cache, "v", v)
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        logits = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, Tq, Tk)
        if self.logit_mix is not None:
            logits = torch.einsum("bhqk,hg->bgqk", logits, self.logit_mix.to(logits.dtype))
        mask = causal_mask(q.shape[-2], k.shape[-2], q.device)
        weights = logits.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        if self.weight_mix is not None:
            weights = torch.einsum("bhqk,hg->bgqk", weights, self.weight_mix.to(weights.dtype))
        return weights @ v

    def flops_per_token(self, seq_len: int) -> float:
        """The base QK^T and AV, plus each head mixing: H x H multiply-adds per key position."""
        mixes = (self.logit_mix is not None) + (self.weight_mix is not None)
        return super().flops_per_token(seq_len) + mixes * 2.0 * self.n_heads * self.n_heads * seq_len


def _build(cfg: ModelConfig, **common) -> TalkingHeadsAttention:
    return TalkingHeadsAttention(mix_logits=cfg.attention.mix_logits, mix_weights=cfg.attention.mix_weights, **common)


ATTENTION_KINDS.register("talking_heads")(LayerKind(_build))
