"""Presets registry: named functions returning a RunConfig. Presets derive from each other by
calling one another and changing fields -- no exec, no globals beyond this registry.

Each paper's presets live in their own module (baseline, exoformer, nexusformer, sparkling,
higher_order, recurrent); every module present in this package is imported on first use.
"""
from __future__ import annotations

from typing import Callable

from ..config import ConfigError, RunConfig

_REGISTRY: dict[str, tuple[Callable[[], RunConfig], str]] = {}
_loaded = False


def register(name: str, description: str = ""):
    def deco(fn: Callable[[], RunConfig]):
        if name in _REGISTRY:
            raise RuntimeError(f"preset {name!r} registered twice")
        doc_lines = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = (fn, description or (doc_lines[0] if doc_lines else ""))
        return fn
    return deco


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from ..plugins import import_submodules

    import_submodules(__name__, __path__)


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    _load_all()
    return _REGISTRY[name][1]


def get_preset(name: str) -> RunConfig:
    _load_all()
    if name not in _REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see `nexus presets`"
        raise ConfigError(f"--preset={name!r} is not a known preset ({hint})")
    cfg = _REGISTRY[name][0]()
    cfg.preset = name
    return cfg
