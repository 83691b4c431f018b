"""The shared harness of the benchmark scripts: alternating rounds, a step timer that reads both clocks,
and (re-exported from `_result.py`) the `machine:` line and the RESULT line.

Every speed figure here is a ratio of a candidate to its reference measured in the same process, so the
two sides are timed in alternating rounds (forward order on even rounds, reversed on odd ones): load from
other processes, a warming cache or a CPU clock that drifts then hits both sides alike, and neither side
always goes first. Hand-written rather than `timeit`/`torch.utils.benchmark`: those time one callable
at a time and pick their own repeat counts, while a ratio needs both sides interleaved round by round.

    from _harness import alternate, emit, print_machine
    times = alternate({"candidate": run_a, "reference": run_b}, rounds=5, calls=10)
    emit("a vs b", ratios(times, "candidate", "reference"), target="<= 1.1")
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from _result import PREFIX, emit, machine, parse, print_machine  # noqa: F401  (the harness's one import)

CLOCKS = ("wall", "cpu")


@dataclass
class Elapsed:
    wall: float  # seconds of wall clock (time.perf_counter)
    cpu: float  # seconds of this process's CPU time (time.process_time), all threads

    def on(self, clock: str) -> float:
        return self.wall if check_clock(clock) == "wall" else self.cpu


def check_clock(clock: str) -> str:
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r} is not one of {CLOCKS}")
    return clock


class StepTimer:
    """`with StepTimer() as t: step()` then `t.elapsed.wall` / `t.elapsed.cpu`: both clocks, since on a
    shared machine the wall clock also counts waiting for the CPU and the process clock does not.

    A stopwatch for a long stretch (a study's runs, a whole subprocess) is the same clock, left running:
    `clock = StepTimer().start()`, then `clock.so_far().wall` whenever a progress line wants it."""

    elapsed: Elapsed

    def start(self) -> StepTimer:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def so_far(self) -> Elapsed:
        """Seconds since start() (or since entering the `with`), on both clocks; the timer keeps running."""
        return Elapsed(time.perf_counter() - self._wall, time.process_time() - self._cpu)

    def __enter__(self) -> StepTimer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.elapsed = self.so_far()


def timed(fn: Callable[[], object], calls: int = 1) -> Elapsed:
    """Seconds per call of `fn` over `calls` back-to-back calls, on both clocks."""
    with StepTimer() as t:
        for _ in range(calls):
            fn()
    return Elapsed(t.elapsed.wall / calls, t.elapsed.cpu / calls)


def round_order(names: list[str], r: int) -> list[str]:
    """The order the sides run in round r: as given on even rounds, reversed on odd ones."""
    return list(names) if r % 2 == 0 else list(reversed(names))


def alternate(
    sides: dict[str, Callable[[], object]],
    rounds: int,
    calls: int = 1,
    warmup: int = 1,
    clock: str = "wall",
    after_round: Callable[[int, dict[str, float]], None] | None = None,
    budget_s: float | None = None,
) -> dict[str, list[float]]:
    """Time each side `calls` times per round for `rounds` rounds after `warmup` untimed rounds, the sides
    alternating who goes first; returns seconds per call on `clock` ("wall" or "cpu"), one entry per
    timed round. `after_round(r, {side: seconds})` is called after each timed round (e.g. to print it).
    `budget_s`: start no new timed round once that many wall seconds have passed since the first timed
    round began (at least one timed round runs); the caller sees how many ran from the lists' length."""
    check_clock(clock)  # refuse an unknown clock before any work
    names = list(sides)
    times: dict[str, list[float]] = {k: [] for k in names}
    budget = StepTimer()
    for r in range(warmup + rounds):
        if r == warmup:
            budget.start()
        elif r > warmup and budget_s and budget.so_far().wall > budget_s:
            break
        this_round = {}
        for name in round_order(names, r):
            this_round[name] = timed(sides[name], calls).on(clock)
        if r >= warmup:
            for name in names:
                times[name].append(this_round[name])
            if after_round is not None:
                after_round(r - warmup, this_round)
    return times


def ratios(times: dict[str, list[float]], candidate: str, reference: str) -> list[float]:
    """Per-round candidate / reference (paired within a round, so slow rounds cancel)."""
    return [c / r for c, r in zip(times[candidate], times[reference])]


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in times.items()}
