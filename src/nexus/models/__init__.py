"""Model zoo: `build_model(ModelConfig)` builds the architecture `model.arch` names (models/kinds.py)."""
from __future__ import annotations

import torch.nn as nn

from ..config import ModelConfig
from .lm_loss import LMOutput


def build_model(cfg: ModelConfig) -> nn.Module:
    """ModelConfig -> the model it describes."""
    if not isinstance(cfg, ModelConfig):
        hint = " (a RunConfig: pass cfg.model)" if type(cfg).__name__ == "RunConfig" else ""
        raise TypeError(f"build_model(cfg): cfg is a {type(cfg).__name__}{hint} (valid: a nexus.ModelConfig)")
    errors: list[str] = []  # the same rules the CLI applies: a bad config is one line here, never a torch error
    cfg.validate(errors)
    if errors:
        from ..config import ConfigError

        raise ConfigError("invalid model config: " + "; ".join(errors))
    from .accounting import check_model_size
    from .kinds import architecture

    check_model_size(cfg)

    arch = architecture(cfg)
    if arch is not None:
        return arch.build(cfg)
    from .transformer import TransformerLM

    return TransformerLM(cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["build_model", "count_parameters", "LMOutput"]
