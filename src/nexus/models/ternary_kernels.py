"""Ternary matmul kernels that read packed codes and accumulate in float32 (numba, compiled on first use):

    y[m, n] = sum_k x[m, k] * c[n, k]            c in {-1, 0, 1}; the caller multiplies by gamma

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
  sum_k x_k c_k = sum_k x_k u_k - sum_k x_k, the last sum once per input row.
- "fp32-int8": one int8 code per weight (4x the bytes of 2-bit, but no shift or mask).
Which is faster depends on the CPU and on whether the model's codes fit its caches; kernel="auto"
measures (ternary_kernel_choice.py).

For M > 1 input rows each weight row is decoded once into a float buffer and dotted with every
input row, so a prompt of M tokens does not decode the weights M times.

Single-threaded on purpose (as models/mix_kernels.py): numba's parallel layers start a thread pool
beside torch's. Compiled with the shared configuration of models/numba_jit.py (reassociation, so the
sums vectorize). numba is imported lazily; without it these kernels are unavailable and "auto" does
not offer them.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

def available() -> bool:
    return _kernels() is not None


@functools.cache
def _kernels():
    """(planes2, int8) compiled lazily (on their first call), or None without numba."""
    from .numba_jit import njit

    jit = njit()
    return None if jit is None else _define(jit)


def _define(jit):
    @jit
    def planes2(x, packed, out):
        """x (M, 4*K4) float32 (zero-padded), packed (N, K4) uint8, out (M, N) float32."""
        m_rows = x.shape[0]
        n_rows, k4 = packed.shape
        xsum = np.zeros(m_rows, np.float32)
        for m in range(m_rows):
            s = np.float32(0.0)
            for k in range(4 * k4):
                s += x[m, k]
            xsum[m] = s
        if m_rows == 1:  # decoding one token: fused decode + multiply, no buffer
            xr = x[0]
            for n in range(n_rows):
                row = packed[n]
                acc = np.float32(0.0)
                for q in range(4):
                    shift = np.uint8(2 * q)
                    a = np.float32(0.0)
                    for j in range(k4):
                        a += xr[q * k4 + j] * np.float32((row[j] >> shift) & np.uint8(3))
                    acc += a
                out[0, n] = acc - xsum[0]
            return
        w = np.empty(4 * k4, np.float32)
        for n in range(n_rows):
            row = packed[n]
            for q in range(4):
                shift = np.uint8(2 * q)
                for j in range(k4):
                    w[q * k4 + j] = np.float32((row[j] >> shift) & np.uint8(3))
            for m in range(m_rows):
                xr = x[m]
                a = np.float32(0.0)
                for k in range(4 * k4):
                    a += xr[k] * w[k]
                out[m, n] = a - xsum[m]

    @jit
    def int8(x, codes, out):
        """x (M, K) float32, codes (N, K) int8, out (M, N) float32."""
        m_rows = x.shape[0]
        n_rows, k_cols = codes.shape
        if m_rows == 1:
            xr = x[0]
            for n in range(n_rows):
                row = codes[n]
                a = np.float32(0.0)
                for k in range(k_cols):
                    a += xr[k] * np.float32(row[k])
                out[0, n] = a
            return
        w = np.empty(k_cols, np.float32)
        for n in range(n_rows):
            row = codes[n]
            for k in range(k_cols):
                w[k] = np.float32(row[k])
            for m in range(m_rows):
                xr = x[m]
                a = np.float32(0.0)
                for k in range(k_cols):
                    a += xr[k] * w[k]
                out[m, n] = a

    return planes2, int8


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
    """x (..., K) -> a C-contiguous float32 (M, width) array, zero-padded on the right when width > K."""
    x2 = x.reshape(-1, x.shape[-1]).to(torch.float32)
    if width != x2.shape[1]:
        x2 = torch.nn.functional.pad(x2, (0, width - x2.shape[1]))
    return x2.contiguous().numpy()


def planes2_matmul(x: torch.Tensor, packed: np.ndarray, n_out: int) -> torch.Tensor:
    """x (..., K) @ codes^T with codes in the 2-bit plane layout; float32 (..., N) out."""
    xa = _rows(x, 4 * packed.shape[1])
    out = np.empty((xa.shape[0], n_out), np.float32)
    _kernels()[0](xa, packed, out)
    return torch.from_numpy(out).reshape(*x.shape[:-1], n_out)


def int8_matmul(x: torch.Tensor, codes: np.ndarray) -> torch.Tensor:
    """x (..., K) @ codes^T with int8 codes (N, K); float32 (..., N) out."""
    xa = _rows(x, codes.shape[1])
    out = np.empty((xa.shape[0], codes.shape[0]), np.float32)
    _kernels()[1](xa, codes, out)
    return torch.from_numpy(out).reshape(*x.shape[:-1], codes.shape[0])
