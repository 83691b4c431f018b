"""Growing a model with any registered family: the grower builds the grown model, this carries the rest
(the growth record in the config, the optimizer with its transplanted state, the re-warmup masks)."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..config import RunConfig
from ..config_base import to_dict
from .optimizer_surgery import transplant_optimizer_state
from .registry import GROWERS, parse_growth_spec


def grow(
    model: nn.Module, cfg: RunConfig, spec, optimizer_state: dict | None = None, step: int = 0, checked_against=None
):
    """Grow `model` per `spec` (a spec dataclass, or a mapping with "family"). Returns (new_model,
    new_cfg, new_optimizer, result).

    The new optimizer is built from cfg.train and receives the transplanted state; pass
    optimizer_state=None for a fresh optimizer (no state to carry). checked_against: the ModelConfig the
    caller already checked `spec` against (the growth hook, when the trainer was built): not checked again
    while the model is still that one.
    """
    from ..optim.param_groups import build_optimizer

    spec = parse_growth_spec(spec, "growth spec")
    if checked_against is None or checked_against != cfg.model:
        spec.applies_to(cfg.model)
    result = GROWERS.get(spec.family)(model, cfg, spec)
    new_cfg = copy.deepcopy(cfg)
    new_cfg.model = result.model_cfg
    # the model before the growth, whole: what a run resumed from this checkpoint trained before `step` (its
    # FLOPs per token for `nexus plot`, its parameter count) is known from the record alone
    record = {**spec.to_dict(), "step": step, **result.record, "model_before": to_dict(cfg.model)}
    new_cfg.growth_history.append(jsonable(record))
    new_cfg.validate()
    new_opt = build_optimizer(result.model, new_cfg.train)
    transplant_optimizer_state(optimizer_state or {}, new_opt, result.param_maps, spec.optimizer_state)
    if result.record.get("rewarmup_all"):  # the re-warmup baseline: every entry follows the new-entry lr
        new_opt.use_elementwise_adamw()
        for opt in new_opt.optimizers.values():
            for group in opt.param_groups:
                for p in group["params"]:
                    opt.state[p]["new_mask"] = torch.ones_like(p)
    return result.model, new_cfg, new_opt, result


def jsonable(obj):
    """Tensors and other values a record may hold, as plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if torch.is_tensor(obj):
        return obj.tolist()
    if isinstance(obj, (int, float, str, bool)) or obj is None:
        return obj
    return str(obj)
