"""Fused CPU kernels for the ExoFormer mixing of one component (numba, compiled on first use):

    out = (l1 * g1) * anchor + (l2 * g2) * current        (paper, eq. 7)

for current/anchor (B, T, heads, width), per-channel coefficients l (heads, width) and per-token
factors g1 = gam[:, i1], g2 = gam[:, i2] (gam is (B * T, n_factors)).

Hand-written because eager PyTorch cannot do this in one pass: every op applies at most one
broadcast factor, so the forward costs four full-size passes and the backward (input gradients plus
the per-channel and per-token reductions) about eighteen, each reading or writing the whole
activation. Here the forward is one pass (read current and anchor, write out) and the backward one
pass (read grad, current, anchor; write both input gradients)
that also accumulates the four reductions in registers. What that buys a training step is measured
by benchmarks/speed/variant_overhead.py (docs/exoformer.md#benchmark). The eager Function remains the
path for GPUs, half precision and torch.compile (see modulated_mix.py).

Single-threaded on purpose: numba's parallel layers start their own OpenMP/TBB pool beside
torch's, which on a shared machine cost far more wall time than they saved. The kernels release
the GIL. fastmath allows only reassociation and contraction (so row sums vectorize and products
may use FMA); no assumptions about NaN, infinities or signed zeros.

numba is imported lazily: `available()` is False when it is missing, and the callers fall back to
the eager Function.
"""

from __future__ import annotations

import functools


@functools.cache
def _kernels():
    """(forward, backward, gate_backward, forward_layer, backward_layer) compiled lazily \
(each dtype specializes on its first call), or None."""
    from .numba_jit import njit

    jit = njit()
    if jit is None:
        return None
    import numpy as np

    # Arrays are (B, T, heads, width), C-contiguous; coefficients (heads, width); gam (B * T, n_factors).
    # Every loop nest ends in a unit-stride loop over width (head_dim) on 1-D rows, which LLVM vectorizes.
    @jit
    def forward(cur, anc, l1, l2, gam, i1, i2, has_anc, out):
        B, T, H, W = cur.shape
        for b in range(B):
            for t in range(T):
                g1, g2 = gam[b * T + t, i1], gam[b * T + t, i2]
                for h in range(H):
                    o, c, k1, k2 = out[b, t, h], cur[b, t, h], l1[h], l2[h]
                    if has_anc:
                        a = anc[b, t, h]
                        for w in range(W):
                            o[w] = (k2[w] * g2) * c[w] + (k1[w] * g1) * a[w]
                    else:
                        for w in range(W):
                            o[w] = (k2[w] * g2) * c[w]

    @jit
    def backward(grad, head_major, cur, anc, l1, l2, gam, i1, i2, has_anc, d_cur, d_anc, d_l, d_gam):
        """grad is (B, T, heads, width), or (B, heads, T, width) when head_major (the layout attention
        hands back for q and k). d_cur, d_anc are written; d_l (2, heads, width) accumulates the
        gradients of l1 and l2 (it starts at zero); the per-token gradients go to d_gam[:, i1]
        (anchor side) and d_gam[:, i2] (current side)."""
        B, T, H, W = cur.shape
        zero = np.zeros(1, dtype=cur.dtype)[0]
        for b in range(B):
            for t in range(T):
                g1, g2 = gam[b * T + t, i1], gam[b * T + t, i2]
                s1 = zero
                s2 = zero
                for h in range(H):
                    g = grad[b, h, t] if head_major else grad[b, t, h]
                    c, dc, k1, k2, e1, e2 = cur[b, t, h], d_cur[b, t, h], l1[h], l2[h], d_l[0, h], d_l[1, h]
                    if has_anc:
                        a, da = anc[b, t, h], d_anc[b, t, h]
                        for w in range(W):
                            gc = g[w] * c[w]
                            ga = g[w] * a[w]
                            dc[w] = g[w] * (k2[w] * g2)
                            da[w] = g[w] * (k1[w] * g1)
                            s2 += gc * k2[w]
                            s1 += ga * k1[w]
                            e2[w] += gc * g2
                            e1[w] += ga * g1
                    else:
                        for w in range(W):
                            gc = g[w] * c[w]
                            dc[w] = g[w] * (k2[w] * g2)
                            s2 += gc * k2[w]
                            e2[w] += gc * g2
                if has_anc:
                    d_gam[b * T + t, i1] = s1
                d_gam[b * T + t, i2] = s2

    @jit
    def gate_backward(d_gam, gam, a, W2, dz, da, d_W2, d_b):
        """Backward of gam = sigmoid(a W2^T + b) for d_gam (M, k), a (M, j), W2 (k, j): writes
        dz = d_gam * gam * (1 - gam) and da = dz W2, accumulates d_W2 += dz^T a and d_b += sum(dz).
        All tiny (k = 8, j = 16): one call instead of four torch calls, each of which costs more
        than its arithmetic."""
        M, K = gam.shape
        J = a.shape[1]
        for t in range(M):
            for k in range(K):
                y = gam[t, k]
                dz[t, k] = d_gam[t, k] * (y * (1 - y))
            for j in range(J):
                acc = dz[t, 0] * W2[0, j]
                for k in range(1, K):
                    acc += dz[t, k] * W2[k, j]
                da[t, j] = acc
            for k in range(K):
                d_b[k] += dz[t, k]
                for j in range(J):
                    d_W2[k, j] += dz[t, k] * a[t, j]

    # One call per layer: every mixed component's arrays come as a tuple (numba types a tuple of
    # same-dtype C arrays as one homogeneous tuple, indexable in a loop), so a layer pays one dispatch
    # from Python instead of one per component; the component loops are the kernels above.
    @jit
    def forward_layer(curs, ancs, l1s, l2s, gam, cols, has_anc, outs):
        """forward for component i = 0..n-1 on curs[i], ancs[i], l1s[i], l2s[i], factors cols[i]."""
        for i in range(len(curs)):
            forward(curs[i], ancs[i], l1s[i], l2s[i], gam, cols[i, 0], cols[i, 1], has_anc, outs[i])

    @jit
    def backward_layer(grads, head_major, curs, ancs, l1s, l2s, gam, cols, has_anc, d_curs, d_ancs, d_ls, d_gam):
        """backward for component i = 0..n-1; head_major[i] gives grads[i]'s layout."""
        for i in range(len(curs)):
            backward(
                grads[i],
                head_major[i],
                curs[i],
                ancs[i],
                l1s[i],
                l2s[i],
                gam,
                cols[i, 0],
                cols[i, 1],
                has_anc,
                d_curs[i],
                d_ancs[i],
                d_ls[i],
                d_gam,
            )

    return forward, backward, gate_backward, forward_layer, backward_layer


def available() -> bool:
    return _kernels() is not None


def gate_backward_kernel():
    return _kernels()[2]


def forward_layer_kernel():
    return _kernels()[3]


def backward_layer_kernel():
    return _kernels()[4]
