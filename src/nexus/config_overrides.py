"""Changes on top of a config: dotted command-line overrides (`--model.d_model 256`) and a `--config`
file's mapping merged onto a preset.

Both go through one setter (`set_field`): a field is found by its dotted path, a kind section switches
kind keeping the options every kind of it shares, a moved or growth-only field is refused in one line.
A command line's values are text and are read as YAML scalars first; a file's mapping is merged as the
typed values it holds (`merge_mapping`), never turned into text and read back.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

import yaml

from .config import KindOptions, RunConfig
from .config_base import coerce
from .config_migration import LEGACY_MUON_FIELDS, MUON_KIND, dropped_muon_field, read_config_file
from .errors import ConfigError

# Fields (and whole sections) that moved, for the one-line answer to an override that still names them.
MOVED_FIELDS = {
    "model.moe": "model.mlp (valid: --model.mlp.kind moe, then --model.mlp.n_experts N, --model.mlp.top_k K, ...)",
    "train.grow_at": "train.hooks (valid: `nexus train --grow-at N`, or --train.hooks '[{kind: growth, at: N, "
    "spec: {family: width, hidden: 128}}]')",
    "train.betas": "train.optimizer.betas (each optimizer kind has its own, with its paper's default: valid: "
    "--train.optimizer.betas 0.9,0.95)",
    "train.eps": "train.optimizer.eps (each optimizer kind has its own: valid: --train.optimizer.eps 1e-8)",
    "train.growth": "train.hooks (valid: `nexus train --growth SPEC` or the family flags, or --train.hooks "
    "'[{kind: growth, at: N, spec: {family: width, hidden: 128}}]')",
}


def set_field(cfg: RunConfig, dotted: str, raw: Any, text: bool = False) -> None:
    """Set the field at `model.n_layers`-style `dotted` to `raw`, coerced to its type. text: `raw` comes
    from a command line, a string read as a YAML scalar first (a str field keeps it verbatim)."""
    parts = dotted.split(".")
    parent, obj = None, cfg
    for i, part in enumerate(parts):
        names = {f.name: f for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
        if isinstance(obj, KindOptions) and part == "kind" and i == len(parts) - 1:
            # a new kind: its own defaults, keeping the options every kind of the section shares (the
            # same kind again changes nothing, so a config file naming its kind keeps a preset's options)
            if raw == obj.kind:
                return
            new = obj.options_class(raw, ".".join(parts[:i]))(**obj.common())
            setattr(parent, parts[i - 1], new)
            return
        old_form = _section_named_by_kind(obj, part) if part not in names else None
        if old_form is not None:  # model.<kind>.<option>: the form before the kind owned its options
            section, kind = old_form
            if getattr(obj, section).kind != kind:
                raise ConfigError(
                    f"{dotted} is an option of {section} kind {kind}, not of "
                    f"{getattr(obj, section).kind!r} (valid: --{'.'.join(parts[:i])}.{section} {kind} before it)"
                )
            if i == len(parts) - 1:
                raise ConfigError(f"{dotted} is a section; set one of its fields, e.g. {dotted}.<field>")
            parent, obj = obj, getattr(obj, section)
            continue
        if isinstance(obj, KindOptions) and part not in names:
            owners = [k for k, c in obj.kinds().items() if part in {f.name for f in dataclasses.fields(c)}]
            if owners:
                raise ConfigError(
                    f"{dotted} is an option of {obj.section} kind {'|'.join(owners)}, not of "
                    f"{obj.kind!r} (valid: --{'.'.join(parts[:i])}.kind {owners[0]} before it)"
                )
        if part not in names and i == len(parts) - 1 and dotted in _LEGACY_MUON:
            return _set_legacy_muon(cfg, dotted, raw, text)
        if part not in names:
            moved = next((v for k, v in MOVED_FIELDS.items() if dotted == k or dotted.startswith(k + ".")), None)
            if moved:
                raise ConfigError(f"{dotted} moved into {moved}")
            where = ".".join(parts[:i]) or "top level"
            valid = (
                ", ".join(sorted(n for n, f in names.items() if not f.metadata.get("set_by_growth"))) or "no sub-fields"
            )
            raise ConfigError(f"unknown field {dotted!r} (valid at {where}: {valid})")
        if names[part].metadata.get("set_by_growth"):
            raise ConfigError(
                f"{dotted} is set by growth only (valid: grow the model with `nexus grow` or "
                "--grow-at; it records the scales the growth pinned)"
            )
        if i == len(parts) - 1:
            tp = typing.get_type_hints(type(obj))[part]
            if isinstance(getattr(obj, part), KindOptions):  # --model.arch <kind>: the section's kind
                return set_field(cfg, f"{dotted}.kind", raw, text)
            if dataclasses.is_dataclass(tp):
                raise ConfigError(f"{dotted} is a section; set one of its fields, e.g. {dotted}.<field>")
            value = raw
            if text and isinstance(raw, str):
                try:
                    value = yaml.safe_load(raw) if raw != "" else ""
                except yaml.YAMLError:
                    value = raw
                if tp is str or (tp in (list[str],) and isinstance(value, str)):
                    value = raw
            setattr(obj, part, coerce(value, tp, dotted))
        else:
            parent, obj = obj, getattr(obj, part)


_LEGACY_MUON = {f"train.{old}": f"train.optimizer.{new}" for old, new in LEGACY_MUON_FIELDS.items()}


def _set_legacy_muon(cfg: RunConfig, dotted: str, raw: Any, text: bool) -> None:
    """`train.muon_lr` and the other Muon fields before the muon kind owned its options (issue 49): set as the
    muon kind's option it became, the move named in one line on stderr. Beside another kind: a command line's is
    refused in one line (it would set nothing; naming the order that sets it), a config file's had no effect
    there before either and is dropped (named when it is not its default)."""
    new, kind = _LEGACY_MUON[dotted], cfg.train.optimizer.kind
    value = _scalar(raw) if text else raw
    if kind == MUON_KIND:
        set_field(cfg, new, raw, text)
        print(f"config: {dotted} is now {new} (the muon kind's own option, issue 49): {new}={value!r}", file=sys.stderr)
    elif text:
        raise ConfigError(
            f"{dotted}={value!r} moved into {new}, an option of optimizer kind muon, not of {kind!r} (valid: "
            f"--train.optimizer muon, then --{new} {raw})"
        )
    else:
        dropped_muon_field(dotted.split(".", 1)[1], value, kind)


def _scalar(raw: str):
    """A command line's text as the YAML scalar it reads as (the text itself where it is none)."""
    try:
        return yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        return raw


