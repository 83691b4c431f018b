"""Every script in benchmarks/ imports against today's nexus: a renamed or moved name breaks the script at
once, not months later when someone runs it (growth_speed.py imported `ProjectionConfig` for weeks after
the projection options moved to their kinds). Importing runs no benchmark: each script's work sits behind
`if __name__ == "__main__"`, which this test also holds."""
from __future__ import annotations

import ast
import sys

import pytest

from benchmark_module import BENCHMARKS, load_benchmark

SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) > 20, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_imports_and_runs_nothing_at_import(script, monkeypatch):
    tree = ast.parse((BENCHMARKS / script).read_text())
    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    top_calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                 and isinstance(n.value.func, ast.Name) and n.value.func.id in own]  # e.g. a bare main()
    assert not top_calls, f"{script} calls {ast.unparse(top_calls[0])} at import"
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their shared helpers (_result, ...)
    monkeypatch.setattr(sys, "argv", [script])
    load_benchmark(script)
