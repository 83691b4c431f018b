"""The mixture-of-experts MLP's parameter count (its options: `model.moe`, config.py; the module:
models/moe.py)."""
from __future__ import annotations

from ..config import ModelConfig


def expert_hidden(cfg: ModelConfig) -> int:
    """Inner size of one expert (moe.expert_hidden, default ffn // top_k so active FFN size matches dense)."""
    return cfg.moe.expert_hidden or max(cfg.ffn // cfg.moe.top_k, 1)


def params(cfg: ModelConfig, base: int) -> int:
    """The router (E, d) and E SwiGLU experts (gate, up, down: 3 * d * expert_hidden each)."""
    return cfg.d_model * cfg.moe.n_experts + cfg.moe.n_experts * 3 * cfg.d_model * expert_hidden(cfg)