def _section_named_by_kind(obj, name: str) -> tuple[str, str] | None:
    """(section, kind) when `name` is a kind of one of `obj`'s sections that takes the old spelling
    `<kind>.<option>` (`addressed_by_kind`), else None. Looks kinds up only for a name that is no field."""
    if not dataclasses.is_dataclass(obj):
        return None
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, KindOptions) and v.addressed_by_kind and name in v.kinds():
            return f.name, name
    return None


def apply_override(cfg: RunConfig, dotted: str, raw: Any) -> None:
    """One command-line override `--<dotted> <raw>` (raw: its text, or a value already typed)."""
    set_field(cfg, dotted, raw, text=True)


def merge_mapping(cfg: RunConfig, d: dict, prefix: str = "") -> RunConfig:
    """A (partial) config mapping on top of `cfg`: only the fields it names change. Within a kind section
    its `kind` is set first, so the kind's own options may follow it in any order."""

    def walk(section, d: dict, prefix: str) -> None:
        for k in sorted(d, key=lambda k: k != "kind"):
            v, sub = d[k], getattr(section, str(k), None)
            old_form = _section_named_by_kind(section, str(k)) if sub is None and isinstance(v, dict) else None
            if old_form:
                sub = getattr(section, old_form[0])  # the old model.<kind>.<option> form
            if dataclasses.is_dataclass(sub) and isinstance(v, dict):
                walk(sub, v, f"{prefix}{k}.")
            else:
                set_field(cfg, f"{prefix}{k}", v)

    walk(cfg, d, prefix)
    return cfg


def merge_config_file(cfg: RunConfig, path: str | Path | None, flag: str = "--config") -> RunConfig:
    """`cfg` with the fields the config file at `path` names (None: no file) set to its values."""
    return cfg if path is None else merge_mapping(cfg, read_config_file(path, flag))


def mapping_sets(d: dict | None, dotted: str) -> bool:
    """Whether a (partial) config mapping names the field at `dotted` (`train.lr`)."""
    *sections, name = dotted.split(".")
    for s in sections:
        d = d.get(s) if isinstance(d, dict) else None
    return isinstance(d, dict) and name in d


def parse_overrides(cfg: RunConfig, args: list[str]) -> RunConfig:
    """Apply `--a.b value` / `--a.b=value` pairs from a command line."""
    _refuse_both_muon_spellings(args)
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or "." not in a.split("=")[0]:
            raise ConfigError(f"unrecognized argument {a!r} (valid: --section.field VALUE, e.g. --model.n_layers 4)")
        if "=" in a:
            key, val = a[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"{a} needs a value (e.g. {a} 4)")
            key, val = a[2:], args[i + 1]
            i += 2
        apply_override(cfg, key, val)
    return cfg


def _refuse_both_muon_spellings(args: list[str]) -> None:
    """An old train.muon_* and the muon option it became on one command line with different values: which one was
    meant is not known, so neither is applied (one line). The same value twice is the same setting."""
    given: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--") and "." in a.split("=", 1)[0]:
            key, eq, val = a[2:].partition("=")
            if not eq and i + 1 < len(args):
                val = args[i + 1]
            given[key] = val
    for old, new in _LEGACY_MUON.items():
        if old in given and new in given and _number_or_text(given[old]) != _number_or_text(given[new]):
            raise ConfigError(
                f"{old}={given[old]} and {new}={given[new]} given together ({old} is the old name of {new}; valid: "
                f"--{new} alone)"
            )


def _number_or_text(raw: str):
    v = _scalar(raw)
    try:
        return float(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else v
    except ValueError:
        return v
