"""Slow, literal ExoFormer / NuResFormer / ResFormer forward pass, written from the paper's
equations (eq. 1-7, appendix A) with explicit per-head loops and an explicit causal softmax.
The dynamic-mixing factors follow eq. 6 token by token on the pre-normed layer input H_{n-1}
(gamma ordered q1, q2, k1, k2, v1, v2, g1, g2 as the paper lists them).

It reads the weights of a `TransformerLM` built with linear projections and a SwiGLU MLP, and
shares no code with the model (own RMSNorm, RoPE, attention), so a test comparing the two checks
the order mix -> QK-norm -> RoPE -> attention -> gate -> W_o and the anchor definitions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

ORDER = ("q", "k", "v", "g")


def rms(x: torch.Tensor, gain: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * gain if gain is not None else y


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """x (T, d) for one head: rotate pairs (i, i + d/2) by angle pos * theta^(-2i/d)."""
    T, d = x.shape
    half = d // 2
    out = torch.empty_like(x)
    for t in range(T):
        for i in range(half):
            ang = t * theta ** (-2.0 * i / d)
            c, s = math.cos(ang), math.sin(ang)
            a, b = x[t, i], x[t, i + half]
            out[t, i] = a * c - b * s
            out[t, i + half] = b * c + a * s
    return out


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One head: q, k, v (T, hd)."""
    T = q.shape[0]
    scores = (q @ k.t()) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def _anchor_norm(model_norms, comp: str, x: torch.Tensor, eps: float) -> torch.Tensor:
    """x (T, heads, width). Per-head RMSNorm with the module's gain, or across heads if width 1."""
    if comp not in model_norms:
        return x
    gain = model_norms[comp].norm.weight
    if x.shape[-1] == 1:
        return rms(x[..., 0], gain, eps)[..., None]
    return rms(x, gain, eps)


def reference_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """ids (T,) -> logits (T, V) computed literally. Supports anchors none/value_residual/nures/exo."""
    cfg = model.cfg
    eps, H, KV, hd = cfg.norm_eps, cfg.n_heads, cfg.kv_heads, cfg.hd
    mix = cfg.mixing
    T = ids.shape[0]
    x = model.embed.weight[ids]  # H_0
    anchors: dict[str, torch.Tensor] = {}
    if mix.anchor == "exo":  # eq. 5: one projection per component on the embeddings, then RMSNorm
        W = model.anchor.proj.weight
        row = 0
        for c in ORDER:
            if c not in mix.components:
                continue
            heads = KV if c in ("k", "v") else H
            width = hd if c != "g" or cfg.attention.gate == "elementwise" else 1
            n = heads * width
            a = (x @ W[row : row + n].t()).view(T, heads, width)
            anchors[c] = _anchor_norm(model.anchor.norms, c, a, eps)
            row += n
    for li, layer in enumerate(model.layers):
        att = layer.attn
        h = rms(x, layer.attn_norm.weight, eps)
        S = {
            "q": (h @ att.q_proj.weight.t()).view(T, H, hd),
            "k": (h @ att.k_proj.weight.t()).view(T, KV, hd),
            "v": (h @ att.v_proj.weight.t()).view(T, KV, hd),
        }
        if att.g_proj is not None:
            S["g"] = (h @ att.g_proj.weight.t()).view(T, H, -1)
        mixer = att.mixer
        is_anchor_layer = mix.anchor in ("nures", "value_residual") and li == 0
        if mix.anchor != "none" and not is_anchor_layer:  # eq. 1 / eq. 7
            gam = None
            if mixer.dynamic is not None:
                # eq. 6: DM_n(H_{n-1}) = sigmoid(GELU(H_{n-1} W1) W2 + b), where H_{n-1} is the layer
                # input *after* pre-normalization (appendix A.1), i.e. the very h the projections read.
                # No further norm: the MLP sees h itself.
                dm = mixer.dynamic
                W1 = dm.fc1.weight.t()  # (d_model, 16)
                W2, b = dm.fc2.weight.t(), dm.fc2.bias  # (16, 8), (8,)
                gam = torch.stack([torch.sigmoid(F.gelu(h[t] @ W1) @ W2 + b) for t in range(T)])  # (T, 8)
            for c in mix.components:
                l1, l2 = mixer.coefficients(c)
                i = ORDER.index(c)
                rows = []  # built as a new tensor, not written in place, so autograd can differentiate it
                for t in range(T):
                    g1 = gam[t, 2 * i] if gam is not None else 1.0
                    g2 = gam[t, 2 * i + 1] if gam is not None else 1.0
                    rows.append((l1 * g1) * anchors[c][t] + (l2 * g2) * S[c][t])
                S[c] = torch.stack(rows)
        if is_anchor_layer:  # internal anchors: raw v, g of layer 0 (normed per config)
            for c in ("v", "g"):
                if c in mix.components:
                    anchors[c] = _anchor_norm(mixer.norms, c, S[c], eps)
        q, k = S["q"], S["k"]
        if cfg.qk_norm:
            q, k = rms(q, att.q_norm.weight, eps), rms(k, att.k_norm.weight, eps)
        if is_anchor_layer:  # internal q/k anchors are taken after layer 0's QK-norm
            for c, t_ in (("q", q), ("k", k)):
                if c in mix.components:
                    anchors[c] = _anchor_norm(mixer.norms, c, t_, eps)
        heads_out = []
        for hh in range(H):
            kvh = hh // (H // KV)
            o = causal_attention(rope(q[:, hh], cfg.rope_theta), rope(k[:, kvh], cfg.rope_theta), S["v"][:, kvh])
            if "g" in S:
                o = o * torch.sigmoid(S["g"][:, hh])
            heads_out.append(o)
        x = x + torch.cat(heads_out, dim=-1) @ att.o_proj.weight.t()
        h2 = rms(x, layer.mlp_norm.weight, eps)
        mlp = layer.mlp
        x = x + (F.silu(h2 @ mlp.gate_proj.weight.t()) * (h2 @ mlp.up_proj.weight.t())) @ mlp.down_proj.weight.t()
    x = rms(x, model.norm.weight, eps)
    head = model.embed.weight if model.lm_head is None else model.lm_head.weight
    return x @ head.t()
