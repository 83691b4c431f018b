"""Presets registry: named functions returning a RunConfig. Presets derive from each other by
calling one another and changing fields -- no exec, no globals beyond this registry.

Each paper's presets live in their own module (baseline, exoformer, nexusformer, sparkling,
higher_order, recurrent); every module present in this package is imported on first use.
"""
from __future__ import annotations

from typing import Callable

from ..config import ConfigError, RunConfig
from ..config_migration import load_config_file
from ..plugins import Registry

# name -> (builder, one-line description); the modules of this package register themselves
PRESETS: Registry[tuple[Callable[[], RunConfig], str]] = Registry("--preset", __name__)


def register(name: str, description: str = ""):
    def deco(fn: Callable[[], RunConfig]):
        doc_lines = (fn.__doc__ or "").strip().splitlines()
        PRESETS.register(name)((fn, description or (doc_lines[0] if doc_lines else "")))
        return fn
    return deco


def names() -> list[str]:
    return sorted(PRESETS.names())


def describe(name: str) -> str:
    return PRESETS.get(name)[1]


def is_preset_file(name: str) -> bool:
    """A --preset given as a path: a YAML file (your own preset) instead of a registered name."""
    from pathlib import Path

    return name.endswith((".yaml", ".yml")) or ("/" in name and Path(name).is_file())


def preset_label(name: str) -> str:
    """What a preset is called in run directories and reports: a file preset by its stem (my.yaml -> my)."""
    from pathlib import Path

    return Path(name).stem if is_preset_file(name) else name


def get_preset(name: str) -> RunConfig:
    """The registered preset `name`, or the config in YAML file `name` (a preset of your own)."""
    if is_preset_file(name):
        cfg = load_config_file(name, flag="--preset")
        cfg.preset = preset_label(name)
        return cfg
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, PRESETS.names(), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see `nexus presets`, or give a YAML file"
        raise ConfigError(f"--preset={name!r} is not a known preset ({hint})")
    cfg = PRESETS.get(name)[0]()
    cfg.preset = name
    return cfg
