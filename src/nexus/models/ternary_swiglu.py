"""One decoded token through a packed ternary SwiGLU in a single numba call:

    h = silu(gamma_g * x @ Cg^T) * (gamma_u * x @ Cu^T)
    h = h * rsqrt(mean(h^2) + eps)            only when the down projection has SubLN (input_norm)
    y = gamma_d * h @ Cd^T

Why hand-written: at batch 1 each of the three packed matmuls is ~0.1 ms, and the torch glue around
them (three kernel wrappers, silu, the product and the six ops of the SubLN norm) cost about as much again
on an AVX2 CPU, where it decided whether nexus-tiny decodes 2x faster than fp32 (issue 41). Fusing
the MLP also lets the int8 form read x once for a gate row and its up row (~10% faster, measured). \
No library fuses a ternary SwiGLU on the CPU.

The same per-row dot products as ternary_kernels.py (int8 codes, or the 2-bit planes with the
sum x_k u_k - sum x_k trick), so outputs agree with the three separate calls and with the dense fp32
path to fp32 summation-order rounding (tests hold both). Used for one row (decoding) only: a prompt
goes through the tiled kernels of ternary_kernels.py.
"""

from __future__ import annotations

import numpy as np
import torch

from .numba_jit import compiled_lazily


def _define(jit):
    @jit
    def dot_int8(x, row):
        a = np.float32(0.0)
        for k in range(row.shape[0]):
            a += x[k] * np.float32(row[k])
        return a

    @jit
    def dot2_int8(x, row_a, row_b):
        """Two rows against one x in one pass: each x_k is loaded once for the gate and the up row."""
        a = np.float32(0.0)
        b = np.float32(0.0)
        for k in range(row_a.shape[0]):
            a += x[k] * np.float32(row_a[k])
            b += x[k] * np.float32(row_b[k])
        return a, b

    @jit
    def dot_planes(x, row, xsum):
        """sum_k x_k c_k for one row of the 2-bit plane layout (ternary_kernels.py), x zero-padded to 4 K4."""
        k4 = row.shape[0]
        acc = np.float32(0.0)
        for q in range(4):
            shift = np.uint8(2 * q)
            a = np.float32(0.0)
            for j in range(k4):
                a += x[q * k4 + j] * np.float32((row[j] >> shift) & np.uint8(3))
            acc += a
        return acc - xsum

    @jit
    def finish_hidden(h, n_hidden, subln, eps):
        if subln:
            ss = np.float32(0.0)
            for n in range(n_hidden):
                ss += h[n] * h[n]
            r = np.float32(1.0) / np.sqrt(ss / np.float32(n_hidden) + np.float32(eps))
            for n in range(n_hidden):
                h[n] = h[n] * r

    @jit
    def swiglu_int8(x, cg, gg, cu, gu, cd, gd, subln, eps, h, out):
        for n in range(cg.shape[0]):
            a, b = dot2_int8(x, cg[n], cu[n])
            a *= gg
            b *= gu
            h[n] = a / (np.float32(1.0) + np.exp(-a)) * b
        finish_hidden(h, cg.shape[0], subln, eps)
        for n in range(cd.shape[0]):
            out[n] = dot_int8(h, cd[n]) * gd

    @jit
    def swiglu_planes2(x, pg, gg, pu, gu, pd, gd, subln, eps, h, out):
        n_hidden = pg.shape[0]
        xsum = np.float32(0.0)
        for k in range(x.shape[0]):
            xsum += x[k]
        for n in range(n_hidden):
            a = dot_planes(x, pg[n], xsum) * gg
            b = dot_planes(x, pu[n], xsum) * gu
            h[n] = a / (np.float32(1.0) + np.exp(-a)) * b
        finish_hidden(h, n_hidden, subln, eps)
        hsum = np.float32(0.0)
        for n in range(n_hidden):
            hsum += h[n]
        for n in range(pd.shape[0]):
            out[n] = dot_planes(h, pd[n], hsum) * gd

    return swiglu_int8, swiglu_planes2


_kernels = compiled_lazily(_define)  # (int8, planes2) fused SwiGLU kernels, or None without numba


def _fusable(gate, up, down) -> str | None:
    """The numba kernel all three projections share when the MLP can run fused, else None."""
    kernel = getattr(gate, "kernel", None)
    if (
        kernel not in ("fp32-int8", "fp32-2bit")
        or getattr(up, "kernel", None) != kernel
        or getattr(down, "kernel", None) != kernel
    ):
        return None
    if gate.act_quant or up.act_quant or down.act_quant or gate.input_norm or up.input_norm:
        return None  # 8-bit activations or a norm before gate/up: not this fused form
    if gate.bias is not None or up.bias is not None or down.bias is not None:
        return None
    return kernel


def fused_swiglu(gate, up, down, x: torch.Tensor) -> torch.Tensor | None:
    """down(silu(gate(x)) * up(x)) for packed ternary projections (PackedTernaryLinear) and one row of
    x (..., d) without autograd, in one kernel call; None where the fused form does not apply (the
    caller then runs the three projections)."""
    if x.numel() != x.shape[-1] or x.dtype != torch.float32 or (torch.is_grad_enabled() and x.requires_grad):
        return None
    kernel = _fusable(gate, up, down)
    if kernel is None or x.device.type != "cpu":
        return None
    kernels = _kernels()
    if kernels is None:
        return None
    n_hidden = gate.out_features
    out = torch.empty(down.out_features)
    if kernel == "fp32-int8":
        h = np.empty(n_hidden, np.float32)
        kernels[0](
            x.reshape(-1).contiguous().numpy(),
            gate.codes.numpy(),
            np.float32(gate._gamma),
            up.codes.numpy(),
            np.float32(up._gamma),
            down.codes.numpy(),
            np.float32(down._gamma),
            bool(down.input_norm),
            np.float32(down.norm_eps),
            h,
            out.numpy(),
        )
    else:
        xa = np.zeros(4 * gate.planes.shape[1], np.float32)  # zero padding: padded columns add nothing
        xa[: x.shape[-1]] = x.reshape(-1).numpy()
        h = np.zeros(4 * down.planes.shape[1], np.float32)  # hidden row, zero-padded like x
        kernels[1](
            xa,
            gate.planes.numpy(),
            np.float32(gate._gamma),
            up.planes.numpy(),
            np.float32(up._gamma),
            down.planes.numpy(),
            np.float32(down._gamma),
            bool(down.input_norm),
            np.float32(down.norm_eps),
            h,
            out.numpy(),
        )
    return out.reshape(*x.shape[:-1], down.out_features)
