"""Helpers shared by subcommands: building a RunConfig from --preset/--config/overrides."""

from __future__ import annotations

import argparse
import functools
import math

from ..config import RunConfig
from ..config_migration import load_config_file
from ..config_overrides import merge_config_file, parse_overrides


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """--help that states every option's default (argparse's ArgumentDefaultsHelpFormatter skips options
    without a help text and prints Python reprs: None, False, [])."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not action.option_strings or action.required or action.default is argparse.SUPPRESS or "default" in text:
            return text
        d = action.default
        shown = (
            "off"
            if d is False
            else "none"
            if d in (None, [], ())
            else "%(default)r"
            if isinstance(d, str)
            else "%(default)s"
        )
        return f"{text} (default: {shown})".lstrip()


@functools.cache
def growth_flags() -> frozenset[str]:
    """The option strings the growth families' specs declare (`option(default, reason, "--flag")` and the
    flags of its `consts`), read from the source of the growth package's modules without importing them (they
    import torch), so a mistyped flag is refused before torch loads (cli/__init__.py) and a new family's file
    is found with no list to edit. A flag built at run time is dotted (`--width.<axis>`): such names are never
    refused early. tests/test_core_cli.py holds this to the flags `cli/grow.py:add_growth_flags` generates."""
    import ast
    import importlib.util
    from pathlib import Path

    flags = set()
    for folder in importlib.util.find_spec("nexus.growth").submodule_search_locations:
        for path in sorted(Path(folder).glob("*.py")):
            text = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(text)) if "option(" in text else ():
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "option":
                    given = dict(zip(("default", "reason", "flag"), node.args)) | {
                        k.arg: k.value for k in node.keywords
                    }
                    flags |= {
                        c.value
                        for c in [given.get("flag"), *getattr(given.get("consts"), "keys", [])]
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    }
    return frozenset(flags)


FIELDS_EPILOG = "\0config fields of preset "  # + a preset name: the epilog ConfigFieldsHelpFormatter fills in


class ConfigFieldsHelpFormatter(DefaultsHelpFormatter):
    """--help of a command that takes dotted overrides: its options with their defaults, then every config
    field with its value in the default preset and its one-line reason (`nexus config --preset P`'s
    listing), built only when the help is shown."""

    def _fill_text(self, text, width, indent):
        if not text.startswith(FIELDS_EPILOG):
            return super()._fill_text(text, width, indent)
        from ..config_help import format_fields
        from ..presets import get_preset

        preset = text[len(FIELDS_EPILOG) :]
        head = (
            f"config fields, set with --section.field VALUE (or in --config FILE.yaml); the values are preset "
            f"{preset}'s, the default (`nexus config --preset NAME` lists another's):"
        )
        return "\n".join(
            [
                super()._fill_text(head, width, indent),
                *(indent + line for line in format_fields(get_preset(preset)).splitlines()),
            ]
        )


def add_config_args(p: argparse.ArgumentParser, default_preset: str | None = "baseline-tiny") -> None:
    p.add_argument(
        "--preset",
        default=None,
        metavar="NAME|FILE.yaml",
        help=f"preset name (see `nexus presets`) or a YAML file of your own (default {default_preset})",
    )
    add_config_file_arg(p)
    p.set_defaults(accepts_overrides=True, default_preset=default_preset)


def add_config_file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="YAML config file; with --preset only the fields it names change the preset; dotted "
        "overrides apply on top of both",
    )


def config_file_mapping(args) -> dict | None:
    """The fields `--config FILE` names (None: no file), read and migrated once: an experiment merges
    this mapping onto each run's preset (config_overrides.merge_mapping), then the command line's
    overrides on top, as a single run does (base_config)."""
    from ..config_migration import read_config_file

    return read_config_file(args.config) if getattr(args, "config", None) else None


def build_config(args, extra: list[str]) -> RunConfig:
    """--config alone: the file's config (defaults for what it leaves out); with --preset (or without
    either): the preset with the file's fields on top; then the dotted overrides."""
    return parse_overrides(base_config(args), extra).validate()


def base_config(args) -> RunConfig:
    """The config --preset / --config describe (file over preset), before the command line's overrides."""
    from ..presets import get_preset

    if args.config and not args.preset:
        return load_config_file(args.config)
    return merge_config_file(get_preset(args.preset or args.default_preset), args.config)


def override_keys(extra: list[str]) -> set[str]:
    """The dotted fields a list of `--section.field VALUE` / `--section.field=VALUE` arguments sets."""
    return {a[2:].split("=", 1)[0] for a in extra if a.startswith("--") and "." in a.split("=", 1)[0]}


def positive_int(name: str):
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: an integer > 0)") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: an integer > 0)")
        return v

    return parse


def nonneg_float(name: str):
    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: a finite number >= 0)") from None
        if not math.isfinite(v) or v < 0:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: a finite number >= 0)")
        return v

    return parse


def int_in_range(name: str, lo: int, hi: int, valid: str):
    """An integer in [lo, hi]; `valid` describes the range in the error."""

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: {valid})") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name}={s!r} (valid: {valid})")
        return v

    return parse
