"""Nexus higher-order attention: queries/keys (optionally values) refined by inner causal attention.

Order m = 1 is standard attention. For m > 1 the outer attention does not use Q = X W_q directly:

* form "projected" (paper eq. 12, the weight-shared variant it trains): the inner step is the *full*
  attention of the layer applied to X (its W_q, W_k, W_v, QK-norm, RoPE, gate and W_o) at order
  m - 1, giving Y in model space; the refined query is Q~ = Y W_q (K~ = Y W_k, V~ = Y W_v).
  With `ho_shared` the inner weights are the layer's own (parameters do not grow, and the inner
  output is computed once for all targets); without it every refined target t has its own inner
  attention (its own W_q, W_k, W_v, W_o, shared across its levels), the paper's unshared ablation.
* form "self" (paper eq. 7-8): Q~ = softmax(Q Q^T / sqrt(d)) Q on the per-head projections,
  repeated m - 1 times; K~ and V~ likewise. Parameter-free.

Every inner attention is causal (a refined key must not carry future tokens). With `ho_gate` each
refined target is blended as base + alpha * (refined - base) with a zero-initialized per-head alpha,
so a converted model computes exactly what it computed before and alpha learns how much to refine.

Incremental decoding keeps one KV cache per inner level (and, for the self form, the history of each
refined sequence) inside the layer's cache dict under "ho:<level>" keys; every level is causal, so
decoding token by token equals the full forward.

Anchor mixing (`self.mixer`) acts on the outer level only: the inner levels compute representations,
the outer level is the one whose q/k/v/g the cross-layer anchors mix.

Attention-map analyses read the outer level at `hook_qk` (like standard attention) and the inner
level directly below it at `hook_inner["inner_<target>"]`, called with that level's (q, k).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn

from ..config import ModelConfig
from .attention import Attention, sdpa_causal
from .cache import append_history, child_cache
from .kinds import ATTENTION_KINDS, LayerKind
from .layers import HookPoint, apply_rope


class HigherOrderAttention(Attention):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        order: int,
        form: str,
        shared: bool,
        targets: tuple[str, ...],
        ho_gate: bool,
        mixer=None,
        **attention_kwargs,
    ):
        """order/form/shared/targets/ho_gate: model.attention.order, ho_form, ho_shared, ho_targets,
        ho_gate, all required (their defaults live in HigherOrderOptions only); the rest (sizes,
        make_projection, bias, gate, qk_norm, norm_eps) as for Attention."""
        super().__init__(d_model, n_heads, n_kv_heads, head_dim, **attention_kwargs)
        self.order, self.form, self.shared = order, form, shared
        self.targets = tuple(targets)  # "qk" -> ("q", "k")
        self.inner: nn.ModuleDict | None = None
        if self.form == "projected" and not self.shared:
            inner = {}
            for t in self.targets:  # the same attention at order 1, without cross-layer mixing
                m = Attention(d_model, n_heads, n_kv_heads, head_dim, **attention_kwargs)
                m.o_proj._nexus_out_proj = False  # zero_init_out would make the inner output (and Q~) zero
                inner[t] = m
            self.inner = nn.ModuleDict(inner)
        # hook points of the inner level below the outer one, read by the attention-map analysis
        self.hook_inner = nn.ModuleDict({f"inner_{t}": HookPoint() for t in self.targets})
        self.ho_gate = None
        if ho_gate:
            heads = {"q": self.n_heads, "k": self.n_kv_heads, "v": self.n_kv_heads}
            self.ho_gate = nn.ParameterDict({t: nn.Parameter(torch.zeros(heads[t])) for t in self.targets})
        self.mixer = mixer  # registered last, after the inner weights: parameter order as before injection

    def reset_special_parameters(self) -> None:
        # The refinement gate starts closed so the layer starts as standard attention (lossless retrofit).
        if self.ho_gate is not None:
            for p in self.ho_gate.values():
                nn.init.zeros_(p)

    def width_refusal(self, spec) -> str | None:
        """Width growth reaches the inner attentions through their own roles (they are Attention modules).
        One case cannot stay exact: with zero new fan-out channels the fan-in factor sqrt(n/n') on W_q/W_k/W_v
        undoes RMSNorm's rescaling of the block input, but the projected form also applies W_q/W_k/W_v to
        the inner output Y, which no norm rescaled, so the refined Q~/K~/V~ would shrink."""
        if self.form == "projected" and spec.hidden and spec.preserve == "exact" and spec.init_out == "zero":
            return (
                "--preserve exact with --init zero,<any> on width.hidden cannot keep projected higher-order "
                "attention exact (its inner output is not normed; valid: --init copy,copy, or --preserve rms)"
            )
        return None

    # ------------------------------------------------------------------ levels
    def _weights_name(self, w: Attention) -> str:
        if w is self:
            return "self"
        return next(f"inner_{t}" for t, m in self.inner.items() if m is w)

    def _inner_attention(self, t: str) -> nn.Module:
        assert self.inner is not None  # built for the projected, unshared form: the only one that asks for it
        return self.inner[t]

    def _blend(self, t: str, base: torch.Tensor, refined: torch.Tensor) -> torch.Tensor:
        if self.ho_gate is None:
            return refined
        alpha = self.ho_gate[t].to(base.dtype).view(1, 1, -1, 1)
        return base + alpha * (refined - base)

    def level_parts(self, w: Attention, x: torch.Tensor, m: int, rope, cache: dict | None, memo: dict) -> dict:
        """q/k/v(/g) of attention with weights `w` at order m, (B, T, heads, hd) each, refined."""
        key = f"proj:{self._weights_name(w)}"
        if key not in memo:  # every level reads the same x: project it once per weight set
            memo[key] = w.project(x)
        parts = dict(memo[key])
        if m == 1:
            return parts
        B, T = x.shape[:2]
        for t in self.targets:
            if self.form == "projected":
                src = w if (self.shared or w is not self) else self._inner_attention(t)
                y = self.level_output(src, x, m - 1, rope, cache, memo, label=f"inner_{t}")
                refined = getattr(w, f"{t}_proj")(y).view(B, T, parts[t].shape[2], self.head_dim)
            else:
                refined = self._self_refine(parts[t], m - 1, cache, t)
            parts[t] = self._blend(t, parts[t], refined)
        return parts

    def level_output(
        self, w: Attention, x: torch.Tensor, m: int, rope, cache: dict | None, memo: dict, label: str
    ) -> torch.Tensor:
        """The whole attention of weights `w` at order m (an inner level), in model space (B, T, d)."""
        key = f"{self._weights_name(w)}:{m}"
        hook = self.hook_inner[label] if m == self.order - 1 else None  # maps: the level below the outer
        if key in memo:  # shared weights: the q and k refinements use the same inner attention
            if hook is not None:
                hook(*memo[f"{key}:qk"])
            return memo[key]
        parts = self.level_parts(w, x, m, rope, cache, memo)
        q, k = w.qk_norm(parts["q"], parts["k"])
        cos, sin = rope
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        v = parts["v"].transpose(1, 2)
        sub = None if cache is None else child_cache(cache, f"ho:{key}")
        if hook is not None:
            hook(q, k)
            memo[f"{key}:qk"] = (q, k)
        o = Attention.attend(w, q, k, v, sub)
        out = w.output(o.transpose(1, 2), parts)
        memo[key] = out
        return out

    def _self_refine(self, z: torch.Tensor, n: int, cache: dict | None, t: str) -> torch.Tensor:
        """Eq. 7-8 applied n times: z <- softmax(z z^T / sqrt(d)) z, causal, per head. z (B, T, h, hd)."""
        z = z.transpose(1, 2)
        for level in range(n):
            hist = z
            if cache is not None:
                hist = append_history(child_cache(cache, f"ho:self_{t}:{level}"), "z", z)
            if level == n - 1:
                self.hook_inner[f"inner_{t}"](z, hist)
            z = sdpa_causal(z, hist, hist)
        return z.transpose(1, 2)

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        anchors: dict | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        parts = self.level_parts(self, x, self.order, rope, cache, memo={})
        parts, q, k, v = self.mix_norm_rope(parts, x, rope, anchors)  # anchor mixing acts on the outer level only
        q, k = self.hook_qk(q, k)
        o = self.attend(q, k, v, cache)
        return self.output(o.transpose(1, 2), parts)

    # ------------------------------------------------------------------ accounting
    def _trace(self, w: Attention, m: int, seen: set, acc: dict) -> None:
        """Mirror of level_parts: add the attention products (in units of one H-head attention) and
        the Linear FLOPs per token it performs."""
        name = self._weights_name(w)
        if ("proj", name) not in seen:
            seen.add(("proj", name))
            acc["lin"] += sum(_linear_flops(p) for p in (w.q_proj, w.k_proj, w.v_proj, w.g_proj) if p is not None)
        if m == 1:
            return
        heads = {"q": self.n_heads, "k": self.n_kv_heads, "v": self.n_kv_heads}
        for t in self.targets:
            if self.form == "projected":
                src = w if (self.shared or w is not self) else self._inner_attention(t)
                key = f"{self._weights_name(src)}:{m - 1}"
                if key not in seen:
                    seen.add(key)
                    self._trace(src, m - 1, seen, acc)
                    acc["attn"] += 1
                    acc["lin"] += _linear_flops(src.o_proj)
                acc["lin"] += _linear_flops(getattr(w, f"{t}_proj"))
            else:
                acc["attn"] += (m - 1) * heads[t] / self.n_heads

    def flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token of this layer's own work (FLOPs protocol of analysis/flops.py).

        Own work = every attention product (QK^T and AV: 2*hd*seq_len each per head, the full square
        that dense kernels compute) plus the Linear passes beyond the one per child Linear that the
        walker already counts (inner levels re-apply the layer's projections to new inputs).
        """
        acc = {"attn": 1.0, "lin": 0.0}  # the outer attention
        self._trace(self, self.order, set(), acc)
        acc["lin"] += _linear_flops(self.o_proj)
        seen_by_walker = sum(_linear_flops(m) for m in self.modules() if isinstance(m, nn.Linear))
        if self.inner is not None:  # each inner Attention reports one attention call of its own
            # (ModuleDict is not generic: its values are the Attentions built in __init__)
            seen_by_walker += sum(cast(Attention, m).flops_per_token(seq_len) for m in self.inner.values())
        core = 2 * 2 * self.n_heads * self.head_dim * seq_len
        return acc["attn"] * core + acc["lin"] - seen_by_walker


def _linear_flops(p: nn.Module) -> float:
    """Per-token FLOPs of one pass through a projection (Linear: 2*in*out; other kinds: their Linears)."""
    return float(sum(2 * m.in_features * m.out_features for m in p.modules() if isinstance(m, nn.Linear)))


def _build(cfg: ModelConfig, **common) -> HigherOrderAttention:
    a = cfg.attention
    return HigherOrderAttention(
        order=a.order, form=a.ho_form, shared=a.ho_shared, targets=tuple(a.ho_targets), ho_gate=a.ho_gate, **common
    )


ATTENTION_KINDS.register("higher_order")(LayerKind(_build))
