"""Analyses: parameter/FLOP accounting, attention statistics, growth dynamics, plots.

`nexus analyze KIND` runs the analysis registered under KIND. An analysis is one function in one
module of this package plus its registration line:

    @register_analysis("attention", "per-layer attention entropy, ...")
    def attention_kind(src: AnalysisSource, out_dir: Path, args) -> dict: ...

`src` (analysis/source.py) gives the run config, the model and validation batches; the returned dict
is written as `<kind>.json` and printed (through `summary(result) -> str` when one is registered).
The modules are imported when the first analysis is looked up, so this package stays light to import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..plugins import Registry


@dataclass(frozen=True)
class Analysis:
    run: Callable[..., dict]  # run(src, out_dir, args) -> the JSON-able result
    help: str  # one line shown by `nexus analyze --help`
    summary: Callable[[dict], str] | None = None  # the human-readable table printed after the run


ANALYSES: Registry[Analysis] = Registry("KIND", __name__)


def format_value(v) -> str:
    """A number as summaries print it: 4 significant digits for floats, '-' for a missing value."""
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def register_analysis(kind: str, help: str, summary: Callable[[dict], str] | None = None):
    """Decorator: register `fn(src, out_dir, args) -> dict` as `nexus analyze <kind>`."""

    def deco(fn):
        ANALYSES.register(kind)(Analysis(fn, help, summary))
        return fn

    return deco
