"""benchmarks/_harness.py: the sides alternate who goes first, warm-up rounds are not counted, the two
clocks differ where they should (sleeping spends wall time, not CPU time), and per-round ratios pair
the sides within a round."""

from __future__ import annotations

import importlib
import time

import pytest
from benchmark_module import BENCHMARKS


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("_harness")  # as the scripts import it (a dataclass needs sys.modules)


def test_sides_alternate_who_goes_first_and_warmup_is_not_counted(harness):
    order: list[str] = []
    seen_rounds: list[int] = []
    times = harness.alternate(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b"), "c": lambda: order.append("c")},
        rounds=3,
        calls=2,
        warmup=1,
        after_round=lambda r, t: seen_rounds.append(r),
    )
    # 4 rounds (1 warm-up), each side called twice back to back per round
    assert order == (["a"] * 2 + ["b"] * 2 + ["c"] * 2 + ["c"] * 2 + ["b"] * 2 + ["a"] * 2) * 2
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert seen_rounds == [0, 1, 2]


def test_wall_clock_counts_sleep_and_cpu_clock_does_not(harness):
    with harness.StepTimer() as t:
        time.sleep(0.2)
    assert t.elapsed.wall >= 0.2
    assert t.elapsed.cpu < 0.1
    per_call = harness.timed(lambda: time.sleep(0.05), calls=2)
    assert per_call.wall >= 0.05 and per_call.cpu < per_call.wall
    times = harness.alternate({"sleep": lambda: time.sleep(0.05)}, rounds=1, warmup=0, clock="cpu")
    assert times["sleep"][0] < 0.05


def test_unknown_clock_is_refused_before_any_work(harness):
    calls = []
    with pytest.raises(ValueError, match="clock 'gpu'"):
        harness.alternate({"a": lambda: calls.append(1)}, rounds=1, clock="gpu")
    assert calls == []


def test_ratios_pair_sides_within_a_round(harness):
    times = {"cand": [2.0, 9.0, 3.0], "ref": [1.0, 10.0, 6.0]}
    assert harness.ratios(times, "cand", "ref") == [2.0, 0.9, 0.5]
    assert harness.medians(times) == {"cand": 3.0, "ref": 6.0}


def test_emit_prints_machine_line_then_a_parseable_result(harness, capsys):
    rec = harness.emit("x vs y", [1.0, 3.0, 2.0], target="<= 2", met=True, raw_ms=5)
    out = capsys.readouterr().out
    assert harness.parse(out) == [rec]
    assert rec["value"] == 2.0 and rec["range"] == [1.0, 3.0] and rec["rounds"] == 3
    assert rec["cpu"] == harness.machine()


def test_stopwatch_keeps_running_and_reads_both_clocks(harness):
    clock = harness.StepTimer().start()
    time.sleep(0.05)
    first = clock.so_far()
    time.sleep(0.05)
    second = clock.so_far()
    assert first.wall >= 0.05 and second.wall >= first.wall + 0.05  # not reset by reading it
    assert second.cpu < second.wall


def test_budget_stops_new_rounds_but_runs_at_least_one(harness):
    calls: list[str] = []
    times = harness.alternate({"a": lambda: (calls.append("a"), time.sleep(0.03))}, rounds=10, warmup=1, budget_s=0.05)
    # the warm-up round is outside the budget; after it, rounds start until 0.05 s have passed
    assert 2 <= len(times["a"]) < 10 and len(calls) == len(times["a"]) + 1
    once = harness.alternate({"a": lambda: time.sleep(0.03)}, rounds=3, warmup=0, budget_s=1e-9)
    assert len(once["a"]) == 1
