"""Which optimizer and weight decay each parameter gets (nexus/optim/param_groups.py), and that every
optimizer field of TrainConfig reaches the optimizer that uses it. The rule, from its docstring: under
`optimizer=muon` every 2-D non-embedding matrix goes to Muon; norms, biases, gains (ndim < 2) and
embeddings (`*embed.weight`, `lm_head`, `*wte.weight`) are not decayed unless `decay_all`; everything
else is AdamW with `weight_decay`. Parameters that do not train get no optimizer."""

import pytest
import torch
import torch.nn as nn

from nexus.config import TrainConfig
from nexus.optim.optimizers import AdamW, Muon
from nexus.optim.param_groups import build_optimizer, classify, is_embedding_like


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(4, 4, bias=False)  # first: skipping it must not stop the walk
        self.frozen.weight.requires_grad_(False)
        self.embed = nn.Embedding(10, 4)  # "embed.weight"
        self.wte = nn.Embedding(10, 4)  # "wte.weight" (GPT-2 naming)
        self.proj = nn.Linear(4, 4)  # a hidden matrix and its bias
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.norm_gain = nn.Parameter(torch.ones(4))


def _groups(opt) -> dict[str, tuple[str, set[str], dict]]:
    """group name -> (optimizer key, parameter names, hyperparameters)"""
    out = {}
    for key, o in opt.optimizers.items():
        for g in o.param_groups:
            out[g["name"]] = (
                key,
                {opt.param_names[id(p)] for p in g["params"]},
                {k: v for k, v in g.items() if k != "params"},
            )
    return out


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("decay_all", [False, True])
def test_every_parameter_lands_in_the_group_its_rule_names(optimizer, decay_all):
    t = TrainConfig(optimizer=optimizer, decay_all=decay_all, weight_decay=0.07)
    groups = _groups(build_optimizer(Net(), t))
    matrices = {"proj.weight"}
    not_decayed = {"embed.weight", "wte.weight", "lm_head.weight", "proj.bias", "norm_gain"}
    want = {}
    if optimizer == "muon":
        want["muon"] = matrices
        decay = not_decayed if decay_all else set()
    else:
        decay = matrices | (not_decayed if decay_all else set())
    if decay:
        want["decay"] = decay
    if not decay_all:
        want["no_decay"] = not_decayed
    assert {n: names for n, (_, names, _) in groups.items()} == want  # "frozen.weight" nowhere
    if "decay" in groups:
        assert groups["decay"][2]["weight_decay"] == 0.07
    if "no_decay" in groups:
        assert groups["no_decay"][2]["weight_decay"] == 0.0


def test_embedding_names():
    assert all(map(is_embedding_like, ["embed.weight", "model.embed.weight", "lm_head.weight", "h.wte.weight"]))
    assert not any(map(is_embedding_like, ["embed.bias", "layers.0.embed_proj.weight", "wte.bias"]))
    m = torch.zeros(3, 3)
    assert classify("lm_head.weight", m, TrainConfig(optimizer="muon")) == "no_decay"
    assert classify("lm_head.weight", m, TrainConfig(optimizer="muon", decay_all=True)) == "decay"


def test_every_optimizer_field_reaches_its_optimizer():
    t = TrainConfig(
        optimizer={
            "kind": "muon",
            "betas": [0.8, 0.9],
            "eps": 1e-7,
            "lr": 0.03,
            "momentum": 0.9,
            "weight_decay": 0.01,
            "ns_steps": 4,
            "ns_method": "polar_express",
        },
        lr=1.5e-3,
        weight_decay=0.05,
    )
    opt = build_optimizer(Net(), t)
    adam, muon = opt.optimizers["adamw"], opt.optimizers["muon"]
    assert isinstance(adam, torch.optim.AdamW) and isinstance(muon, Muon)
    a = adam.param_groups[0]
    assert (a["lr"], a["base_lr"], tuple(a["betas"]), a["eps"]) == (1.5e-3, 1.5e-3, (0.8, 0.9), 1e-7)
    m = muon.param_groups[0]
    assert (
        m["lr"],
        m["base_lr"],
        m["momentum"],
        m["weight_decay"],
        m["ns_steps"],
        m["ns_method"],
        m["cautious_wd"],
    ) == (0.03, 0.03, 0.9, 0.01, 4, "polar_express", False)


def test_cautious_weight_decay_takes_the_hand_written_adamw_with_the_same_fields():
    t = TrainConfig(optimizer={"kind": "muon", "betas": [0.85, 0.9], "eps": 1e-6}, cautious_wd=True, lr=2e-3)
    opt = build_optimizer(Net(), t)
    adam = opt.optimizers["adamw"]
    assert type(adam) is AdamW and opt.optimizers["muon"].param_groups[0]["cautious_wd"] is True
    for g in adam.param_groups:
        assert (g["lr"], g["base_lr"], tuple(g["betas"]), g["eps"], g["cautious_wd"]) == (
            2e-3,
            2e-3,
            (0.85, 0.9),
            1e-6,
            True,
        )
