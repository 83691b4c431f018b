"""One extension pattern for the whole package: a `Registry` per extension point (presets, growth
families, projections, attention and MLP kinds, analyses, CLI subcommands). An extension is a
decorated function or class in its own module:

    @PROJECTIONS.register("nexus_rank")
    def make_nexus_rank(cfg, target, d_in, d_out, bias): ...

A registry that names its package imports every module of that package on the first lookup, so
adding a feature is adding a file: there is no central import list to keep in step.

Third-party packages extend the same registries without touching nexus: they declare an entry point
in the group `nexus.plugins` (pyproject.toml: `[project.entry-points."nexus.plugins"] mine = "my_pkg.nexus_plugin"`),
whose module registers its entries with the decorators above (`nexus.presets.register`,
`nexus.analysis.register_analysis`, `GROWERS.register`, `ATTENTION_KINDS.register`, ...); an entry point
naming a function (`my_pkg:setup`) has that function called. Every plugin is imported at the first
lookup of any registry; one that cannot be imported is a one-line ConfigError naming it (exit 2).
NEXUS_DISABLE_PLUGINS=1 skips them all.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Generic, TypeVar

from .errors import ConfigError

T = TypeVar("T")

PLUGIN_GROUP = "nexus.plugins"
_plugins: dict = {"loaded": False, "error": None, "current": None}  # process-wide: plugins load once


def load_plugins() -> None:
    """Import every `nexus.plugins` entry point once (calling it when it names a function). A failure is
    remembered and raised again at every later lookup: its entries may be half-registered."""
    if _plugins["error"] is not None:
        raise _plugins["error"]
    if _plugins["loaded"] or os.environ.get("NEXUS_DISABLE_PLUGINS") == "1":
        return
    _plugins["loaded"] = True  # set first: a plugin may look entries up while it is imported
    from importlib.metadata import entry_points

    for ep in entry_points(group=PLUGIN_GROUP):
        _plugins["current"] = ep.name
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, (ModuleType, type)):
                obj()
        except Exception as e:  # any failure of third-party code: one line naming the plugin, not a traceback
            dist = getattr(ep, "dist", None)
            where = f"{ep.value}" + (f" from package {dist.name}" if dist is not None else "")
            if isinstance(e, ModuleNotFoundError) and e.name and ep.module.startswith(e.name):
                what = f"names module {ep.module!r}, which is not installed"
            else:
                what = f"failed to load ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
            # raised by name: mypy keeps _plugins["error"] narrowed to None by the check above, past the assignment
            error = ConfigError(
                f"plugin {ep.name!r} ({where}) {what} (valid: fix or uninstall that "
                "package, or set NEXUS_DISABLE_PLUGINS=1)"
            )
            _plugins["error"] = error
            raise error from None
        finally:
            _plugins["current"] = None


def import_submodules(package_name: str, package_path) -> None:
    for info in pkgutil.iter_modules(package_path):
        importlib.import_module(f"{package_name}.{info.name}")


class Registry(Generic[T]):
    """name -> entry. `what` names the setting users choose the entry with (for error messages);
    `package` (or each of a tuple of packages) is imported, with all its modules, before the first lookup."""

    def __init__(self, what: str, package: str | tuple[str, ...] | None = None, plugins: bool = True):
        self.what, self.plugins = what, plugins
        self.packages = (package,) if isinstance(package, str) else tuple(package or ())  # each scanned whole
        self._entries: dict[str, T] = {}
        self.origins: dict[str, str] = {}  # entry name -> the plugin that registered it (built-ins: absent)
        self._loaded = not self.packages and not plugins

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@registry.register(name)` on the entry; returns the entry unchanged."""

        def add(entry: T) -> T:
            if name in self._entries:
                raise RuntimeError(f"{self.what} {name!r} registered twice")
            self._entries[name] = entry
            if _plugins["current"] is not None:
                self.origins[name] = _plugins["current"]
            return entry

        return add

    def load(self) -> None:
        """Import the package's modules once, so each has registered its entries."""
        if self._loaded:
            return
        self._loaded = True  # set first: a module may look entries up while it is imported
        try:
            for name in self.packages:
                import_submodules(name, importlib.import_module(name).__path__)
        except BaseException:
            self._loaded = False
            raise
        if self.plugins:  # after the built-ins: a plugin's entries may derive from them
            load_plugins()

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
