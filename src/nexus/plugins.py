"""Registries fill themselves by importing every module of their package once (presets, growth
families): adding a feature is adding a file, with no central list to edit."""
from __future__ import annotations

import importlib
import pkgutil


def import_submodules(package_name: str, package_path) -> None:
    for info in pkgutil.iter_modules(package_path):
        importlib.import_module(f"{package_name}.{info.name}")
