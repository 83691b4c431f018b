"""What every nexus language model shares, whatever runs between embedding and head.

    embed -> (the family's layers) -> norm -> head (tied to the embedding or its own Linear)

`LanguageModel` owns the token embedding, the final norm, the LM head, the loss (`lm_loss`: CE +
z-loss + auxiliary losses, without a host sync), the global init, `new_cache` and `generate`.
TransformerLM and RecurrentLM subclass it, build their layer stack and supply `forward`.
"""

from __future__ import annotations

from typing import Protocol, cast

import torch
import torch.nn as nn

from ..config import ModelConfig
from .layers import RMSNorm


class _SpecialInit(Protocol):  # a module with its own init, run after the global one (init_weights)
    def reset_special_parameters(self) -> None: ...


class LanguageModel(nn.Module):
    def __init__(self, cfg: ModelConfig, layers: nn.ModuleList):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = layers
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def width_roles(self) -> dict:
        """Width growth (models/width_roles.py): the embedding writes the hidden axis, the head reads it."""
        roles = {"embed.weight": {1: ("hidden", "out")}, "norm.weight": {0: ("hidden", "gain")}}
        if self.lm_head is not None:
            roles["lm_head.weight"] = {1: ("hidden", "in")}
        return roles

    # ------------------------------------------------------------------ init
    def init_weights(self) -> None:
        """Global init. Modules with a special init (e.g. zero-initialized dynamic mixing) define
        `reset_special_parameters()`, which runs *after* the global pass so it is never overwritten."""
        if any(p.is_meta for p in self.parameters()):
            return  # a model on the meta device has no values to draw (parameter accounting): skip the slow no-ops
        for m in self.modules():
            self.init_module(m)
        if self.lm_head is not None and self.cfg.zero_init_head:
            nn.init.zeros_(self.lm_head.weight)
        for m in self.modules():
            if m is not self and hasattr(m, "reset_special_parameters"):
                # the cast is the hasattr: mypy cannot narrow a Module by it (__getattr__ types all as Tensor | Module)
                cast(_SpecialInit, m).reset_special_parameters()

    def init_module(self, m: nn.Module) -> None:
        """The global init of one module (in module order, so the random draws keep their order)."""
        std = self.cfg.init_std
        if isinstance(m, nn.Linear):  # includes BitLinear: its latent weights start like any matrix
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
            if self.cfg.zero_init_out and getattr(m, "_nexus_out_proj", False):
                nn.init.zeros_(m.weight)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, RMSNorm) and m.weight is not None:
            nn.init.ones_(m.weight)

    # ------------------------------------------------------------------ head
    def head_weight(self) -> torch.Tensor:
        """The (vocab, d_model) matrix of the LM head: the embedding's when tied."""
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits of the final-normed hidden states h."""
        w = self.head_weight()
        if self.cfg.logit_scale != 1.0:  # width growth's compensating coefficient for a tied head
            return (h @ w.t()) * self.cfg.logit_scale
        return h @ w.t()

    def tied_head_flops(self) -> float:
        """FLOPs per token of a tied head: a matmul with the embedding table (the walker counts an
        Embedding as 0 and an untied head as its Linear child)."""
        return 2.0 * self.cfg.d_model * self.cfg.vocab_size if self.lm_head is None else 0.0

    # ------------------------------------------------------------------ generation
    def new_cache(self):
        from .cache import KVCache

        return KVCache(len(self.layers))

    def fast_decoder(self, cache):
        """A callable doing one cached decode step (ids (B, 1) -> logits (B, V)) faster than the module
        forward, for `cache` after its prefill; None (the default) keeps the module forward."""
        return None

    @torch.no_grad()
    def generate(
        self,
        input_ids,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        eos_id: int | None = None,
        generator: torch.Generator | None = None,
    ):
        from .generate import generate

        return generate(self, input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, generator)
