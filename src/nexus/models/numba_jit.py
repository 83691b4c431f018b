"""The one numba configuration of our CPU kernels (mix_kernels.py, ternary_kernels.py), imported lazily.

fastmath allows only reassociation and contraction, so row sums vectorize and products may use FMA;
no assumptions about NaN, infinities or signed zeros. No on-disk cache: numba would write it beside
the installed package, and nexus writes only where the user points it. boundscheck off: the callers
size every array.
"""
from __future__ import annotations

FASTMATH = {"reassoc", "contract"}


def njit():
    """numba.njit configured for our kernels, or None when numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(fastmath=FASTMATH, nogil=True, cache=False, boundscheck=False)
