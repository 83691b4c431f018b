"""Which optimizer and weight decay each parameter gets, decided by rule from its name and shape, and the
builders the optimizer kinds name (`OptimizerOptions.builder`).

A builder's contract: `build(named, tcfg) -> {name: torch optimizer}` for `named`, the trainable (name,
parameter) pairs in model order; each optimizer is a `GrowableOptimizer` (optim/base.py) or torch's AdamW, and
reads its own options from `tcfg.optimizer` (the kind's section). `adam_groups` is the usual split into decayed
and undecayed groups a builder may reuse. `build_optimizer` adds every group's `base_lr` (the schedule's peak)."""

from __future__ import annotations

import importlib

import torch.nn as nn

from ..config import TrainConfig
from .optimizers import AdamW, Muon, OptimizerSet, torch_adamw


def is_embedding_like(name: str) -> bool:
    return name.endswith("embed.weight") or "lm_head" in name or name.endswith("wte.weight")


def classify(name: str, p, tcfg: TrainConfig) -> str:
    """muon | decay | no_decay. Norms, biases, gains and embeddings are not decayed unless decay_all."""
    embed = is_embedding_like(name)
    if tcfg.optimizer.kind == "muon" and p.ndim == 2 and not embed:
        return "muon"
    if p.ndim < 2 or embed:
        return "decay" if tcfg.decay_all else "no_decay"
    return "decay"


def adam_groups(params_by_bucket: dict[str, list], tcfg: TrainConfig) -> list[dict]:
    """The decayed and the undecayed group (train.weight_decay, or none), each only when it has parameters."""
    groups = []
    if params_by_bucket.get("decay"):
        groups.append({"params": params_by_bucket["decay"], "weight_decay": tcfg.weight_decay, "name": "decay"})
    if params_by_bucket.get("no_decay"):
        groups.append({"params": params_by_bucket["no_decay"], "weight_decay": 0.0, "name": "no_decay"})
    return groups


def buckets_of(named: list[tuple[str, nn.Parameter]], tcfg: TrainConfig) -> dict[str, list]:
    """{muon | decay | no_decay: parameters in model order} (classify)."""
    buckets: dict[str, list] = {"muon": [], "decay": [], "no_decay": []}
    for name, p in named:
        buckets[classify(name, p, tcfg)].append(p)
    return buckets


def _adamw(groups: list[dict], tcfg: TrainConfig):
    o = tcfg.optimizer
    if tcfg.cautious_wd:  # torch's AdamW has no cautious weight decay
        return AdamW(groups, lr=tcfg.lr, betas=tuple(o.betas), eps=o.eps, cautious_wd=True)
    # torch's AdamW (fused / foreach); growth swaps in the hand-written one when it installs
    # per-element steps or re-warmup masks (OptimizerSet.use_elementwise_adamw)
    return torch_adamw(groups, lr=tcfg.lr, betas=o.betas, eps=o.eps)


def build_adamw(named, tcfg: TrainConfig) -> dict:
    groups = adam_groups(buckets_of(named, tcfg), tcfg)
    return {"adamw": _adamw(groups, tcfg)} if groups else {}


def build_muon(named, tcfg: TrainConfig) -> dict:
    buckets = buckets_of(named, tcfg)
    opts = build_adamw([(n, p) for n, p in named if classify(n, p, tcfg) != "muon"], tcfg)
    if buckets["muon"]:
        o = tcfg.optimizer  # the muon kind's own options (optim/kinds/muon.py)
        opts["muon"] = Muon(
            [{"params": buckets["muon"], "name": "muon"}],
            lr=o.lr,
            momentum=o.momentum,
            weight_decay=o.weight_decay,
            ns_steps=o.ns_steps,
            ns_method=o.ns_method,
            cautious_wd=tcfg.cautious_wd,
        )
    return opts


def builder_of(tcfg: TrainConfig):
    """The build function the optimizer kind names (`module:function`)."""
    module, _, fn = type(tcfg.optimizer).builder.partition(":")
    return getattr(importlib.import_module(module), fn)


def build_optimizer(model: nn.Module, tcfg: TrainConfig) -> OptimizerSet:
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    opts = builder_of(tcfg)(named, tcfg)
    for o in opts.values():
        for g in o.param_groups:
            g["base_lr"] = g["lr"]
    return OptimizerSet(opts, {id(p): name for name, p in named})
