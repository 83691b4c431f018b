"""The one numba configuration of our CPU kernels (mix_kernels.py, ternary_kernels.py), imported lazily.

fastmath allows only reassociation and contraction, so row sums vectorize and products may use FMA;
no assumptions about NaN, infinities or signed zeros. No on-disk cache: numba would write it beside
the installed package, and nexus writes only where the user points it. boundscheck off: the callers
size every array.
"""

from __future__ import annotations

import functools

FASTMATH = {"reassoc", "contract"}


def njit():
    """numba.njit configured for our kernels, or None when numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(fastmath=FASTMATH, nogil=True, cache=False, boundscheck=False)


def compiled_lazily(define):
    """A cached getter of `define(jit)` (a module's kernels, compiled on their first call) that gives None
    without numba: the lazy import every kernel module needs, written once."""

    @functools.cache
    def kernels():
        jit = njit()
        return None if jit is None else define(jit)

    return kernels
