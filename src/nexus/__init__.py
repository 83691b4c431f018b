"""nexus: train, grow, evaluate, analyse and export the architectures of five progressive-training papers."""

from .config import ConfigError, DataConfig, ModelConfig, RunConfig, TrainConfig

__version__ = "0.1.0"
__all__ = [
    "build_model",
    "load",
    "load_checkpoint",
    "save_checkpoint",
    "ConfigError",
    "ModelConfig",
    "DataConfig",
    "TrainConfig",
    "RunConfig",
    "__version__",
]

# torch-backed names load on first use: `nexus presets`, `nexus --help` and config tools never pay
# for importing torch (~1.5 s).
_LAZY = {
    "build_model": ".models",
    "load": ".checkpoint",
    "load_checkpoint": ".checkpoint",
    "save_checkpoint": ".checkpoint",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nexus' has no attribute {name!r}")
