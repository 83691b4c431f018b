"""The error every layer raises for bad user input. Its own module, at the bottom of the import graph,
so that the registry (plugins.py) and the schema (config.py) both use it without importing each other."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input in a config, a preset name or an override. CLI maps it to exit code 2."""
