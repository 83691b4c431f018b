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


class TransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.rope = RotaryEmbedding(cfg.hd, cfg.max_seq_len, cfg.rope_theta)
        # Optional cross-layer anchor machinery (ExoFormer / NuResFormer / value residual).
        self.anchor = None
        if cfg.mixing.anchor != "none":
            from .mixing import install_anchor_mixing

            install_anchor_mixing(self, cfg)
        self.init_weights()

    # ------------------------------------------------------------------ init
    def init_weights(self) -> None:
        """Global init. Modules with a special init (e.g. zero-initialized dynamic mixing) define
        `reset_special_parameters()`, which runs *after* the global pass so it is never overwritten."""
        std = self.cfg.init_std
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
                if self.cfg.zero_init_out and getattr(m, "_nexus_out_proj", False):
                    nn.init.zeros_(m.weight)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=std)
            elif isinstance(m, RMSNorm) and m.weight is not None:
                nn.init.ones_(m.weight)
        if self.lm_head is not None and self.cfg.zero_init_head:
            nn.init.zeros_(self.lm_head.weight)
        for m in self.modules():
            if m is not self and hasattr(m, "reset_special_parameters"):
                m.reset_special_parameters()

    # ------------------------------------------------------------------ forward
    def head(self, h: torch.Tensor) -> torch.Tensor:
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        if self.cfg.logit_scale != 1.0:  # width growth's compensating coefficient for a tied head
            return (h @ w.t()) * self.cfg.logit_scale
        return h @ w.t()

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
        return 2.0 * self.cfg.d_model * self.cfg.vocab_size if self.lm_head is None else 0.0

    def new_cache(self):
        from .generate import KVCache

        return KVCache(len(self.layers))

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens: int = 64, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, eos_id: int | None = None, generator: torch.Generator | None = None):
        from .generate import generate

        return generate(self, input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, generator)
