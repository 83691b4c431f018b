"""The growth-family registry: a family module registers its spec dataclass and its grower with one
line, `@register_grower("<family>", <Spec>)`, and the first lookup imports every module of the package."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch.nn as nn

from ..config import ModelConfig, RunConfig
from ..plugins import Registry
from .param_map import ParamMap
from .spec import GrowthSpec, register_spec, spec_from_dict


@dataclass
class GrowthResult:
    model: nn.Module  # the grown model, initialized
    model_cfg: ModelConfig  # its config
    param_maps: dict[str, ParamMap]  # new parameter name -> how old values embed in it
    record: dict = field(default_factory=dict)  # what happened (family, sizes, init, mode, ...) for growth_history
    report: dict = field(default_factory=dict)  # diagnostics to print (RMS ratios, warnings, ...)


# The same extension pattern as presets, projections and analyses: a family module registers itself,
# and the first lookup imports every module of this package.
GROWERS: Registry[Callable[[nn.Module, RunConfig, GrowthSpec], GrowthResult]] = Registry(
    "growth spec family", __package__
)


def register_grower(family: str, spec_cls: type[GrowthSpec]):
    """The one registration line of a growth family: its name, its spec dataclass and its grower."""

    def deco(fn):
        register_spec(family, spec_cls)
        return GROWERS.register(family)(fn)

    return deco


def families() -> list[str]:
    return sorted(GROWERS.names())


def parse_growth_spec(spec, where: str = "growth spec") -> GrowthSpec:
    """A growth spec (mapping with "family", or a spec dataclass) -> its validated dataclass."""
    GROWERS.load()
    return spec_from_dict(spec, where)
