"""Import a script from benchmarks/ (a path below it, e.g. "studies/progressive_regime.py") as a module, so tests can
call its functions (benchmarks/ is not a package)."""

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(script: str):
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_bench", BENCHMARKS / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
