"""Ternary matmul kernels that read packed codes and accumulate in float32 (numba, compiled on first use):

    y[m, n] = gamma * sum_k x[m, k] * c[n, k]            c in {-1, 0, 1}

Why hand-written: torch's low-bit CPU matmuls (`_weight_int4pack_mm_for_cpu`, `_weight_int8pack_mm`)
are vectorized for bf16 activations, which CPUs without AVX-512 BF16 emulate, and on an AVX2 CPU they
decoded nexus-tiny only 1.2-1.3x faster than fp32 (issue 41). Decoding one token is bound by reading
weights, and at B=1 a plain loop that turns a code into a float and multiplies it in fp32 is cheap
next to the bytes it saves, so these loops, which LLVM vectorizes for whatever the CPU has (AVX2 or
AVX-512), beat both torch kernels there. The products are fp32 (no bf16 rounding): outputs agree
with the dense fp32 path to fp32 summation-order rounding.

Two layouts:
- "fp32-2bit": 2 bits per weight, u = c + 1 in {0, 1, 2}. Byte j of row n holds the codes of the
  columns j, j + K4, j + 2 K4, j + 3 K4 (K4 = K / 4) at bits 0, 2, 4, 6, so each of the four bit
  planes is a unit-stride run over the row and over x: one shift, mask and convert per weight.
  sum_k x_k c_k = sum_k x_k u_k - sum_k x_k, the last sum once per call.
- "fp32-int8": one int8 code per weight (4x the bytes of 2-bit, but no shift or mask).
Which is faster depends on the CPU and on whether the model's codes fit its caches; kernel="auto"
measures (ternary_kernel_choice.py).

These loops are for one input row (decoding a token at batch 1). For M > 1 rows (a prompt, a batch)
the weight is dequantized once per call to fp32 codes * gamma, the very tensor the dense kernel keeps,
and torch's GEMM does the product: those rows equal the dense path bitwise, and a GEMM reuses each
weight across rows far better than a loop of dot products (a 16-token prompt through nexus-tiny took
as long as 31 decoded tokens with per-row loops).

Single-threaded on purpose (as models/mix_kernels.py): numba's parallel layers start a thread pool
beside torch's. Compiled with the shared configuration of models/numba_jit.py (reassociation, so the
sums vectorize). numba is imported lazily; without it these kernels are unavailable and "auto" does
not offer them.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F


def available() -> bool:
    return _kernels() is not None


@functools.cache
def _kernels():
    """(planes2_row, planes2_dequantize, int8_row) compiled lazily (on their first call), or None without numba."""
    from .numba_jit import njit

    jit = njit()
    return None if jit is None else _define(jit)


def _define(jit):
    @jit
    def planes2_row(x, packed, scale, out):
        """out = scale * codes @ x; x (4*K4,) float32 zero-padded, packed (N, K4) uint8, out (N,) float32."""
        n_rows, k4 = packed.shape
        xsum = np.float32(0.0)
        for k in range(4 * k4):
            xsum += x[k]
        for n in range(n_rows):
            row = packed[n]
            acc = np.float32(0.0)
            for q in range(4):
                shift = np.uint8(2 * q)
                a = np.float32(0.0)
                for j in range(k4):
                    a += x[q * k4 + j] * np.float32((row[j] >> shift) & np.uint8(3))
                acc += a
            out[n] = (acc - xsum) * scale

    @jit
    def planes2_dequantize(packed, scale, w):
        """w (N, K) float32 = codes * scale, the dense kernel's weight, from the plane layout."""
        n_rows, k4 = packed.shape
        k_cols = w.shape[1]
        for n in range(n_rows):
            row, wr = packed[n], w[n]
            for q in range(4):
                shift = np.uint8(2 * q)
                for j in range(min(k4, k_cols - q * k4)):
                    wr[q * k4 + j] = np.float32(np.int32((row[j] >> shift) & np.uint8(3)) - 1) * scale

    @jit
    def int8_row(x, codes, scale, out):
        """out = scale * codes @ x; x (K,) float32, codes (N, K) int8, out (N,) float32."""
        n_rows, k_cols = codes.shape
        for n in range(n_rows):
            row = codes[n]
            a = np.float32(0.0)
            for k in range(k_cols):
                a += x[k] * np.float32(row[k])
            out[n] = a * scale

    return planes2_row, planes2_dequantize, int8_row


def pack_planes2(codes: torch.Tensor) -> np.ndarray:
    """Codes (N, K) in {-1, 0, 1} -> uint8 (N, ceil(K/4)) in the bit-plane layout above; padding
    columns get c = 0 (u = 1), and the kernel's zero-padded x makes them contribute nothing."""
    c = codes.to(torch.int8).numpy()
    n, k = c.shape
    k4 = -(-k // 4)
    u = np.ones((n, 4 * k4), np.uint8)
    u[:, :k] = c + 1
    u = u.reshape(n, 4, k4)
    return np.ascontiguousarray(u[:, 0] | (u[:, 1] << 2) | (u[:, 2] << 4) | (u[:, 3] << 6))


def _one_row(x: torch.Tensor, width: int) -> np.ndarray:
    """The single input row as a C-contiguous float32 (width,) array (a view when x already is one),
    zero-padded on the right when width > K."""
    x1 = x.reshape(x.shape[-1])
    if x1.dtype != torch.float32 or not x1.is_contiguous() or width != x1.shape[0]:
        x1 = F.pad(x1.to(torch.float32), (0, width - x1.shape[0])).contiguous()
    return x1.numpy()


def planes2_matmul(x: torch.Tensor, packed: np.ndarray, n_out: int, scale: float) -> torch.Tensor:
    """scale * x (..., K) @ codes^T with codes in the 2-bit plane layout; float32 (..., N) out."""
    k_in = x.shape[-1]
    if x.numel() != k_in:  # several rows: dequantize once, GEMM
        w = torch.empty(n_out, k_in)
        _kernels()[1](packed, np.float32(scale), w.numpy())
        return F.linear(x.to(torch.float32), w)
    out = torch.empty(n_out)
    _kernels()[0](_one_row(x, 4 * packed.shape[1]), packed, np.float32(scale), out.numpy())
    return out.reshape(*x.shape[:-1], n_out)


def int8_matmul(x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """scale * x (..., K) @ codes^T with int8 codes (N, K); float32 (..., N) out."""
    if x.numel() != x.shape[-1]:  # several rows: dequantize once (as models/bitlinear.py does), GEMM
        return F.linear(x.to(torch.float32), codes.to(torch.float32) * scale)
    out = torch.empty(codes.shape[0])
    _kernels()[2](_one_row(x, codes.shape[1]), codes.numpy(), np.float32(scale), out.numpy())
    return out.reshape(*x.shape[:-1], codes.shape[0])
