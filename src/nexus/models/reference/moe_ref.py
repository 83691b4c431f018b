"""Slow, obviously-correct MoE forward: one token at a time, experts called one by one.

Used only by tests to hold `MoEMLP.forward` (grouped by expert) to the definition.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def moe_forward_reference(moe, x: torch.Tensor) -> torch.Tensor:
    """y_t = sum over the top-k experts e of softmax(router(x_t))_e * SwiGLU_e(x_t)."""
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    rows = []
    for t in range(flat.shape[0]):
        xt = flat[t]
        probs = torch.softmax(moe.router.weight.float() @ xt.float(), dim=-1)
        chosen = sorted(range(moe.n_experts), key=lambda e: -float(probs[e].detach()))[: moe.top_k]
        y = torch.zeros_like(xt)
        for e in chosen:
            ex = moe.experts[e]
            h = F.silu(ex.gate_proj.weight @ xt) * (ex.up_proj.weight @ xt)
            y = y + probs[e].to(xt.dtype) * (ex.down_proj.weight @ h)
        rows.append(y)
    return torch.stack(rows).reshape(shape)


@torch.no_grad()
def moe_aux_reference(moe, x: torch.Tensor) -> tuple[float, float]:
    """(load-balancing loss, router z-loss) before weighting, from explicit per-token counts."""
    flat = x.reshape(-1, x.shape[-1]).float()
    logits = flat @ moe.router.weight.float().t()
    probs = torch.softmax(logits, dim=-1)
    n, E = probs.shape
    counts = [0] * E
    for t in range(n):
        for e in sorted(range(E), key=lambda e: -float(probs[t, e]))[: moe.top_k]:
            counts[e] += 1
    lb = E * sum(counts[e] / (n * moe.top_k) * float(probs[:, e].mean()) for e in range(E))
    z = float(sum(float(torch.logsumexp(logits[t], 0)) ** 2 for t in range(n)) / n)
    return lb, z
