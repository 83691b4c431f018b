"""One-token decode steps of a plain Transformer++ without walking its module tree.

Decoding one token of a small model is bound by host overhead, not arithmetic: baseline-tiny (d 128,
4 layers) spends ~40 tiny ops and ~25 nn.Module calls per layer per token, each costing microseconds
of Python and dispatch, so the cached step was only ~2.6-4.5x the uncached forward of the whole
prefix. `PlainDecoder` runs the same arithmetic as `Block.forward` for one new position with the
module's own weights (no copies, so nothing goes stale) in about 15 ops per layer and no module
calls:

    h = rms_norm(x); q, k, v = linear(h)            (+ per-head rms_norm with QK-norm)
    RoPE on q and k together: qk * cos + roll(qk, hd/2) * sin_signed   (== rotate_half form)
    k, v written into the cache's preallocated SeqBuffers at this position, SDPA over the history
    x += o_proj(o); x += down(silu(gate(h)) * up(h))

It reads and writes the same `KVCache` the module forward uses (the prefill runs through the module
forward), so the two can be interleaved. Only models built entirely from the parts it reproduces
are accepted (`PlainDecoder.build` returns None otherwise and generate() keeps the module forward):
no forward hooks anywhere (analyses hook the HookPoints), no cross-layer mixing, no output gate, no
subclassed or replaced layers (BitLinear, Nexus-Rank, higher-order attention, MoE), fp32 weights.
tests/test_decode_cache.py holds it to the module forward and to uncached generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import Attention
from .cache import LayerCache, SeqBuffer
from .layers import RMSNorm, RotaryEmbedding, SwiGLU

if TYPE_CHECKING:
    from .base import LanguageModel


def _hooked(model: nn.Module) -> bool:
    """Any forward (pre-)hook, global or on a submodule: the module forward must run to honour it."""
    from torch.nn.modules import module as torch_module

    if getattr(torch_module, "_global_forward_hooks", None) or getattr(torch_module, "_global_forward_pre_hooks", None):
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _plain_block(block: nn.Module, block_type: type) -> bool:
    attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
    if type(block) is not block_type or type(attn) is not Attention or type(mlp) is not SwiGLU:
        return False
    if attn.mixer is not None or attn.g_proj is not None:
        return False
    linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    norms = [block.attn_norm, block.mlp_norm] + ([attn.q_norm, attn.k_norm] if attn.q_norm is not None else [])
    return all(type(m) is nn.Linear for m in linears) and all(type(n) is RMSNorm for n in norms)


class _Layer:
    """One block's weights and its cache buffers, looked up once per generate() call."""

    __slots__ = (
        "attn_norm",
        "mlp_norm",
        "q_norm",
        "k_norm",
        "q",
        "k",
        "v",
        "o",
        "gate",
        "up",
        "down",
        "k_buf",
        "v_buf",
    )

    def __init__(self, block: nn.Module, layer_cache: LayerCache):
        attn, mlp = block.attn, block.mlp
        self.attn_norm, self.mlp_norm = block.attn_norm.weight, block.mlp_norm.weight
        self.q_norm = attn.q_norm.weight if attn.q_norm is not None else None
        self.k_norm = attn.k_norm.weight if attn.k_norm is not None else None
        self.q, self.k, self.v = (
            (attn.q_proj.weight, attn.q_proj.bias),
            (attn.k_proj.weight, attn.k_proj.bias),
            (attn.v_proj.weight, attn.v_proj.bias),
        )
        self.o = (attn.o_proj.weight, attn.o_proj.bias)
        self.gate, self.up, self.down = ((m.weight, m.bias) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        self.k_buf, self.v_buf = layer_cache["k"], layer_cache["v"]


class PlainDecoder:
    """`decoder(ids)` for ids (B, 1): the next position's logits (B, V), advancing `cache` by one."""

    def __init__(self, model: LanguageModel, cache, layers: list[_Layer]):
        cfg = model.cfg
        self.model, self.cache, self.layers = model, cache, layers
        self.d, self.eps = cfg.d_model, cfg.norm_eps
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.kv_heads, cfg.hd
        self.gqa = self.n_kv != self.n_heads
        half = self.hd // 2
        # rotate_half(x) * sin == roll(x, hd/2) * [-sin_lo, sin_hi]: the sign moves into the table
        # a TransformerLM's rope (the only caller, not named here: its module imports this one)
        cos, sin = cast(RotaryEmbedding, model.rope).tables(0, model.cfg.max_seq_len)
        self.cos, self.sin = cos, torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)

    @classmethod
    def build(cls, model: LanguageModel, cache, block_type: type) -> PlainDecoder | None:
        """The decoder for `model` over `cache` after its prefill, or None when the model has parts
        the decoder does not reproduce (see the module docstring)."""
        if model.training or getattr(model, "anchor", None) is not None or model.embed.max_norm is not None:
            return None
        if any(p.dtype != torch.float32 for p in model.parameters()) or _hooked(model):
            return None
        if not all(_plain_block(b, block_type) for b in model.layers):
            return None
        layer_caches = getattr(cache, "layers", None)
        if layer_caches is None or len(layer_caches) != len(model.layers):
            return None
        for lc in layer_caches:
            bufs = [lc.get("k"), lc.get("v")]
            if not all(
                isinstance(b, SeqBuffer) and b.data is not None and b.dim == 2 and b.length == cache.pos for b in bufs
            ):
                return None
        return cls(model, cache, [_Layer(b, lc) for b, lc in zip(model.layers, layer_caches)])

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        cache = self.cache
        pos = cache.pos
        B = ids.shape[0]
        if ids.shape[1] != 1 or pos >= self.cos.shape[0]:
            raise RuntimeError(
                f"PlainDecoder takes one token within max_seq_len (got {ids.shape[1]} at position {pos})"
            )
        H, KV, hd, d, eps = self.n_heads, self.n_kv, self.hd, self.d, self.eps
        cos, sin = self.cos[pos], self.sin[pos]
        x = F.embedding(ids, self.model.embed.weight).view(B, d)
        for L in self.layers:
            h = F.rms_norm(x, (d,), L.attn_norm, eps)
            q = F.linear(h, *L.q).view(B, H, hd)
            k = F.linear(h, *L.k).view(B, KV, hd)
            if L.q_norm is not None:
                q, k = F.rms_norm(q, (hd,), L.q_norm, eps), F.rms_norm(k, (hd,), L.k_norm, eps)
            qk = torch.cat([q, k], dim=1)
            qk = torch.addcmul(qk * cos, qk.roll(hd // 2, -1), sin)
            k_hist = self._write(L.k_buf, qk[:, H:], pos)
            v_hist = self._write(L.v_buf, F.linear(h, *L.v).view(B, KV, hd), pos)
            o = F.scaled_dot_product_attention(qk[:, :H].unsqueeze(2), k_hist, v_hist, enable_gqa=self.gqa)
            x = x + F.linear(o.reshape(B, H * hd), *L.o)
            h = F.rms_norm(x, (d,), L.mlp_norm, eps)
            x = x + F.linear(F.silu(F.linear(h, *L.gate)) * F.linear(h, *L.up), *L.down)
        cache.pos = pos + 1
        return self.model.head(self.model.norm(x))

    @staticmethod
    def _write(buf: SeqBuffer, x: torch.Tensor, pos: int) -> torch.Tensor:
        """x (B, heads, hd) into the history at `pos`; returns the history (B, heads, pos + 1, hd)."""
        if pos < buf.data.shape[2]:
            buf.data.select(2, pos).copy_(x)
            buf.length = pos + 1
            return buf.data.narrow(2, 0, pos + 1)
        return buf.append(x.unsqueeze(2))  # past the preallocated capacity: grow like the module path
