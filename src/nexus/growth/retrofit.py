"""Retrofit a trained standard Transformer with Nexus higher-order attention.

Two ways (spec["mode"]):
* paper: the paper's Qwen2.5 upgrade. Outer projections keep their trained weights; the recursive
  parts are new and random (with separate inner weights, the default here, each refined target gets
  its own randomly initialized inner attention). The model's function changes at once.
* lossless: the same architecture plus a zero-initialized per-head gate on each refinement
  (attention.ho_gate), so logits are unchanged at conversion and the gate opens during fine-tuning.
  Shared inner weights by default: no new matrices at all, only the gates.

CLI: `nexus grow --retrofit higher-order --order 2 [--ho-targets qk] [--ho-form projected]
[--lossless] [--ho-shared|--ho-separate] --checkpoint A --out B`, then `nexus train --resume B`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

from ..config import AttentionOptions, ConfigError, RunConfig
from .inherit import inherit
from .methods import Method, register_method
from .registry import GrowthResult, register_grower
from .spec import GrowthSpec, check_int, option

KINDS = ("higher-order",)
MODES = ("paper", "lossless")


@dataclass
class RetrofitSpec(GrowthSpec):
    """Nexus higher-order attention retrofit of a standard-attention Transformer."""

    triggers: ClassVar[tuple[str, ...]] = ("kind",)

    kind: str = option("higher-order", "what the attention is converted to", "--retrofit", choices=KINDS)
    order: int = option(2, "higher-order attention order m (>= 2)", "--order", kind=int, metavar="M")
    mode: str = option(
        "paper",
        "paper (new random recursive parts) | lossless (zero-initialized gate on each "
        "refinement: logits unchanged at conversion)",
        consts={"--lossless": "lossless"},
    )
    targets: str = option(None, "what the inner attention refines: q | qk (default) | qkv", "--ho-targets", metavar="T")
    form: str = option(None, "projected (eq. 12, default) | self (eq. 7-8)", "--ho-form", metavar="F")
    shared: bool = option(
        None,
        "whether the inner attention reuses the layer's weights (default: shared with "
        "--lossless or form self, separate random inner weights for the paper way)",
        consts={"--ho-shared": True, "--ho-separate": False},
    )
    seed: int = option(0, "seed of the random recursive parts", "--growth-seed", kind=int, metavar="S")

    def validate(self) -> RetrofitSpec:
        super().validate()
        if self.kind not in KINDS:
            raise ConfigError(f"--retrofit={self.kind!r} (valid: {'|'.join(KINDS)})")
        if self.mode not in MODES:
            raise ConfigError(f"retrofit mode={self.mode!r} (valid: {'|'.join(MODES)})")
        if isinstance(self.order, bool) or not isinstance(self.order, int) or self.order < 2:
            raise ConfigError(f"--order={self.order!r} (valid: an integer >= 2 for a higher-order retrofit)")
        check_int(self.seed, "--growth-seed", minimum=0, allow_none=False)
        return self

    def applies_to(self, model_cfg) -> None:
        """A standard-attention (order 1) transformer whose retrofitted attention config is valid."""
        if model_cfg.arch.kind != "transformer":
            raise ConfigError(
                f"model.arch.kind={model_cfg.arch.kind!r} cannot be retrofitted with higher-order attention "
                f"(valid: a transformer; this one has no attention layers)"
            )
        if model_cfg.attention.kind != "standard":
            raise ConfigError(
                f"model.attention.kind={model_cfg.attention.kind!r}: the model is not standard attention, "
                f"e.g. already higher-order (valid: a standard-attention checkpoint)"
            )
        retrofit_model_config(model_cfg, self)


def retrofit_model_config(model_cfg, spec: RetrofitSpec):
    """The ModelConfig of the retrofitted model (validated by the caller through RunConfig)."""
    new = copy.deepcopy(model_cfg)
    form = spec.form or "projected"
    shared = (spec.mode == "lossless" or form == "self") if spec.shared is None else bool(spec.shared)
    opts = {"order": spec.order, "ho_form": form, "ho_shared": shared, "ho_gate": spec.mode == "lossless"}
    if spec.targets:
        opts["ho_targets"] = spec.targets
    try:
        new.attention = AttentionOptions.make("higher_order", **model_cfg.attention.common(), **opts)
    except ConfigError as e:
        raise ConfigError(f"invalid retrofit: {e}") from None
    a = new.attention
    errors: list[str] = []
    a.validate(errors, "model.attention", new)
    if errors:
        raise ConfigError("invalid retrofit: " + "; ".join(errors))
    return new


@register_grower("retrofit", RetrofitSpec)
def grow_retrofit(model, cfg: RunConfig, spec: RetrofitSpec) -> GrowthResult:
    new_cfg = retrofit_model_config(model.cfg, spec)
    # the recursive parts the standard model lacks keep the new model's own (seeded) initialization
    new_model, maps, _ = inherit(model, new_cfg, init_seed=spec.seed)
    new_names = {name for name, pm in maps.items() if pm.old_name is None}
    n_new = sum(p.numel() for name, p in new_model.named_parameters() if name in new_names)
    a = new_cfg.attention
    record = {
        "retrofit": "higher-order",
        "order": a.order,
        "targets": a.ho_targets,
        "form": a.ho_form,
        "shared": a.ho_shared,
        "gate": a.ho_gate,
        "new_parameters": n_new,
    }
    report = {
        "retrofit": f"higher-order order {a.order} ({spec.mode} way)",
        "new_parameters": n_new,
        "new_tensors": len(new_names),
    }
    return GrowthResult(model=new_model, model_cfg=new_cfg, param_maps=maps, record=record, report=report)


# the progressive experiment's retrofit method (growth/methods.py)
register_method(
    Method(
        "retrofit-ho",
        "retrofit",
        "baseline-tiny",
        {"kind": "higher-order", "mode": "lossless", "order": 2},
        "retrofit 4x128 with order-2 higher-order attention (lossless zero-gated, shared weights)",
        {},
    ),
)
