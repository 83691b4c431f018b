"""OLMoE-style mixture-of-experts MLP: token-choice top-k routing over SwiGLU experts.

    probs = softmax(x W_r^T)            (fp32, over all experts)
    y     = sum_{e in topk(probs)} probs_e * expert_e(x)      (no renormalisation, as in OLMoE)

Auxiliary losses (each forward in training mode stores them in `aux_losses_out`; the LM adds them once
to its loss, averaged over layers):
  * load balancing (Switch / OLMoE): E * sum_e f_e * P_e, f_e = share of routed slots that went to
    expert e, P_e = mean router probability of e;
  * router z-loss (ST-MoE): mean over tokens of logsumexp(logits)^2.

Experts are a ModuleList of SwiGLU so each expert matrix is an ordinary 2-D parameter: Muon
orthogonalizes each expert on its own and width growth addresses experts by name.
The fast forward groups tokens by expert (one matmul per expert); `reference/moe_ref.py` is the
per-token loop it is tested against.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn

from ..config import ModelConfig
from ..kind_options.moe import expert_hidden
from .kinds import MLP_KINDS, LayerKind
from .layers import SwiGLU
from .lm_loss import AuxLossModule
from .width_roles import port, prefixed


class MoEMLP(AuxLossModule):
    def __init__(
        self,
        d_model: int,
        n_experts: int,
        top_k: int,
        hidden: int,
        lb_coef: float = 0.0,
        z_coef: float = 0.0,
        n_layers: int = 1,
    ):
        """hidden: inner size of one expert; lb_coef / z_coef weigh the aux losses, which are averaged
        over the model's n_layers MoE layers."""
        super().__init__()
        self.n_experts, self.top_k = n_experts, top_k
        self.lb_coef, self.z_coef = lb_coef, z_coef
        self.n_layers = n_layers
        self.hidden = hidden
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d_model, hidden) for _ in range(n_experts))

    def width_roles(self) -> dict:
        """Width growth: the router reads the hidden axis; each expert is a SwiGLU over expert_inner."""
        roles = prefixed("router", port(self.router, "in", "hidden", "in"))
        for i, expert in enumerate(self.experts):  # ModuleList is not generic: its items are the SwiGLUs built above
            roles.update(prefixed(f"experts.{i}", cast(SwiGLU, expert).width_roles("expert_inner")))
        return roles

    def route(self, x2: torch.Tensor):
        """x2 (N, d) -> (logits (N,E) fp32, probs (N,E), top-k weights (N,k), top-k expert ids (N,k))."""
        logits = self.router(x2).float()
        probs = logits.softmax(dim=-1)
        weights, idx = probs.topk(self.top_k, dim=-1)
        return logits, probs, weights, idx

    def aux_losses(self, logits: torch.Tensor, probs: torch.Tensor, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        counts = torch.zeros(self.n_experts, device=probs.device, dtype=probs.dtype)
        counts.scatter_add_(0, idx.reshape(-1), torch.ones(idx.numel(), device=probs.device, dtype=probs.dtype))
        frac = counts / max(idx.numel(), 1)  # f_e: share of routed (token, slot) pairs
        lb = self.n_experts * (frac * probs.mean(dim=0)).sum()
        z = torch.logsumexp(logits, dim=-1).pow(2).mean()
        return {"moe_lb": self.lb_coef * lb / self.n_layers, "moe_z": self.z_coef * z / self.n_layers}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        logits, probs, weights, idx = self.route(x2)
        out = torch.zeros_like(x2)
        flat_expert = idx.reshape(-1)
        flat_token = torch.arange(x2.shape[0], device=x.device).repeat_interleave(self.top_k)
        flat_weight = weights.reshape(-1)
        order = flat_expert.argsort(stable=True)  # group the routed slots by expert
        counts = torch.bincount(flat_expert, minlength=self.n_experts).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            sel = order[start : start + n]
            start += n
            tok = flat_token[sel]
            y = self.experts[e](x2.index_select(0, tok)) * flat_weight[sel].unsqueeze(-1).to(x.dtype)
            out.index_add_(0, tok, y)
        self.aux_losses_out = self.aux_losses(logits, probs, idx) if self.training else {}
        return out.reshape(shape)

    # Only top_k of n_experts run per token, so the experts' nn.Linear children must not be summed
    # by a generic walker (it would over-count by n_experts/top_k): this module reports the whole
    # active path itself and tells the walker to skip its children.
    flops_include_children = True

    def flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token of the ACTIVE path: router, softmax, top_k SwiGLU experts, weighting."""
        d, h, k = self.router.in_features, self.hidden, self.top_k
        router = 2 * d * self.n_experts + 5 * self.n_experts  # matmul + softmax (exp, sum, div) + top-k compare
        expert = 2 * d * h * 3 + 4 * h  # gate/up/down matmuls + silu (~3 ops) and the gate*up product
        return float(router + k * (expert + 2 * d))  # + scaling by the router weight and accumulation


def _build(cfg: ModelConfig, **common) -> MoEMLP:
    m = cfg.mlp
    return MoEMLP(cfg.d_model, m.n_experts, m.top_k, expert_hidden(cfg), m.lb_loss_coef, m.router_z_coef, cfg.n_layers)


# its options and parameter count: kind_options/moe.py
MLP_KINDS.register("moe")(LayerKind(_build))
