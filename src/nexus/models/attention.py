"""Causal self-attention: GQA, QK-norm, RoPE, optional output gate, KV cache.

The forward pass is split into named steps so variants replace one step, not the whole layer:
    project -> mixer (anchor mixing) -> qk_norm -> rope -> attend -> gate -> o_proj
Higher-order attention overrides `forward`; anchor mixing installs `self.mixer`; Nexus-Rank and
Pattention arrive through `make_projection`.

Inputs are explicit: `forward(x, rope, anchors=None, cache=None)`. Analyses read the attention
pattern through the parameter-free hook points `hook_qk` (q, k as `attend` receives them) and
`hook_gate` (the gate logits), never through flags in the model.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .layers import HookPoint, RMSNorm, apply_rope
from .projections import make_projection
from .seq_cache import append_history


def causal_mask(t_q: int, t_k: int, device) -> torch.Tensor | None:
    """Boolean mask (True = may attend) for t_q new queries after t_k - t_q cached keys."""
    past = t_k - t_q
    i = torch.arange(t_q, device=device)[:, None] + past
    j = torch.arange(t_k, device=device)[None, :]
    return j <= i


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal SDPA for q (B,H,Tq,d) against k/v (B,Hkv,Tk,d), Tk >= Tq, queries are the last Tq."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    gqa = k.shape[1] != q.shape[1]
    if t_q == t_k:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if t_q == 1:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(t_q, t_k, q.device), enable_gqa=gqa)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.cfg, self.layer_idx = cfg, layer_idx
        d, H, KV, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.hd
        self.n_heads, self.n_kv_heads, self.head_dim = H, KV, hd
        bias = cfg.attention_bias
        self.q_proj = make_projection(cfg, "q", d, H * hd, bias)
        self.k_proj = make_projection(cfg, "k", d, KV * hd, bias)
        self.v_proj = make_projection(cfg, "v", d, KV * hd, bias)
        self.o_proj = make_projection(cfg, "o", H * hd, d, False)
        self.o_proj._nexus_out_proj = True  # zero_init_out targets this matrix
        gate = cfg.attention.gate
        # Gate logits come from the same normed input as q (gated attention, Qiu et al.).
        self.g_proj = None if gate == "none" else nn.Linear(d, H * hd if gate == "elementwise" else H, bias=False)
        self.q_norm = RMSNorm(hd, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.norm_eps) if cfg.qk_norm else None
        self.hook_qk = HookPoint()  # (q, k) after norm and RoPE: attention-pattern analyses hook here
        self.hook_gate = HookPoint()  # gate logits after mixing: gate-activation analyses hook here
        # Anchor mixing installs a callable (parts, x, anchors) -> parts here (see models/mixing.py).
        self.mixer: nn.Module | None = None

    # ------------------------------------------------------------------ steps
    def project(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        B, T, _ = x.shape
        parts = {
            "q": self.q_proj(x).view(B, T, self.n_heads, self.head_dim),
            "k": self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim),
            "v": self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim),
        }
        if self.g_proj is not None:
            parts["g"] = self.g_proj(x).view(B, T, self.n_heads, -1)
        return parts

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k

    def attend(self, q, k, v, cache: dict | None) -> torch.Tensor:
        """q (B,H,T,hd), k/v (B,KV,T,hd), RoPE applied. Returns (B,H,T,hd)."""
        if cache is not None:  # preallocated history, written in place (models/seq_cache.py)
            k, v = append_history(cache, "k", k), append_history(cache, "v", v)
        return sdpa_causal(q, k, v)

    def flops_per_token(self, seq_len: int) -> float:
        """FLOPs protocol (analysis/flops.py): QK^T and AV, 2*hd*seq_len each per query head, counted as the
        full square dense SDPA computes; the projections are child modules counted by the walker."""
        return 2.0 * 2.0 * self.n_heads * self.head_dim * seq_len

    def output(self, o: torch.Tensor, parts: dict) -> torch.Tensor:
        """o (B,T,H,hd): apply the gate (after attention, before W_o) and the output projection."""
        if "g" in parts:
            o = o * torch.sigmoid(self.hook_gate(parts["g"]))
        B, T = o.shape[:2]
        return self.o_proj(o.reshape(B, T, -1))

    def mix_norm_rope(self, parts: dict, x: torch.Tensor, rope, anchors: dict | None):
        """mixer -> qk-norm -> RoPE (the ExoFormer order). Returns (parts, q, k, v) with q/k/v in
        (B, heads, T, hd) layout, ready for `attend`."""
        if self.mixer is not None:
            parts = self.mixer(parts, x, anchors)
        q, k = self.qk_norm(parts["q"], parts["k"])
        if self.mixer is not None and hasattr(self.mixer, "after_qk_norm"):
            q, k = self.mixer.after_qk_norm(q, k, anchors)
        cos, sin = rope
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        return parts, q, k, parts["v"].transpose(1, 2)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], anchors: dict | None = None,
                cache: dict | None = None) -> torch.Tensor:
        """x (B, T, d) normed input; rope the (cos, sin) tables of these positions; anchors the
        cross-layer anchor tensors (component -> (B, T, heads, width)) when mixing is on."""
        parts, q, k, v = self.mix_norm_rope(self.project(x), x, rope, anchors)
        q, k = self.hook_qk(q, k)
        o = self.attend(q, k, v, cache)
        return self.output(o.transpose(1, 2), parts)

