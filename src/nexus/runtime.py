"""Process-level CPU settings for training runs.

glibc's malloc gives every block above an adaptive threshold (128 KiB up to 32 MiB) its own mmap,
and it returns free memory at the heap top to the OS. A training step allocates and frees hundreds
of activation-sized tensors, so each step faults all that memory in again. The kernel zeroes every
page first. On the 2-core CPU machine this put dynamic ExoFormer at 1.052x gated attention's step
time instead of 1.025x, because the elementwise-heavy model pays more of it
(benchmarks/speed/variant_overhead.py --threads 1, with and without --no-malloc-tuning).
PyTorch's CPU performance guide fixes the same problem by preloading jemalloc or tcmalloc. Here,
`mallopt` keeps freed blocks in the process instead. It needs no extra library and no LD_PRELOAD,
and a caching allocator (CUDA's, for one) makes the same trade. Written by hand because torch has
no API for it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc refuses larger values on 64-bit
_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: in effect, never trim the heap top during a run

_tuned: bool | None = None


def tune_cpu_allocator() -> bool:
    """Serve blocks below 32 MiB from the heap and stop trimming it. Returns whether glibc accepted the
    settings. Idempotent, and a no-op off Linux/glibc. Set NEXUS_MALLOC_TUNING=0 to disable it."""
    global _tuned
    if _tuned is not None:
        return _tuned
    _tuned = False
    if os.environ.get("NEXUS_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    ok = (mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1) and ok
    _tuned = ok
    return ok
