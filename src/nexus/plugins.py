"""One extension pattern for the whole package: a `Registry` per extension point (presets, growth
families, projections, attention and MLP kinds, analyses, CLI subcommands). An extension is a
decorated function or class in its own module:

    @PROJECTIONS.register("nexus_rank")
    def make_nexus_rank(cfg, target, d_in, d_out, bias): ...

A registry that names its package imports every module of that package on the first lookup, so
adding a feature is adding a file: there is no central import list to keep in step.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Generic, Iterator, TypeVar

from .config import ConfigError

T = TypeVar("T")


def import_submodules(package_name: str, package_path) -> None:
    for info in pkgutil.iter_modules(package_path):
        importlib.import_module(f"{package_name}.{info.name}")


class Registry(Generic[T]):
    """name -> entry. `what` names the setting users choose the entry with (for error messages);
    `package` is imported, with all its modules, before the first lookup."""

    def __init__(self, what: str, package: str | None = None):
        self.what, self.package = what, package
        self._entries: dict[str, T] = {}
        self._loaded = package is None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@registry.register(name)` on the entry; returns the entry unchanged."""
        def add(entry: T) -> T:
            if name in self._entries:
                raise RuntimeError(f"{self.what} {name!r} registered twice")
            self._entries[name] = entry
            return entry
        return add

    def load(self) -> None:
        """Import the package's modules once, so each has registered its entries."""
        if self._loaded:
            return
        self._loaded = True  # set first: a module may look entries up while it is imported
        try:
            package = importlib.import_module(self.package)
            import_submodules(self.package, package.__path__)
        except BaseException:
            self._loaded = False
            raise

    def get(self, name: str) -> T:
        """The entry called `name`; an unknown name is a ConfigError naming the valid ones."""
        self.load()
        if name not in self._entries:
            raise ConfigError(f"{self.what}={name!r} (valid: {'|'.join(self.names())})")
        return self._entries[name]

    def names(self) -> list[str]:
        self.load()
        return list(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        self.load()
        return iter(list(self._entries.items()))

    def __contains__(self, name: str) -> bool:
        self.load()
        return name in self._entries
