"""Slow, obviously-correct higher-order attention, straight from the paper's equations.

No SDPA, no caches, no memoization: explicit score matrices with an explicit causal mask, the
recursion written as the paper writes it (eq. 7-8 for the self form, eq. 11-12 for the projected
form). It reads the weights of a `HigherOrderAttention` so tests can hold the fast layer to it on
outputs and gradients. Only plain nn.Linear projections are supported.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def causal_probs(q: torch.Tensor, k: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) with future keys masked. q (B,H,T,d), k (B,Hk,T,d), Hk divides H."""
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        T_q, T_k = scores.shape[-2:]
        future = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).triu(T_k - T_q + 1)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(-1)


def naive_attention(q, k, v, causal: bool = True):
    if v.shape[1] != q.shape[1]:
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return causal_probs(q, k, causal) @ v


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def reference_higher_order(
    layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, causal_inner: bool = True
) -> torch.Tensor:
    """Output of `layer` (a HigherOrderAttention, no mixer) on x (B,T,d). `causal_inner=False`
    builds the leaky variant that the no-leakage test must be able to catch."""
    B, T, _ = x.shape
    hd = layer.head_dim
    heads = {"q": layer.n_heads, "k": layer.n_kv_heads, "v": layer.n_kv_heads}

    def proj(lin, inp, t):  # (B, heads, T, hd)
        return F.linear(inp, lin.weight, lin.bias).view(B, T, heads[t], hd).transpose(1, 2)

    def blend(t, base, refined):
        if layer.ho_gate is None:
            return refined
        return base + layer.ho_gate[t].view(1, -1, 1, 1) * (refined - base)

    def attention(w, m):  # the whole attention of weights w at order m, model space
        qkv = {t: proj(getattr(w, f"{t}_proj"), x, t) for t in "qkv"}
        if m > 1:
            for t in layer.targets:
                if layer.form == "projected":
                    src = w if (layer.shared or w is not layer) else layer.inner[t]
                    refined = proj(getattr(w, f"{t}_proj"), attention(src, m - 1), t)  # eq. 12: Attn(X) W_t
                else:
                    refined = qkv[t]
                    for _ in range(m - 1):  # eq. 7-8 applied recursively
                        refined = naive_attention(refined, refined, refined, causal_inner)
                qkv[t] = blend(t, qkv[t], refined)
        q, k, v = qkv["q"], qkv["k"], qkv["v"]
        if w.q_norm is not None:
            q, k = _rms(q, w.q_norm.weight, w.q_norm.eps), _rms(k, w.k_norm.weight, w.k_norm.eps)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        causal = causal_inner or (w is layer and m == layer.order)  # the outer attention stays causal
        o = naive_attention(q, k, v, causal).transpose(1, 2)  # (B, T, H, hd)
        if w.g_proj is not None:
            g = F.linear(x, w.g_proj.weight).view(B, T, layer.n_heads, -1)
            o = o * torch.sigmoid(g)
        return F.linear(o.reshape(B, T, -1), w.o_proj.weight)

    return attention(layer, layer.order)
