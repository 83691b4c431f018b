"""kernel="auto" for packed ternary layers: time every kernel this CPU can run, dense included, on the
model's own matrices at batch 1 and take the fastest.

Measured, not looked up in a table of CPU features: which kernel wins depends on the instruction set
(torch's int4/int8 kernels are fast where AVX-512 BF16 exists and slow on AVX2; the numba loops
follow whatever LLVM vectorizes for), on whether the model's codes fit the last-level cache (a
recurrent model re-reads all its matrices for every token) and on the thread count. A table would
be wrong on some CPU; a measurement that includes dense cannot pick a kernel slower than dense on
the machine it runs on, up to the noise of the measurement itself: the fastest of at least MIN_ROUNDS
interleaved rounds (more while the time budget lasts), which load from other processes only slows.
With one torch thread the clock is this process's CPU time, so time the scheduler gives to other
processes is not counted (on a 2-core machine at load 10, wall-clock minima of 5 rounds of 2 ms
passes still came out up to 6x high); with several threads it is wall time, which is what a user of
a multi-threaded dense matmul waits.

The layers are timed together, one pass through all of them per round, as decoding cycles through
them, so the timing sees the same cache pressure as the model. The choice is cached in this process
per (matrix shapes, torch CPU capability, torch threads): loading the same model again reuses it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

MIN_ROUNDS, MAX_ROUNDS = 5, 15  # timed passes per candidate after one warm-up pass (which compiles the numba loops)
BUDGET_S = 0.5  # rounds past MIN_ROUNDS are run while the timed passes have taken less than this

_cache: dict[tuple, str] = {}


@dataclass(frozen=True)
class KernelChoice:
    kernel: str  # the kernel taken
    ms: dict = field(default_factory=dict)  # candidate -> fastest ms per pass over the matrices
    n_matrices: int = 0
    threads: int = 1
    rounds: int = 0
    clock: str = "CPU time"
    cached: bool = False  # True: taken from an earlier measurement in this process (ms empty)

    def why(self) -> str:
        """One line for the run header: the choice, the measured times and the CPU they came from."""
        from ..cpu_info import describe_cpu

        if self.cached:
            how = "as measured at an earlier load in this process"
        else:
            times = ", ".join(f"{k} {v:.2f}" for k, v in sorted(self.ms.items(), key=lambda kv: kv[1]))
            how = (
                f"fastest at batch 1 of ms per pass over the {self.n_matrices} ternary matrices: {times} "
                f"(best of {self.rounds} interleaved rounds, {self.clock})"
            )
        return f"ternary kernel auto -> {self.kernel}: {how}; {describe_cpu()}, {self.threads} torch threads"


def candidates() -> list[str]:
    """The kernels this process can run on a CPU: dense always, torch's low-bit ones where this torch has
    them, the numba loops where numba is installed."""
    from . import ternary_kernels

    out = ["dense"]
    if hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        out.append("int4")
    if hasattr(torch.ops.aten, "_weight_int8pack_mm"):
        out.append("int8")
    if ternary_kernels.available():
        out += ["fp32-2bit", "fp32-int8"]
    return out


def _key(layers) -> tuple:
    shapes = tuple(sorted(tuple(c.shape) for c, _ in layers))
    return shapes, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads()


def choose_kernel(
    layers: list[tuple[torch.Tensor, torch.Tensor]], layer_class, kernels: list[str] | None = None
) -> KernelChoice:
    """layers: (codes (N, K) in {-1, 0, 1}, gamma) of every ternary matrix of a model (or one layer);
    layer_class: bitlinear.PackedTernaryLinear (passed in, so this module and bitlinear.py, whose
    kernel="auto" calls it, do not import each other). Returns the fastest of `kernels` (default:
    `candidates()`) at batch 1, dense among them."""
    threads = torch.get_num_threads()
    key = _key(layers)
    if kernels is None and key in _cache:
        return KernelChoice(_cache[key], n_matrices=len(layers), threads=threads, cached=True)
    names = list(kernels or candidates())
    built = {k: [layer_class(c, g, None, False, False, 1e-5, kernel=k) for c, g in layers] for k in names}
    gen = torch.Generator().manual_seed(0)
    inputs = {k: torch.randn(1, k, generator=gen) for k in {c.shape[1] for c, _ in layers}}
    best = {k: float("inf") for k in names}
    clock, clock_name = (time.process_time, "CPU time") if threads == 1 else (time.perf_counter, "wall time")
    spent, r = 0.0, 0
    with torch.no_grad():
        while r <= MIN_ROUNDS or (r <= MAX_ROUNDS and spent < BUDGET_S):
            for k in names[r % len(names) :] + names[: r % len(names)]:  # rotate who goes first
                t0 = clock()
                for m in built[k]:
                    m(inputs[m.in_features])
                dt = clock() - t0
                if r:  # round 0 warms up (allocations, numba compilation)
                    best[k] = min(best[k], dt * 1e3)
                    spent += dt
            r += 1
    kernel = min(names, key=lambda k: best[k])
    if kernels is None:
        _cache[key] = kernel
    return KernelChoice(kernel, best, n_matrices=len(layers), threads=threads, rounds=r - 1, clock=clock_name)
