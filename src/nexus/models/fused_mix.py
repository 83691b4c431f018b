"""One layer's ExoFormer mixing (eq. 7) and its dynamic-mixing MLP (eq. 6) as a single autograd node
over the fused CPU kernels of mix_kernels.py:

    gamma = sigmoid(GELU(x W1) W2 + b)                                  (eq. 6; omitted when static)
    out_i = (l1_i * gamma[:, i1]) * anchor_i + (l2_i * gamma[:, i2]) * current_i    (eq. 7, per component)

Why one node: at the benchmark's shapes a training step spends about as long on each small autograd
node and torch call as on a kernel pass over a component, and the eager form gives every layer some
forty nodes (the MLP's four, a view per coefficient, a select and unsqueezes per factor, one mixing
node per component). Here the MLP's stages are computed inside the node (the same torch calls as
DynamicMixing.stages) with a hand-written backward, the coefficients enter flat as they are stored,
and gamma never leaves the node. `mix_layer` in modulated_mix.py picks this path; it is held to the
eager path and to a reference written from eq. 6-7 in tests/test_exoformer.py.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import mix_kernels


def usable(tensors: list[torch.Tensor]) -> bool:
    """CPU float32/float64 tensors of one dtype, outside torch.compile, with numba installed. Callers
    pass the activations and one tensor of each kind of parameter: a model's parameters share one
    dtype and device, and autocast changes the activations'."""
    dtype = tensors[0].dtype
    return (
        dtype in (torch.float32, torch.float64)
        and all(t.is_cpu and t.dtype == dtype for t in tensors)
        and _ENABLED
        and not torch.compiler.is_compiling()
        and mix_kernels.available()
    )


def enabled() -> bool:
    return _ENABLED


def set_enabled(flag: bool) -> None:
    """Switch the fused path off (False) to run the eager one everywhere: tests hold the two together."""
    global _ENABLED
    _ENABLED = flag


_ENABLED = True


class FusedMix(torch.autograd.Function):
    """apply(x, dynamic, cols, coef_shapes, has_anchor, [W1, W2, b], *currents, *anchors, *l1s, *l2s)

    x (B, T, d) the layer's pre-normed input; dynamic its DynamicMixing, or None for factors of 1
    (then W1, W2, b are not passed); currents/anchors (B, T, heads, width); l1s/l2s flat
    coefficients viewed as coef_shapes[i]; component i reads factors cols[i] = (i1, i2) of gamma."""

    @staticmethod
    def forward(ctx, x, dynamic, cols, coef_shapes, has_anchor, *tensors):
        n = len(cols)
        weights, tensors = (tensors[:3], tensors[3:]) if dynamic is not None else ((), tensors)
        currents = [t.contiguous() for t in tensors[:n]]  # projections are already contiguous
        anchors = [t.contiguous() for t in tensors[n : 2 * n]] if has_anchor else currents
        l1s, l2s = tensors[-2 * n : -n], tensors[-n:]
        B, T = currents[0].shape[:2]
        if dynamic is not None:
            h, a, gamma = dynamic.stages(x)  # grad is off inside forward: plain tensors
            gam = gamma.reshape(B * T, -1)
        else:
            h = a = None
            gam, cols = torch.ones(B * T, 2, dtype=x.dtype), ((0, 1),) * n
        gam_np = gam.numpy()
        # numpy views of what the backward reads, made once, as one tuple per kind (the layer kernel's
        # arguments); the tensors also go to save_for_backward, for autograd's check that nothing
        # modified them in place
        arrays = (
            tuple(c.detach().numpy() for c in currents),
            tuple(an.detach().numpy() for an in anchors),
            tuple(_coef(l1, s, c) for l1, s, c in zip(l1s, coef_shapes, currents)),
            tuple(_coef(l2, s, c) for l2, s, c in zip(l2s, coef_shapes, currents)),
        )
        outs = tuple(torch.empty_like(cur) for cur in currents)
        mix_kernels.forward_layer_kernel()(
            *arrays, gam_np, _cols_array(cols), has_anchor, tuple(o.numpy() for o in outs)
        )
        ctx.n, ctx.cols, ctx.coef_shapes, ctx.has_anchor, ctx.arrays, ctx.gam_np = (
            n,
            cols,
            coef_shapes,
            has_anchor,
            arrays,
            gam_np,
        )
        ctx.dynamic = dynamic is not None
        ctx.save_for_backward(x, h, a, gam, *weights, *currents, *(anchors if has_anchor else ()), *l1s, *l2s)
        return outs

    # the body is a plain function because mutmut does not mutate decorated functions
    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        return _backward(ctx, grads)


