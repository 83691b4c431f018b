"""Which optimizer and weight decay each parameter gets, decided by rule from its name and shape."""
from __future__ import annotations

import torch.nn as nn

from ..config import TrainConfig
from .optimizers import AdamW, Muon, OptimizerSet, torch_adamw


def is_embedding_like(name: str) -> bool:
    return name.endswith("embed.weight") or "lm_head" in name or name.endswith("wte.weight")


def classify(name: str, p, tcfg: TrainConfig) -> str:
    """muon | decay | no_decay. Norms, biases, gains and embeddings are not decayed unless decay_all."""
    embed = is_embedding_like(name)
    if tcfg.optimizer == "muon" and p.ndim == 2 and not embed:
        return "muon"
    if p.ndim < 2 or embed:
        return "decay" if tcfg.decay_all else "no_decay"
    return "decay"


def build_optimizer(model: nn.Module, tcfg: TrainConfig) -> OptimizerSet:
    buckets: dict[str, list] = {"muon": [], "decay": [], "no_decay": []}
    names = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        names[id(p)] = name
        buckets[classify(name, p, tcfg)].append(p)
    opts = {}
    adam_groups = []
    if buckets["decay"]:
        adam_groups.append({"params": buckets["decay"], "weight_decay": tcfg.weight_decay, "name": "decay"})
    if buckets["no_decay"]:
        adam_groups.append({"params": buckets["no_decay"], "weight_decay": 0.0, "name": "no_decay"})
    if adam_groups and tcfg.cautious_wd:  # torch's AdamW has no cautious weight decay
        opts["adamw"] = AdamW(adam_groups, lr=tcfg.lr, betas=tuple(tcfg.betas), eps=tcfg.eps, cautious_wd=True)
    elif adam_groups:
        # torch's AdamW (fused / foreach); growth swaps in the hand-written one when it installs
        # per-element steps or re-warmup masks (OptimizerSet.use_elementwise_adamw)
        opts["adamw"] = torch_adamw(adam_groups, lr=tcfg.lr, betas=tcfg.betas, eps=tcfg.eps)
    if buckets["muon"]:
        opts["muon"] = Muon([{"params": buckets["muon"], "name": "muon"}], lr=tcfg.muon_lr, momentum=tcfg.muon_momentum,
                            weight_decay=tcfg.muon_wd, ns_steps=tcfg.muon_ns_steps, ns_method=tcfg.muon_ns,
                            cautious_wd=tcfg.cautious_wd)
    for o in opts.values():
        for g in o.param_groups:
            g["base_lr"] = g["lr"]
    return OptimizerSet(opts, names)
