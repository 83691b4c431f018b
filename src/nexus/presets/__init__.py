"""Presets registry: named functions returning a RunConfig. Presets derive from each other by
calling one another and changing fields -- no exec, no globals beyond this registry.

Each paper's presets live in their own module (baseline, exoformer, nexusformer, sparkling,
higher_order, recurrent); every module present in this package is imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import ConfigError, RunConfig
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
    """The registered preset `name`, or the config in YAML file `name` (a preset of your own: see file_preset)."""
    if is_preset_file(name):
        return file_preset(name)
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, PRESETS.names(), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see `nexus presets`, or give a YAML file"
        raise ConfigError(f"--preset={name!r} is not a known preset ({hint})")
    cfg = PRESETS.get(name)[0]()
    cfg.preset = name
    return cfg


SECTIONS = ("model", "data", "train")  # a complete preset file holds every field of these


def missing_fields(d: dict) -> list[str]:
    """The fields of the model, data and train sections (dotted) that a config mapping leaves out."""
    full = RunConfig().to_dict()
    return [f"{s}.{k}" for s in SECTIONS for k in full[s] if not (isinstance(d.get(s), dict) and k in d[s])]


def file_preset(path: str) -> RunConfig:
    """A preset of your own, from a YAML file: either complete (every field of model, data and train, as a run's
    config.yaml holds them) or a partial mapping that names its base, `preset: <registered name>`, whose fields
    change only what they name. A partial file without a base is refused: its missing fields would silently take
    the schema's defaults, another model than the one it was meant to change (issue 50 item 2)."""
    from ..config_migration import read_config_file
    from ..config_overrides import merge_mapping

    d = read_config_file(path, flag="--preset")
    missing = missing_fields(d)
    base = d.get("preset")
    if not missing:  # complete: its own `preset` is the informational name a run's config.yaml carries
        cfg = RunConfig.from_dict(d)
    elif base is None or base == "":
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ConfigError(
            f"--preset={path!r} is a partial config without a base (it leaves out {shown}) "
            "(valid: name the preset it changes inside the file, e.g. `preset: baseline-micro`, "
            "or give every field, as a run's config.yaml holds them)"
        )
    elif not isinstance(base, str) or is_preset_file(base) or base not in PRESETS:
        raise ConfigError(
            f"--preset={path!r}: its field preset={base!r} is not a registered preset (valid: a name "
            "`nexus presets` lists, e.g. baseline-micro)"
        )
    else:
        cfg = get_preset(base)
        merge_mapping(cfg, {k: v for k, v in d.items() if k != "preset"})
    cfg.preset = preset_label(path)
    return cfg
