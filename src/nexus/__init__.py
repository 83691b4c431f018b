"""nexus: train, grow, evaluate, analyse and export the architectures of five progressive-training papers."""
from .checkpoint import load, load_checkpoint, save_checkpoint
from .config import ConfigError, DataConfig, ModelConfig, RunConfig, TrainConfig
from .models import build_model

__version__ = "0.1.0"
__all__ = ["build_model", "load", "load_checkpoint", "save_checkpoint", "ConfigError", "ModelConfig",
           "DataConfig", "TrainConfig", "RunConfig", "__version__"]
