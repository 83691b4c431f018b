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

import torch

from ..config import ConfigError, RunConfig
from . import GrowthResult, ParamMap, register_grower

KINDS = ("higher-order",)
MODES = ("paper", "lossless")


def retrofit_model_config(model_cfg, spec: dict):
    """The ModelConfig of the retrofitted model (validated by the caller through RunConfig)."""
    kind = spec.get("kind", "higher-order")
    if kind not in KINDS:
        raise ConfigError(f"--retrofit={kind!r} (valid: {'|'.join(KINDS)})")
    mode = spec.get("mode", "paper")
    if mode not in MODES:
        raise ConfigError(f"retrofit mode={mode!r} (valid: {'|'.join(MODES)})")
    order = spec.get("order", 2)
    if isinstance(order, bool) or not isinstance(order, int) or order < 2:
        raise ConfigError(f"--order={order!r} (valid: an integer >= 2 for a higher-order retrofit)")
    new = copy.deepcopy(model_cfg)
    a = new.attention
    a.order = order
    a.ho_targets = spec.get("targets", a.ho_targets)
    a.ho_form = spec.get("form", a.ho_form)
    shared = spec.get("shared")
    a.ho_shared = (mode == "lossless" or a.ho_form == "self") if shared is None else bool(shared)
    a.ho_gate = mode == "lossless"
    errors: list[str] = []
    a.validate(errors, "model.attention")
    if errors:
        raise ConfigError("invalid retrofit: " + "; ".join(errors))
    return new


@register_grower("retrofit")
def grow_retrofit(model, cfg: RunConfig, spec: dict) -> GrowthResult:
    from ..models import build_model
    from ..models.transformer import TransformerLM

    if not isinstance(model, TransformerLM) or model.cfg.arch != "transformer":
        raise ConfigError(f"model.arch={model.cfg.arch!r} cannot be retrofitted with higher-order attention "
                          f"(valid: a transformer checkpoint; this one has no attention layers)")
    if model.cfg.attention.order != 1:
        raise ConfigError(f"model.attention.order={model.cfg.attention.order} is already higher-order "
                          f"(valid: a standard-attention checkpoint, order 1)")
    new_cfg = retrofit_model_config(model.cfg, spec)
    seed = spec.get("seed", 0)
    devices = {p.device for p in model.parameters()}
    dtypes = {p.dtype for p in model.parameters()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))  # the random recursive parts are reproducible
        new_model = build_model(new_cfg)
    new_model.to(device=next(iter(devices)), dtype=next(iter(dtypes)))
    old = model.state_dict()
    missing, unexpected = new_model.load_state_dict(old, strict=False)
    if unexpected:
        raise ConfigError(f"retrofit cannot place {unexpected[0]!r} in the higher-order model "
                          f"(valid: a standard nexus Transformer checkpoint)")
    new_names = set(missing)
    maps = {name: ParamMap(old_name=None if name in new_names else name) for name, _ in new_model.named_parameters()}
    n_new = sum(p.numel() for name, p in new_model.named_parameters() if name in new_names)
    a = new_cfg.attention
    record = {"retrofit": "higher-order", "order": a.order, "targets": a.ho_targets, "form": a.ho_form,
              "shared": a.ho_shared, "gate": a.ho_gate, "new_parameters": n_new}
    report = {"retrofit": f"higher-order order {a.order} ({spec.get('mode', 'paper')} way)",
              "new_parameters": n_new, "new_tensors": len(new_names)}
    return GrowthResult(model=new_model, model_cfg=new_cfg, param_maps=maps, record=record, report=report)


def add_cli_args(parser) -> None:
    g = parser.add_argument_group("Retrofit (Nexus higher-order attention)")
    g.add_argument("--retrofit", default=None, choices=list(KINDS), help="convert standard attention to higher-order")
    g.add_argument("--order", type=int, default=2, help="higher-order attention order m (>= 2)")
    g.add_argument("--ho-targets", default=None, help="q | qk (default) | qkv: what the inner attention refines")
    g.add_argument("--ho-form", default=None, help="projected (eq. 12, default) | self (eq. 7-8)")
    g.add_argument("--lossless", action="store_true",
                   help="zero-initialized gate on the refinement: logits unchanged at conversion")
    shared = g.add_mutually_exclusive_group()
    shared.add_argument("--ho-shared", dest="ho_shared", action="store_const", const=True, default=None,
                        help="inner attention reuses the layer's weights (default with --lossless)")
    shared.add_argument("--ho-separate", dest="ho_shared", action="store_const", const=False,
                        help="new random inner weights per target (default for the paper way)")
    g.add_argument("--retrofit-seed", type=int, default=0, help="seed of the random recursive parts")


def spec_from_args(args) -> dict | None:
    if getattr(args, "retrofit", None) is None:
        return None
    spec = {"family": "retrofit", "kind": args.retrofit, "order": args.order,
            "mode": "lossless" if args.lossless else "paper", "seed": args.retrofit_seed}
    if args.ho_targets is not None:
        spec["targets"] = args.ho_targets
    if args.ho_form is not None:
        spec["form"] = args.ho_form
    if args.ho_shared is not None:
        spec["shared"] = args.ho_shared
    return spec
