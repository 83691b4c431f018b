"""Model zoo: `build_model(ModelConfig)` builds the architecture `model.arch` names (models/kinds.py)."""

from __future__ import annotations

import torch
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
    from .size_check import check_model_size, formula_count

    n = formula_count(cfg)
    if n is None and torch.get_default_device().type != "meta":  # a kind with no count of its own: count on meta
        with torch.device("meta"):
            n = count_parameters(_build(cfg))
    check_model_size(cfg, n)
    return _build(cfg)


def _build(cfg: ModelConfig) -> nn.Module:
    """The architecture `cfg.arch` names, built from a validated config."""
    from .kinds import architecture

    arch = architecture(cfg)
    if arch is not None:
        return arch.build(cfg)
    from .transformer import TransformerLM

    return TransformerLM(cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["build_model", "count_parameters", "LMOutput"]
