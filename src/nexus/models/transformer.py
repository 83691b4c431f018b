"""TransformerLM: the Llama-style "Transformer++" baseline every attention variant builds on.

embed -> [pre-norm block: x + attn(norm(x)); x + mlp(norm(x))] * L -> norm -> head

Each block gets its inputs as arguments: the RoPE tables of the positions, the cross-layer anchors
(ExoFormer: projected from the token embeddings; ResFormer / NuResFormer: filled by layer 0) and its
cache. Auxiliary losses (MoE) are read from the layers that computed them (`collect_aux_losses`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config import ModelConfig
from .attention import Attention, component_shapes
from .base import LanguageModel
from .chunked_ce import lm_loss_chunked
from .kinds import attention_kind, mlp_kind
from .layers import RMSNorm, RotaryEmbedding, SwiGLU
from .lm_loss import LMOutput, collect_aux_losses, lm_loss
from .projections import ProjectionFactory, projection_factory
from .width_roles import port, prefixed


def build_attention(cfg: ModelConfig, make_projection: ProjectionFactory, mixer=None) -> nn.Module:
    """The attention of one layer: the config unpacked into plain sizes, flags and collaborators, built
    by the registered attention kind the config selects (models/kinds.py), else standard attention."""
    common = dict(
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.kv_heads,
        head_dim=cfg.hd,
        make_projection=make_projection,
        bias=cfg.attention_bias,
        gate=cfg.attention.gate,
        qk_norm=cfg.qk_norm,
        norm_eps=cfg.norm_eps,
        mixer=mixer,
    )
    kind = attention_kind(cfg)
    return Attention(**common) if kind is None else kind.build(cfg, **common)


def build_mlp(cfg: ModelConfig, make_projection: ProjectionFactory | None = None) -> nn.Module:
    """The MLP of one layer: the registered kind `model.mlp.kind` names, else the dense baseline: SwiGLU, or
    the FFN as one projection of the configured kind when it targets ffn (TokenFormer's Pattention FFN)."""
    make_projection = make_projection or projection_factory(cfg)
    kind = mlp_kind(cfg)
    if kind is not None:
        return kind.build(cfg, make_projection=make_projection)
    if cfg.projection.uses("ffn"):
        return make_projection("ffn", cfg.d_model, cfg.d_model, False)
    return SwiGLU(cfg.d_model, cfg.ffn)


class Block(nn.Module):
    """Pre-norm block; the one place a layer's ModelConfig is unpacked into its parts."""

    def __init__(self, cfg: ModelConfig, make_projection: ProjectionFactory | None = None, mixer=None):
        super().__init__()
        make_projection = make_projection or projection_factory(cfg)
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = build_attention(cfg, make_projection, mixer)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = build_mlp(cfg, make_projection)

    def width_roles(self) -> dict:
        """Width growth: both norms are over the hidden axis; an MLP that is one projection (TokenFormer's
        FFN kind) reads and writes it through its ports (SwiGLU and MoE declare their own roles)."""
        return {
            "attn_norm.weight": {0: ("hidden", "gain")},
            "mlp_norm.weight": {0: ("hidden", "gain")},
            **prefixed("mlp", {**port(self.mlp, "in", "hidden", "in"), **port(self.mlp, "out", "hidden", "out")}),
        }

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        anchors: dict | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope, anchors, cache)
        return x + self.mlp(self.mlp_norm(x))


class TransformerLM(LanguageModel):
    def __init__(self, cfg: ModelConfig):
        # Optional cross-layer anchor machinery (ExoFormer / NuResFormer / value residual): the anchor
        # source, and one mixer per layer handed to its attention at construction.
        anchor, mixers = None, [None] * cfg.n_layers
        if cfg.mixing.anchor != "none":
            from .mixing import build_anchor_mixing

            shapes = component_shapes(cfg.n_heads, cfg.kv_heads, cfg.hd, cfg.attention.gate)
            anchor, mixers = build_anchor_mixing(cfg.mixing, cfg.d_model, shapes, cfg.n_layers, cfg.norm_eps)
        make_projection = projection_factory(cfg)
        super().__init__(cfg, nn.ModuleList(Block(cfg, make_projection, mixers[i]) for i in range(cfg.n_layers)))
        self.rope = RotaryEmbedding(cfg.hd, cfg.max_seq_len, cfg.rope_theta)
        self.anchor = anchor
        self.init_weights()

    # ------------------------------------------------------------------ forward
    def hidden_states(self, input_ids: torch.Tensor, cache=None, collect: bool = False):
        """Run the blocks. Returns (final normed hidden, per-layer residual streams if collect)."""
        T = input_ids.shape[1]
        start = cache.pos if cache is not None else 0
        x = self.embed(input_ids)
        rope = self.rope.tables(start, T)
        anchors = None if self.anchor is None else self.anchor(x, input_ids=input_ids, embed_weight=self.embed.weight)
        states = [x] if collect else None
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, anchors, cache.layer(i) if cache is not None else None)
            if collect:
                states.append(x)
        if cache is not None:
            cache.pos += T
        return self.norm(x), states

    def forward(
        self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, cache=None, return_hidden: bool = False
    ) -> LMOutput:
        """labels[t] is the target of position t (already shifted); IGNORE_INDEX is ignored."""
        h, states = self.hidden_states(input_ids, cache, collect=return_hidden)
        # only training-mode layers store auxiliary losses: skip the module walk when decoding
        aux = collect_aux_losses(self) if self.training else {}
        chunk = self.cfg.loss_chunk_tokens
        if labels is not None and chunk and torch.is_grad_enabled():  # training: the loss without the logits
            out = LMOutput(logits=None, aux_losses=aux, hidden_states=states)
            return lm_loss_chunked(out, h, self.head_weight(), labels, self.cfg.z_loss, chunk, self.cfg.logit_scale)
        out = LMOutput(logits=self.head(h), aux_losses=aux, hidden_states=states)
        if labels is not None:
            lm_loss(out, labels, self.cfg.z_loss)
        return out

    def fast_decoder(self, cache):
        """One-token steps without the module tree (models/decode.py) when every layer is a plain block."""
        from .decode import PlainDecoder

        return PlainDecoder.build(self, cache, Block)

    def flops_per_token(self, seq_len: int) -> float:
        """FLOPs protocol: a tied LM head is a matmul with the embedding table (not an nn.Linear child)."""
        return self.tied_head_flops()
