"""`nexus export`: placeholder parser; the implementing issue replaces this module."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="(in progress)")
    p.set_defaults(func=run, accepts_overrides=True)


def run(args, extra) -> int:
    from ..config import ConfigError

    raise ConfigError("`nexus export` is not implemented yet in this build")
