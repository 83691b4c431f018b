"""Every benchmark script times through the shared harness (benchmarks/_harness.py: StepTimer on the wall and CPU
clocks, alternating rounds) and ends with the harness's RESULT line, whose record carries the machine line (CPU
model and torch capability): a script with its own `time.perf_counter()` loop is the kind of timer issue 37 found
six of, each alternating (or not) in its own way. The check reads the scripts' text, so it also sees code a
script hands to a child process as a string; the one allowed exception is listed below with its reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from benchmark_module import BENCHMARKS

HARNESS = BENCHMARKS / "_harness.py"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py") if p != HARNESS)
CLOCK = re.compile(
    r"\btime\s*\.\s*(perf_counter|process_time|thread_time|monotonic|time|clock_gettime)(_ns)?\b"
    r"|\bfrom\s+time\s+import\b|\bimport\s+time\s+as\b"
)
# script (relative to benchmarks/) -> why it reads a clock of its own: what the harness cannot measure
OWN_CLOCK = {
    "speed/stopped_rank.py": "measures from a moment in another process (rank 1 stamps when it stops itself) to the "
    "launcher's exit in this one: only the epoch clock (time.time) is shared by both "
    "processes, and the harness's clocks are per process",
}
# script -> why it prints no RESULT line of its own
NO_RESULT = {
    "speed/speed_suite.py": "runs the other speed scripts and gathers their RESULT lines into one table",
}


def _rel(p: Path) -> str:
    return p.relative_to(BENCHMARKS).as_posix()


def test_there_are_scripts_and_every_listed_exception_exists():
    assert len(SCRIPTS) > 25 and HARNESS.is_file()
    names = {_rel(p) for p in SCRIPTS}
    assert set(OWN_CLOCK) <= names and set(NO_RESULT) <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=_rel)
def test_no_clock_of_its_own(script):
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(script.read_text().splitlines(), 1) if CLOCK.search(line)]
    if _rel(script) in OWN_CLOCK:
        assert hits, f"{_rel(script)} no longer reads a clock of its own: drop it from OWN_CLOCK"
        return
    assert not hits, (
        f"{_rel(script)} times with its own clock (use StepTimer / alternate from benchmarks/_harness.py, "
        f"or list it in OWN_CLOCK with the reason): {hits}"
    )


def _emits(tree: ast.AST) -> bool:
    """A call of emit(), or of a script's own emit_* helper (e.g. progressive_regime.emit_headline, which calls it)."""
    names = [
        getattr(n.func, "id", None) or getattr(n.func, "attr", None) for n in ast.walk(tree) if isinstance(n, ast.Call)
    ]
    return any(n == "emit" or (n or "").startswith("emit_") for n in names)


@pytest.mark.parametrize("script", [p for p in SCRIPTS if not p.name.startswith("_")], ids=_rel)
def test_prints_a_result_line_through_the_harness(script):
    tree = ast.parse(script.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "_result" not in imported, f"{_rel(script)} imports _result: the harness re-exports it (one entry point)"
    if _rel(script) in NO_RESULT:
        return
    assert _emits(tree), (
        f"{_rel(script)} prints no RESULT line: call emit() from benchmarks/_harness.py for "
        "its headline figure (it prints the machine line too)"
    )
