"""Every script in benchmarks/ (speed/, studies/, regressions/) and tools/ imports against today's nexus: a renamed
or moved name breaks the script at once, not months later when someone runs it (growth_speed.py imported
`ProjectionConfig` for weeks after the projection options moved to their kinds). Importing runs no benchmark: each
script's work sits behind `if __name__ == "__main__"`, which this test also holds. Each script finds the shared
modules (benchmarks/_harness.py, _result.py, _revisions.py) by itself, as it must when run as
`python benchmarks/speed/x.py`: the test puts only the script's own folder on sys.path (as `python path/x.py` does)
and forgets any shared module already imported."""

from __future__ import annotations

import ast
import importlib.util
import sys

import pytest
from benchmark_module import BENCHMARKS

TOOLS = BENCHMARKS.parent / "tools"
SCRIPTS = sorted([*(p for p in BENCHMARKS.rglob("*.py") if not p.name.startswith("_")), *TOOLS.glob("*.py")])
KINDS = ("speed", "studies", "regressions")


def test_there_are_scripts_to_check_and_each_sits_in_a_kind_folder():
    assert len(SCRIPTS) > 20, SCRIPTS
    loose = [p.name for p in SCRIPTS if p.parent != TOOLS and p.parent.name not in KINDS]
    assert not loose, f"scripts outside benchmarks/{{{','.join(KINDS)}}}/ and tools/: {loose}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BENCHMARKS.parent)))
def test_benchmark_script_imports_and_runs_nothing_at_import(script, monkeypatch):
    tree = ast.parse(script.read_text())
    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    top_calls = [
        n
        for n in tree.body
        if isinstance(n, ast.Expr)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id in own
    ]  # e.g. a bare main()
    assert not top_calls, f"{script.name} calls {ast.unparse(top_calls[0])} at import"
    monkeypatch.setattr(sys, "path", [str(script.parent), *sys.path])  # as `python path/x.py`; undone afterwards
    for shared in [*(p.stem for p in BENCHMARKS.glob("_*.py")), *(p.stem for p in SCRIPTS)]:
        monkeypatch.delitem(sys.modules, shared, raising=False)  # found again through the script's own path
    monkeypatch.setattr(sys, "argv", [script.name])
    spec = importlib.util.spec_from_file_location(script.stem + "_bench", script)
    module = importlib.util.module_from_spec(spec)
    # in sys.modules while it runs, as `python x.py` has its __main__: a dataclass looks its module up there
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
