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
from .attention import Attention
from .base import LanguageModel
from .layers import RMSNorm, RotaryEmbedding, SwiGLU
from .output import LMOutput, collect_aux_losses, lm_loss


def build_attention(cfg: ModelConfig, layer_idx: int) -> nn.Module:
    """Pick the attention class for a layer from the config."""
    if cfg.attention.order > 1:
        from .higher_order import HigherOrderAttention

        return HigherOrderAttention(cfg, layer_idx)
    return Attention(cfg, layer_idx)


def build_mlp(cfg: ModelConfig, layer_idx: int) -> nn.Module:
    if cfg.moe.n_experts > 0:
        from .moe import MoEMLP

        return MoEMLP(cfg)
    if cfg.projection.uses("ffn"):
        from .projections import make_projection

        return make_projection(cfg, "ffn", cfg.d_model, cfg.d_model, False)
    return SwiGLU(cfg.d_model, cfg.ffn)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = build_attention(cfg, layer_idx)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = build_mlp(cfg, layer_idx)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], anchors: dict | None = None,
                cache: dict | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope, anchors, cache)
        return x + self.mlp(self.mlp_norm(x))


class TransformerLM(LanguageModel):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.rope = RotaryEmbedding(cfg.hd, cfg.max_seq_len, cfg.rope_theta)
        # Optional cross-layer anchor machinery (ExoFormer / NuResFormer / value residual).
        self.anchor = None
        if cfg.mixing.anchor != "none":
            from .mixing import install_anchor_mixing

            install_anchor_mixing(self, cfg)
        self.init_weights()

    def build_layers(self, cfg: ModelConfig) -> nn.ModuleList:
        return nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))

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

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, cache=None,
                return_hidden: bool = False) -> LMOutput:
        """labels[t] is the target of position t (already shifted); IGNORE_INDEX is ignored."""
        h, states = self.hidden_states(input_ids, cache, collect=return_hidden)
        logits = self.head(h)
        # only training-mode layers store auxiliary losses: skip the module walk when decoding
        aux = collect_aux_losses(self) if self.training else {}
        out = LMOutput(logits=logits, aux_losses=aux, hidden_states=states)
        if labels is not None:
            lm_loss(out, labels, self.cfg.z_loss)
        return out

    def flops_per_token(self, seq_len: int) -> float:
        """FLOPs protocol: a tied LM head is a matmul with the embedding table (not an nn.Linear child)."""
        return self.tied_head_flops()