def _backward(ctx, grads):
    """FusedMix.backward's body: the layer kernel's gradients, then eq. 6's MLP backward for dynamic mixing."""
    x, h, a, gam, *tensors = ctx.saved_tensors
    n, has_anchor = ctx.n, ctx.has_anchor
    weights, tensors = (tensors[:3], tensors[3:]) if ctx.dynamic else ((), tensors)
    currents = tensors[:n]
    d_gam = torch.zeros(gam.shape, dtype=gam.dtype)  # each component writes its two columns
    d_gam_np = d_gam.numpy()
    grads_np, head_major = [], np.zeros(n, dtype=np.bool_)
    for i, grad in enumerate(grads):
        if not grad.is_contiguous():  # q and k come back from attention as views of a (B, heads, T, width) tensor
            grad = grad.transpose(1, 2)
            head_major[i] = grad.is_contiguous()
            if not head_major[i]:
                grad = grad.transpose(1, 2).contiguous()
        grads_np.append(grad.numpy())
    d_cur = [torch.empty_like(cur) for cur in currents]
    d_anc = [torch.empty_like(cur) for cur in currents] if has_anchor else d_cur
    d_ls = [torch.zeros((2, *cur.shape[2:]), dtype=cur.dtype) for cur in currents]  # accumulated into
    mix_kernels.backward_layer_kernel()(
        tuple(grads_np),
        head_major,
        *ctx.arrays,
        ctx.gam_np,
        _cols_array(ctx.cols),
        has_anchor,
        tuple(t.numpy() for t in d_cur),
        tuple(t.numpy() for t in d_anc),
        tuple(t.numpy() for t in d_ls),
        d_gam_np,
    )
    d_l1 = [
        _flat_grad(dl[0], s) if has_anchor else None for dl, s in zip(d_ls, ctx.coef_shapes)
    ]  # l1 is unused without the anchor
    d_l2 = [_flat_grad(dl[1], s) for dl, s in zip(d_ls, ctx.coef_shapes)]
    d_x = d_weights = ()
    if ctx.dynamic:  # eq. 6 backward: sigmoid, the second Linear, GELU, the first Linear
        W1, W2, b = weights
        x2, h2, a2 = (t.reshape(d_gam.shape[0], -1) for t in (x, h, a))
        dz, da = torch.empty_like(d_gam), torch.empty_like(h2)
        d_W2, d_b = torch.zeros_like(W2), torch.zeros_like(b)
        mix_kernels.gate_backward_kernel()(
            d_gam_np, ctx.gam_np, a2.numpy(), W2.detach().numpy(), dz.numpy(), da.numpy(), d_W2.numpy(), d_b.numpy()
        )
        dh = torch.ops.aten.gelu_backward(da, h2)
        d_weights = (dh.t() @ x2, d_W2, d_b)
        d_x = (dh @ W1).view(x.shape)
    out = (
        d_x if ctx.dynamic else None,
        None,
        None,
        None,
        None,
        *d_weights,
        *d_cur,
        *(d_anc if has_anchor else ()),
        *d_l1,
        *d_l2,
    )
    return tuple(g if need else None for g, need in zip(out, ctx.needs_input_grad, strict=True))


def _build_cols_array(cols: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The layer kernel's (n, 2) table of factor columns; a layer's cols never change, so made once."""
    table = np.asarray(cols, dtype=np.int64).reshape(len(cols), 2)
    table.flags.writeable = False
    return table


# cached by a call, not a decorator, because mutmut does not mutate decorated functions
_cols_array = functools.cache(_build_cols_array)


def _coef(lam: torch.Tensor, shape: tuple[int, int], like: torch.Tensor):
    """A flat coefficient stored as `shape` (heads or 1, width or 1), as the kernel's (heads, width) array."""
    full = like.shape[2:]
    lam = lam.detach().view(shape)
    return (lam if lam.shape == full else lam.expand(full).contiguous()).numpy()


def _flat_grad(grad: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """(heads, width) gradient summed to a headwise or scalar coefficient's shape, flat as stored."""
    return (grad if grad.shape == shape else grad.sum_to_size(shape)).reshape(-1)
