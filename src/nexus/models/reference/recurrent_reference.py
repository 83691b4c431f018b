"""Slow, obviously-correct NEXUS v4.1 forward used only by tests.

Written from the v4.1 script's pseudo-code with explicit loops: the causal conv is a sum over past tokens
per position, the ternary quantizer is spelled out element by element in numpy-free torch, and the
recurrence / deep supervision follow the v4.1 script's listing line by line. It reads the weights of a
RecurrentLM but none of its methods, so a bug in the fast path cannot hide here too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..lm_loss import IGNORE_INDEX


def ref_rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def ref_ternary(w: torch.Tensor) -> torch.Tensor:
    """Forward value clamp(round(W/gamma))*gamma; gradient straight through to W (the classic idiom)."""
    wd = w.detach()
    gamma = wd.abs().mean().clamp_min(1e-8)
    q = torch.round(wd / gamma)
    q = torch.where(q > 1, torch.ones_like(q), q)
    q = torch.where(q < -1, -torch.ones_like(q), q)
    return w + (q * gamma - w).detach()


def ref_act_quant(x: torch.Tensor) -> torch.Tensor:
    """Per-token absmax 8-bit grid; gradient straight through."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for i in range(rows.shape[0]):
        s = 127.0 / rows[i].abs().max().clamp_min(1e-8)
        out[i] = torch.round(rows[i].detach() * s).clamp(-128, 127) / s
    return x + (out.reshape(x.shape) - x).detach()


def ref_linear(lin, x: torch.Tensor, eps: float, ternary: bool, act_quant: bool, subln: bool) -> torch.Tensor:
    """One block linear as the config defines it (the layer's own flags are not read, so a flag that never
    reaches the layer shows up as a difference): SubLN, then 8-bit activations, then ternary weights."""
    if subln:
        x = ref_rmsnorm(x, None, eps)
    if act_quant:
        x = ref_act_quant(x)
    return x @ (ref_ternary(lin.weight) if ternary else lin.weight).t()


def ref_causal_conv(x: torch.Tensor, conv) -> torch.Tensor:
    """y[t] = b + sum_j w[:, j] * x[t - (k-1) + j], missing (negative) positions are zero."""
    B, T, D = x.shape
    w = conv.conv.weight[:, 0, :]  # (D, k)
    k = w.shape[1]
    y = conv.conv.bias.expand(B, T, D).clone()
    for t in range(T):
        for j in range(k):
            src = t - (k - 1) + j
            if src >= 0:
                y[:, t] = y[:, t] + w[:, j] * x[:, src]
    return y


def ref_block(layer, x: torch.Tensor, eps: float, rc) -> torch.Tensor:
    """x + conv(norm(x)), then + SwiGLU(norm(x)). SubLN (before the down projection only) and 8-bit
    activations are parts of BitNet's layer: with ternary off the linears are plain."""
    x = x + ref_causal_conv(ref_rmsnorm(x, layer.conv_norm.weight, eps), layer.conv)
    h = ref_rmsnorm(x, layer.mlp_norm.weight, eps)
    mlp = layer.mlp
    q = (rc.ternary, rc.ternary and rc.act_quant)
    inner = F.silu(ref_linear(mlp.gate_proj, h, eps, *q, False)) * ref_linear(mlp.up_proj, h, eps, *q, False)
    return x + ref_linear(mlp.down_proj, inner, eps, *q, rc.ternary and rc.subln)


def ref_f(model, z: torch.Tensor) -> torch.Tensor:
    for layer in model.layers:
        z = ref_block(layer, z, model.cfg.norm_eps, model.cfg.arch)
    return z


def ref_head(model, z: torch.Tensor) -> torch.Tensor:
    w = model.embed.weight if model.lm_head is None else model.lm_head.weight
    return ref_rmsnorm(z, model.norm.weight, model.cfg.norm_eps) @ w.t()


def ref_logits(model, ids: torch.Tensor, n_sup: int, t_inner: int) -> torch.Tensor:
    """Inference: the full recurrence, N_sup * T_inner applications of f on z + x."""
    x = model.embed.weight[ids]
    z = torch.zeros_like(x)
    for _ in range(n_sup * t_inner):
        z = ref_f(model, z + x)
    return ref_head(model, z)


def ref_deep_supervision_loss(model, ids: torch.Tensor, labels: torch.Tensor, n_sup: int, t_inner: int) -> torch.Tensor:
    """The v4.1 script's training listing, verbatim in structure."""
    x = model.embed.weight[ids]
    z = torch.zeros_like(x)
    loss = torch.zeros(())
    for _ in range(n_sup):
        with torch.no_grad():
            for _ in range(t_inner - 1):
                z = ref_f(model, z + x)
        z = ref_f(model, z + x)
        logits = ref_head(model, z)
        loss = loss + F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
        )
        z = z.detach()
    return loss
