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

For M > 1 input rows (a prompt, a batch) weight rows are decoded once, two at a time, into a float
buffer in L1 and multiplied with four input rows at a time (a 2 x 4 tile: 0.75 loads per multiply-add).
Dequantizing the whole matrix per call and calling torch's GEMM instead made a 16-token prompt
through nexus-small cost 1.38 s of CPU vs 0.75 s for the dense model and 0.42 s for int4 (a
recurrent model applies each matrix 24 times per forward, and each time the 25 MB fp32 copy was
written and read again).

Single-threaded on purpose (as models/mix_kernels.py): numba's parallel layers start a thread pool
beside torch's. Compiled with the shared configuration of models/numba_jit.py (reassociation, so the
sums vectorize). numba is imported lazily; without it these kernels are unavailable and "auto" does
not offer them.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .numba_jit import compiled_lazily


def available() -> bool:
    return _kernels() is not None


def _define(jit):
    @jit
    def rows_times_decoded(x, w, n0, n_here, scale, out):
        """out[:, n0:n0+n_here] = scale * x @ w[:n_here]^T for x (M, K) and n_here (1 or 2) decoded weight
        rows w (2, K): tiles of 2 weight rows x 4 input rows, 8 accumulators (fits AVX2's 16 registers),
        0.75 loads per multiply-add."""
        m_rows, k_cols = x.shape
        w0, w1 = w[0], w[1]  # w1 is a stale row when n_here == 1: computed, not stored
        m = 0
        while m < m_rows:
            mb = min(4, m_rows - m)
            x0, x1, x2, x3 = x[m], x[m + min(1, mb - 1)], x[m + min(2, mb - 1)], x[m + min(3, mb - 1)]
            a00 = np.float32(0.0)
            a01 = np.float32(0.0)
            a02 = np.float32(0.0)
            a03 = np.float32(0.0)
            a10 = np.float32(0.0)
            a11 = np.float32(0.0)
            a12 = np.float32(0.0)
            a13 = np.float32(0.0)
            for k in range(k_cols):
                u, v = w0[k], w1[k]
                a00 += x0[k] * u
                a01 += x1[k] * u
                a02 += x2[k] * u
                a03 += x3[k] * u
                a10 += x0[k] * v
                a11 += x1[k] * v
                a12 += x2[k] * v
                a13 += x3[k] * v
            r0 = (a00, a01, a02, a03)
            r1 = (a10, a11, a12, a13)
            for i in range(mb):
                out[m + i, n0] = r0[i] * scale
                if n_here == 2:
                    out[m + i, n0 + 1] = r1[i] * scale
            m += 4

    @jit
    def planes2(x, packed, scale, out):
        """out = scale * x @ codes^T; x (M, 4*K4) float32 zero-padded, packed (N, K4) uint8, out (M, N)."""
        n_rows, k4 = packed.shape
        if x.shape[0] == 1:  # one token: fused decode and multiply-add, sum x_k u_k - sum x_k
            xr = x[0]
            xsum = np.float32(0.0)
            for k in range(4 * k4):
                xsum += xr[k]
            for n in range(n_rows):
                row = packed[n]
                acc = np.float32(0.0)
                for q in range(4):
                    shift = np.uint8(2 * q)
                    a = np.float32(0.0)
                    for j in range(k4):
                        a += xr[q * k4 + j] * np.float32((row[j] >> shift) & np.uint8(3))
                    acc += a
                out[0, n] = (acc - xsum) * scale
            return
        w = np.zeros((2, 4 * k4), np.float32)
        for n0 in range(0, n_rows, 2):
            n_here = min(2, n_rows - n0)
            for t in range(n_here):
                row, wt = packed[n0 + t], w[t]
                for q in range(4):
                    shift = np.uint8(2 * q)
                    for j in range(k4):
                        wt[q * k4 + j] = np.float32(np.int32((row[j] >> shift) & np.uint8(3)) - 1)
            rows_times_decoded(x, w, n0, n_here, scale, out)

    @jit
    def int8(x, codes, scale, out):
        """out = scale * x @ codes^T; x (M, K) float32, codes (N, K) int8, out (M, N) float32."""
        n_rows, k_cols = codes.shape
        if x.shape[0] == 1:
            xr = x[0]
            for n in range(n_rows):
                row = codes[n]
                a = np.float32(0.0)
                for k in range(k_cols):
                    a += xr[k] * np.float32(row[k])
                out[0, n] = a * scale
            return
        w = np.zeros((2, k_cols), np.float32)
        for n0 in range(0, n_rows, 2):
            n_here = min(2, n_rows - n0)
            for t in range(n_here):
                row, wt = codes[n0 + t], w[t]
                for k in range(k_cols):
                    wt[k] = np.float32(row[k])
            rows_times_decoded(x, w, n0, n_here, scale, out)

    return planes2, int8


_kernels = compiled_lazily(_define)  # (planes2, int8), or None without numba


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


def _rows(x: torch.Tensor, width: int) -> np.ndarray:
    """x (..., K) as a C-contiguous float32 (M, width) array (a view when x already is one), zero-padded
    on the right when width > K."""
    x2 = x.reshape(-1, x.shape[-1])
    if x2.dtype != torch.float32 or not x2.is_contiguous() or width != x2.shape[1]:
        x2 = F.pad(x2.to(torch.float32), (0, width - x2.shape[1])).contiguous()
    return x2.numpy()


def planes2_matmul(x: torch.Tensor, packed: np.ndarray, n_out: int, scale: float) -> torch.Tensor:
    """scale * x (..., K) @ codes^T with codes in the 2-bit plane layout; float32 (..., N) out."""
    xa = _rows(x, 4 * packed.shape[1])
    out = torch.empty(xa.shape[0], n_out)
    _kernels()[0](xa, packed, np.float32(scale), out.numpy())
    return out.reshape(*x.shape[:-1], n_out)


def int8_matmul(x: torch.Tensor, codes: np.ndarray, scale: float) -> torch.Tensor:
    """scale * x (..., K) @ codes^T with int8 codes (N, K); float32 (..., N) out."""
    xa = _rows(x, codes.shape[1])
    out = torch.empty(xa.shape[0], codes.shape[0])
    _kernels()[1](xa, codes, np.float32(scale), out.numpy())
    return out.reshape(*x.shape[:-1], codes.shape[0])
