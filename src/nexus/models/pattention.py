"""TokenFormer's Pattention: a projection whose weights are n learnable parameter tokens.

    scores = x K_P^T                     (K_P: n x d_in, the key tokens)
    gelu_l2: w = GELU(scores / ||scores||_2 * tau),  tau = sqrt(n)   (TokenFormer's modified softmax)
    softmax: w = softmax(scores / sqrt(d_in))                         (the plain-attention variant)
    y = w V_P                            (V_P: n x d_out, the value tokens)

Growth appends tokens. With zero new keys the new scores are 0, GELU(0) = 0 and the L2 norm of the
score row is unchanged, so the old outputs survive -- *if* tau stays sqrt(n_old). `frozen_n`
pins tau at the pre-growth count; without it growth rescales every old score (not exact).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .projections import PROJECTIONS, ProjectionKind

L2_EPS = 1e-6  # keeps a zero score row finite


class Pattention(nn.Module):
    def __init__(
        self,
        d_in: int,
        d_out: int,
        n_tokens: int,
        act: str = "gelu_l2",
        frozen_n: int = 0,
        bias: bool = False,
        init_std: float = 0.02,
    ):
        super().__init__()
        self.d_in, self.d_out, self.n_tokens, self.act = d_in, d_out, n_tokens, act
        self.key_tokens = nn.Parameter(torch.empty(n_tokens, d_in))
        self.value_tokens = nn.Parameter(torch.empty(n_tokens, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        self.frozen_n = frozen_n  # 0: tau follows n (grows with it); > 0: tau = sqrt(frozen_n)
        self.init_std = init_std
        self.reset_special_parameters()

    def width_refusal(self, spec) -> str:
        return (
            "Pattention projections (model.projection.kind='pattention') do not take width growth "
            "(valid: linear or nexus_rank projections; grow Pattention with --add-tokens)"
        )

    @property
    def tau(self) -> float:
        return math.sqrt(self.frozen_n or self.n_tokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x @ self.key_tokens.t()
        if self.act == "softmax":
            w = torch.softmax(s / math.sqrt(self.d_in), dim=-1)
        else:
            w = F.gelu(s * (self.tau / (s.norm(dim=-1, keepdim=True) + L2_EPS)))
        y = w @ self.value_tokens
        return y + self.bias if self.bias is not None else y

    def reset_special_parameters(self) -> None:
        # Parameters, not nn.Linear, so the global init pass does not reach them: TokenFormer inits
        # both token sets with a small normal, like ordinary weights.
        nn.init.normal_(self.key_tokens, std=self.init_std)
        nn.init.normal_(self.value_tokens, std=self.init_std)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def flops_per_token(self, seq_len: int) -> float:
        """Two matmuls per token: scores (2 n d_in) and the weighted sum of value tokens (2 n d_out)."""
        return 2.0 * self.n_tokens * (self.d_in + self.d_out)

    def extra_repr(self) -> str:
        return (
            f"{self.d_in}->{self.d_out}, tokens={self.n_tokens}, act={self.act}, "
            f"tau=sqrt({self.frozen_n or self.n_tokens})"
        )


def make_pattention(cfg: ModelConfig, target: str, d_in: int, d_out: int, bias: bool) -> Pattention:
    p = cfg.projection
    frozen = cfg.pinned(p.pin_of(target)) if p.freeze_scale else 0
    return Pattention(d_in, d_out, p.tokens(target, cfg), p.pattention_act, frozen, bias, cfg.init_std)


PROJECTIONS.register("pattention")(ProjectionKind(make_pattention))


def pattention_modules(model: nn.Module) -> dict[str, Pattention]:
    return {n: m for n, m in model.named_modules() if isinstance(m, Pattention)}
