"""Causal self-attention: GQA, QK-norm, RoPE, optional output gate, KV cache.

The forward pass is split into named steps so variants replace one step, not the whole layer:
    project -> mixer (anchor mixing) -> qk_norm -> rope -> attend -> gate -> o_proj
Higher-order attention overrides `forward`. The layer takes plain sizes and flags; what varies is
injected at construction: `make_projection` (nn.Linear, Nexus-Rank or Pattention per target) and an
optional `mixer` (cross-layer anchor mixing, a `ProjectionMixer`).

Inputs are explicit: `forward(x, rope, anchors=None, cache=None)`. Analyses read the attention
pattern through the parameter-free hook points `hook_qk` (q, k as `attend` receives them) and
`hook_gate` (the gate logits), never through flags in the model.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cache import append_history
from .layers import HookPoint, RMSNorm, apply_rope
from .projections import ProjectionFactory, linear_projection
from .width_roles import port, prefixed


def component_shapes(n_heads: int, n_kv_heads: int, head_dim: int, gate: str = "none") -> dict[str, tuple[int, int]]:
    """(heads, width) of each projection as attention uses it: q (and the gate) per query head, k/v per
    kv head; a headwise gate has width 1. Mixers size their coefficients from this same table."""
    shapes = {"q": (n_heads, head_dim), "k": (n_kv_heads, head_dim), "v": (n_kv_heads, head_dim)}
    if gate != "none":
        shapes["g"] = (n_heads, head_dim if gate == "elementwise" else 1)
    return shapes


class ProjectionMixer(Protocol):
    """Cross-layer mixing of one layer's projections (models/mixing.py), attached at construction.
    `anchors` maps component -> (B, T, heads, width) anchor (None: the anchor term is dropped)."""

    def __call__(self, parts: dict, x: torch.Tensor, anchors: dict | None) -> dict:
        """Before QK-norm: the projections `parts` (q/k/v/g, (B, T, heads, width)) -> mixed parts."""

    def after_qk_norm(
        self, q: torch.Tensor, k: torch.Tensor, anchors: dict | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """After QK-norm, before RoPE: q, k (B, T, heads, hd) -> q, k."""


def causal_mask(t_q: int, t_k: int, device) -> torch.Tensor:
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
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        make_projection: ProjectionFactory = linear_projection,
        bias: bool = False,
        gate: str = "none",
        qk_norm: bool = False,
        norm_eps: float = 1e-5,
        mixer: ProjectionMixer | None = None,
    ):
        super().__init__()
        d, H, KV, hd = d_model, n_heads, n_kv_heads, head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = H, KV, hd
        self.shapes = component_shapes(H, KV, hd, gate)
        self.q_proj = make_projection("q", d, H * hd, bias)
        self.k_proj = make_projection("k", d, KV * hd, bias)
        self.v_proj = make_projection("v", d, KV * hd, bias)
        self.o_proj = make_projection("o", H * hd, d, False)
        self.o_proj._nexus_out_proj = True  # zero_init_out targets this matrix
        # Gate logits come from the same normed input as q (gated attention, Qiu et al.).
        self.g_proj = None if gate == "none" else nn.Linear(d, H * self.shapes["g"][1], bias=False)
        self.q_norm = RMSNorm(hd, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(hd, norm_eps) if qk_norm else None
        self.hook_qk = HookPoint()  # (q, k) after norm and RoPE: attention-pattern analyses hook here
        self.hook_gate = HookPoint()  # gate logits after mixing: gate-activation analyses hook here
        self.mixer = mixer  # registered last: parameter order (optimizer state) as before injection

    def width_roles(self) -> dict:
        """Width growth: q/k/v(/g) read the hidden axis, o writes it; heads and head size stay."""
        roles = {}
        for name in ("q_proj", "k_proj", "v_proj", "g_proj"):
            if getattr(self, name) is not None:
                roles.update(prefixed(name, port(getattr(self, name), "in", "hidden", "in")))
        roles.update(prefixed("o_proj", port(self.o_proj, "out", "hidden", "out")))
        return roles

    # ------------------------------------------------------------------ steps
    def project(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        B, T, _ = x.shape
        parts = {
            "q": self.q_proj(x).view(B, T, *self.shapes["q"]),
            "k": self.k_proj(x).view(B, T, *self.shapes["k"]),
            "v": self.v_proj(x).view(B, T, *self.shapes["v"]),
        }
        if self.g_proj is not None:
            parts["g"] = self.g_proj(x).view(B, T, *self.shapes["g"])
        return parts

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.q_norm is not None:
            assert self.k_norm is not None  # built together with q_norm (qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k

    def attend(self, q, k, v, cache: dict | None) -> torch.Tensor:
        """q (B,H,T,hd), k/v (B,KV,T,hd), RoPE applied. Returns (B,H,T,hd)."""
        if cache is not None:  # preallocated history, written in place (models/cache.py)
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
        if self.mixer is not None:
            q, k = self.mixer.after_qk_norm(q, k, anchors)
        cos, sin = rope
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        return parts, q, k, parts["v"].transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        anchors: dict | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) normed input; rope the (cos, sin) tables of these positions; anchors the
        cross-layer anchor tensors (component -> (B, T, heads, width)) when mixing is on."""
        parts, q, k, v = self.mix_norm_rope(self.project(x), x, rope, anchors)
        q, k = self.hook_qk(q, k)
        o = self.attend(q, k, v, cache)
        return self.output(o.transpose(1, 2), parts)
