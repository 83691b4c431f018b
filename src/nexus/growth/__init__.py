"""Model growth: one API for every growth family (Nexus-Rank M/A, TokenFormer tokens, SPARKLING
width, higher-order retrofit), carrying the whole training state across the change.

A family module in this package declares its typed spec (`spec.GrowthSpec` subclass with `validate`
and `applies_to`) and registers a grower for it:

    @register_grower("width", WidthSpec)
    def grow_width(model, cfg: RunConfig, spec: WidthSpec) -> GrowthResult: ...

It returns the new model (already initialized, built by `inherit.inherit`), the new ModelConfig, and
for every parameter of the new model how the old values sit inside it (`ParamMap`). Everything else is
generic, one module per job: the family registry (`registry.py`), optimizer-state surgery by parameter
*name* with per-element AdamW steps and re-warmup masks (`optimizer_surgery.py`), growing a model and
recording it in the config (`generic_grow.py`), and the checkpoint flow (`checkpoint_flow.py`: validate
everything, then write atomically, the source untouched). Growth inside a training run is
`growth.hook.GrowthHook`, the hook kind "growth" a run config turns on in `train.hooks` (the trainer
never imports growth).
"""

from __future__ import annotations

from .checkpoint_flow import grow_checkpoint
from .generic_grow import grow
from .optimizer_surgery import transplant_optimizer_state
from .param_map import ParamMap
from .registry import GROWERS, GrowthResult, families, parse_growth_spec, register_grower
from .spec import OPTIMIZER_STATE_POLICIES, GrowthSpec, spec_classes
from .verification import verify

__all__ = [
    "ParamMap",
    "GrowthResult",
    "GrowthSpec",
    "GROWERS",
    "register_grower",
    "families",
    "parse_growth_spec",
    "spec_classes",
    "grow",
    "grow_checkpoint",
    "verify",
    "transplant_optimizer_state",
    "OPTIMIZER_STATE_POLICIES",
]
