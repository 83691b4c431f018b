"""Helpers shared by subcommands: building a RunConfig from --preset/--config/overrides."""
from __future__ import annotations

import argparse
import math

from ..config import ConfigError, RunConfig, parse_overrides


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """--help that states every option's default (argparse's ArgumentDefaultsHelpFormatter skips options
    without a help text and prints Python reprs: None, False, [])."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not action.option_strings or action.required or action.default is argparse.SUPPRESS or "default" in text:
            return text
        d = action.default
        shown = "off" if d is False else "none" if d in (None, [], ()) else "%(default)r" if isinstance(d, str) else "%(default)s"
        return f"{text} (default: {shown})".lstrip()


def add_config_args(p: argparse.ArgumentParser, default_preset: str | None = "baseline-tiny") -> None:
    p.add_argument("--preset", default=None, help=f"preset name (see `nexus presets`; default {default_preset})")
    p.add_argument("--config", default=None, help="YAML config file (presets and overrides apply on top)")
    p.set_defaults(accepts_overrides=True, default_preset=default_preset)


def build_config(args, extra: list[str]) -> RunConfig:
    from ..presets import get_preset

    if args.config and args.preset:
        raise ConfigError(f"--preset={args.preset!r} and --config={args.config!r} both given (valid: one of them)")
    if args.config:
        cfg = RunConfig.load_yaml(args.config)
    else:
        cfg = get_preset(args.preset or args.default_preset)
    parse_overrides(cfg, extra)
    return cfg.validate()


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
