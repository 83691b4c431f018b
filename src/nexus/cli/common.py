"""Helpers shared by subcommands: building a RunConfig from --preset/--config/overrides."""
from __future__ import annotations

import argparse
import math

from ..config import ConfigError, RunConfig, parse_overrides


def add_config_args(p: argparse.ArgumentParser, default_preset: str | None = "baseline-tiny") -> None:
    p.add_argument("--preset", default=None, help=f"preset name (see `nexus presets`; default {default_preset})")
    p.add_argument("--config", default=None, help="YAML config file (presets and overrides apply on top)")
    p.set_defaults(accepts_overrides=True, default_preset=default_preset)


def build_config(args, extra: list[str]) -> RunConfig:
    return parse_overrides(base_config(args), extra).validate()


def base_config(args) -> RunConfig:
    """The config --preset / --config name (the default preset without either), before overrides."""
    from ..presets import get_preset

    if args.config and args.preset:
        raise ConfigError(f"--preset={args.preset!r} and --config={args.config!r} both given (valid: one of them)")
    if args.config:
        return RunConfig.load_yaml(args.config)
    return get_preset(args.preset or args.default_preset)


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
