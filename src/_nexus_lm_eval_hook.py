"""Registers nexus with lm-evaluation-harness when, and only when, lm-eval's registry is imported.

lm-eval 0.4.13 finds no models from other packages (no entry-point discovery), so its own
`lm_eval --model nexus` could not see ours. `nexus-lm-eval.pth`, installed into site-packages by
setup.py, imports this module at every interpreter start. It must cost nothing there: it imports
neither torch nor nexus nor lm_eval, only puts a finder on `sys.meta_path` that waits for
`lm_eval.api.registry` to finish loading and then adds "nexus" as a lazy "module:Class" string,
which lm-eval itself imports on `get_model("nexus")`. Kept out of the `nexus` package on purpose:
importing `nexus.anything` would run `nexus/__init__.py` at every interpreter start.
"""

import sys

REGISTRY_MODULE = "lm_eval.api.registry"
MODEL_NAME = "nexus"
MODEL_TARGET = "nexus.eval.lm_eval_adapter:NexusLM"


def register_nexus(registry_module) -> None:
    """Add the lazy "nexus" entry to lm-eval's model registry (idempotent)."""
    # lm-eval fills its registry with its own (lazy) models only if the registry is still empty at the
    # first get_model(); registering "nexus" alone first would hide "hf" and the rest. lm_eval.models
    # is a plain name -> "module:Class" table, cheap to import.
    import lm_eval.models  # noqa: F401

    registry = registry_module.model_registry
    if MODEL_NAME not in registry:
        registry.register(MODEL_NAME, target=MODEL_TARGET)


class _RegistryWatcher:
    """A meta-path finder that answers only for lm-eval's registry module, whose normal spec it
    takes from the finders after it and wraps so registration runs right after the module executes."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module):
            del loader.exec_module  # the class's own again: a loader can serve many modules (zipimporter)
            exec_module(module)
            _uninstall()
            try:
                register_nexus(module)
            except Exception as exc:  # never break lm-eval itself: only "nexus" goes missing, with a reason
                import warnings

                warnings.warn(
                    f"nexus could not register with lm-eval ({type(exc).__name__}: {exc}); "
                    "`--model nexus` is unavailable in this process",
                    RuntimeWarning,
                    stacklevel=2,
                )

        loader.exec_module = exec_then_register  # on this instance, for this one load
        return spec


_WATCHER = _RegistryWatcher()


def _uninstall() -> None:
    if _WATCHER in sys.meta_path:
        sys.meta_path.remove(_WATCHER)


def install() -> None:
    """Called by nexus-lm-eval.pth at interpreter start."""
    if REGISTRY_MODULE in sys.modules:  # already loaded (only when called by hand, not from the .pth)
        register_nexus(sys.modules[REGISTRY_MODULE])
    elif _WATCHER not in sys.meta_path:
        sys.meta_path.insert(0, _WATCHER)
