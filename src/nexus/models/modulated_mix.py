"""The ExoFormer mixing of one component as a single autograd Function:

    out = (l1 * g1) * anchor + (l2 * g2) * current        (paper, eq. 7; eq. 1 when g1 = g2 = 1)

with current/anchor (B, T, heads, width), coefficients l (heads or 1, width or 1) and per-token
factors g (B, T, 1, 1) or None.

Two implementations: `ModulatedMix` here (eager torch ops, one component, any device or dtype) and
`FusedMix` (models/fused_mix.py: a whole layer, dynamic-mixing MLP included, in one autograd node
over fused CPU kernels). `mix_layer` takes the fused one for CPU float32/float64 tensors outside
torch.compile when numba is installed, the eager one otherwise.

ModulatedMix is written by hand rather than left to autograd because the op is memory-bound and runs
for up to four components in every layer. Autograd's version keeps the products l * S alive for the backward and
spends one full-size multiply plus one reduction per factor there. Here each side (anchor, current)
forms grad * S once, and both its per-channel (l) and per-token (g) gradients come out of that
one product by matrix-vector products. The forward saves only the inputs. Both are held to autograd
on eq. 7 (and gradcheck) in tests/test_exoformer.py.
"""

from __future__ import annotations

import torch

from . import fused_mix


class ModulatedMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, current, anchor, l1, l2, g1, g2):
        out = current * l2
        if g2 is not None:
            out.mul_(g2)
        if anchor is not None:
            if g1 is None:
                out.addcmul_(anchor, l1)
            else:
                out.addcmul_(anchor * l1, g1)
        ctx.save_for_backward(current, anchor, l1, l2, g1, g2)
        return out

    @staticmethod
    def backward(ctx, grad):
        current, anchor, l1, l2, g1, g2 = ctx.saved_tensors
        need_cur, need_anc, need_l1, need_l2, need_g1, need_g2 = ctx.needs_input_grad
        # v's gradient arrives as a transposed view of attention's (B, heads, T, width) layout
        grad = grad.contiguous()
        d_cur, d_l2, d_g2 = _side_grads(grad, current, l2, g2, need_cur, need_l2, need_g2)
        d_anc = d_l1 = d_g1 = None
        if anchor is not None:
            d_anc, d_l1, d_g1 = _side_grads(grad, anchor, l1, g1, need_anc, need_l1, need_g1)
        return d_cur, d_anc, d_l1, d_l2, d_g1, d_g2


def _side_grads(grad, x, lam, gam, need_x: bool, need_lam: bool, need_gam: bool):
    """Gradients of sum(grad * (lam * gam) * x) with respect to x, lam and gam."""
    B, T, H, W = grad.shape
    d_x = d_lam = d_gam = None
    if need_x:
        d_x = grad * lam
        if gam is not None:
            d_x.mul_(gam)
    if need_lam or need_gam:
        gx = (grad * x).reshape(B * T, H * W)  # the one full-size product both reductions share
        if need_lam:
            per_channel = gx.sum(0) if gam is None else gam.reshape(1, B * T).to(gx.dtype) @ gx
            d_lam = per_channel.reshape(H, W).sum_to_size(lam.shape)
        if need_gam:
            lam_full = lam.to(gx.dtype).expand(H, W).reshape(H * W, 1)
            d_gam = (gx @ lam_full).reshape(gam.shape)
    return d_x, d_lam, d_gam


def modulated_mix(
    current: torch.Tensor,
    anchor: torch.Tensor | None,
    l1: torch.Tensor,
    l2: torch.Tensor,
    g1: torch.Tensor | None = None,
    g2: torch.Tensor | None = None,
) -> torch.Tensor:
    """(l1 * g1) * anchor + (l2 * g2) * current; anchor None drops the anchor term (anchor removal)."""
    return ModulatedMix.apply(current, anchor, l1, l2, g1, g2)


def mix_layer(
    currents: list[torch.Tensor],
    anchors: list[torch.Tensor] | None,
    l1s: list[torch.Tensor],
    l2s: list[torch.Tensor],
    coef_shapes: list[tuple[int, int]],
    x: torch.Tensor,
    dynamic,
    cols: list[tuple[int, int]],
) -> list[torch.Tensor]:
    """Mix every component of one layer: currents[i] (B, T, heads, width) with anchors[i] (None drops
    every anchor term: anchor removal) by the flat coefficients l1s[i], l2s[i] (viewed as
    coef_shapes[i]) and, with `dynamic` (the layer's DynamicMixing, eq. 6, read on x), the per-token
    factors gamma[..., cols[i]]; without it the factors are 1."""
    weights = (dynamic.fc1.weight, dynamic.fc2.weight, dynamic.fc2.bias) if dynamic is not None else ()
    if fused_mix.usable([x, *currents, *(anchors or ()), l1s[0], l2s[0], *weights[:1]]):
        return list(
            fused_mix.FusedMix.apply(
                x,
                dynamic,
                tuple(cols),
                tuple(coef_shapes),
                anchors is not None,
                *weights,
                *currents,
                *(anchors or ()),
                *l1s,
                *l2s,
            )
        )
    gamma = dynamic(x) if dynamic is not None else None  # (B, T, 8)
    outs = []
    for i, (cur, l1, l2, shape, (i1, i2)) in enumerate(zip(currents, l1s, l2s, coef_shapes, cols)):
        g1 = g2 = None
        if gamma is not None:
            g1, g2 = gamma[..., i1, None, None], gamma[..., i2, None, None]  # (B, T, 1, 1)
        outs.append(
            modulated_mix(cur, anchors[i] if anchors is not None else None, l1.view(shape), l2.view(shape), g1, g2)
        )
    return outs
