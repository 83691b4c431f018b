"""Issue 49 items 1 and 3 for `train.optimizer`: every registered kind (a plugin's or a new file's included) is its
options plus the builder they name, and the optimizer it builds meets optim/base.py's contract:

* an unknown kind, or one whose options name no importable builder, is refused at validation in one line;
* it builds on a model and trains it; a save and a resume of its state continue bitwise as an uninterrupted run;
* growth's state surgery extends every state tensor it declares (old entries kept, new entries zero) and refuses one
  it does not declare;
* a step with found_inf = 1 changes neither the weights nor the state.
"""

from __future__ import annotations

import copy
import typing
from dataclasses import dataclass

import pytest
import torch

from nexus.config import ConfigError, OptimizerOptions, RunConfig, TrainConfig
from nexus.optim.base import GrowableOptimizer, state_growth_of
from nexus.optim.param_groups import build_optimizer


def kinds():
    return sorted(OptimizerOptions.kinds())


class Tiny(torch.nn.Module):
    """Two matrices (Muon takes the hidden one), an embedding-like and a bias (undecayed)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Embedding(11, 6)
        self.hidden = torch.nn.Linear(6, 6)
        self.lm_head = torch.nn.Linear(6, 11, bias=False)
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def loss(self, step: int) -> torch.Tensor:
        x = torch.arange(8) % 11 if step % 2 else (torch.arange(8) * 3) % 11
        return torch.nn.functional.cross_entropy(self.lm_head(torch.tanh(self.hidden(self.embed(x)))), (x + 1) % 11)


def tcfg(kind: str) -> TrainConfig:
    t = TrainConfig(optimizer=kind, lr=1e-2, weight_decay=0.1)
    RunConfig(train=t).validate()
    return t


def train(model, opt, steps, start=0):
    for s in range(start, start + steps):
        opt.zero_grad()
        model.loss(s).backward()
        opt.step()


@pytest.mark.parametrize("kind", kinds())
def test_every_kind_declares_its_options_and_builds_a_contract_optimizer(kind):
    t = tcfg(kind)
    assert type(t.optimizer).builder, f"{kind} names no builder"
    opt = build_optimizer(Tiny(), t)
    for o in opt.optimizers.values():
        assert isinstance(o, (GrowableOptimizer, torch.optim.AdamW)), type(o)
        assert state_growth_of(o), f"{type(o).__name__} declares no state tensors"
    assert all(g["base_lr"] == g["lr"] for g in opt.param_groups)


@pytest.mark.parametrize("kind", kinds())
def test_save_and_resume_continue_bitwise(kind):
    t = tcfg(kind)
    a = Tiny()
    opt_a = build_optimizer(a, t)
    train(a, opt_a, 3)
    saved_model, saved_opt = copy.deepcopy(a.state_dict()), opt_a.state_dict()
    train(a, opt_a, 3, start=3)
    b = Tiny(seed=1)
    b.load_state_dict(saved_model)
    opt_b = build_optimizer(b, t)
    opt_b.load_state_dict(copy.deepcopy(saved_opt))
    train(b, opt_b, 3, start=3)
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), n


@pytest.mark.parametrize("kind", kinds())
def test_a_non_finite_step_changes_nothing(kind):
    m = Tiny()
    opt = build_optimizer(m, tcfg(kind))
    train(m, opt, 2)
    before, state = copy.deepcopy(m.state_dict()), opt.state_dict()
    opt.zero_grad()
    m.loss(2).backward()
    next(m.parameters()).grad[0, 0] = float("nan")
    opt.step(found_inf=torch.ones(()))
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    after = opt.state_dict()["state"]
    for name, st in state["state"].items():
        for key, v in st.items():
            if torch.is_tensor(v):
                assert torch.equal(v, after[name][key]), (name, key)


@pytest.mark.parametrize("kind", kinds())
def test_growth_extends_every_declared_state_tensor(kind):
    from nexus.growth.optimizer_surgery import transplant_optimizer_state
    from nexus.growth.param_map import ParamMap

    t = tcfg(kind)
    small = Tiny()
    opt = build_optimizer(small, t)
    train(small, opt, 2)
    old = opt.state_dict()
    big = Tiny()
    big.hidden = torch.nn.Linear(6, 9)  # the hidden matrix grows 6 -> 9 output rows
    new = build_optimizer(big, t)
    maps = {
        "hidden.weight": ParamMap("hidden.weight", (slice(0, 6), slice(0, 6))),
        "hidden.bias": ParamMap("hidden.bias", (slice(0, 6),)),
    }
    transplant_optimizer_state(old, new, maps)
    for name in ("hidden.weight", "hidden.bias"):
        st, was = new.state_for(name), old["state"][name]
        owner = next(
            o
            for o in new.optimizers.values()
            for g in o.param_groups
            for p in g["params"]
            if new.param_names[id(p)] == name
        )
        declared = state_growth_of(owner)
        grown = [k for k, v in was.items() if torch.is_tensor(v) and v.ndim > 0 and k != "step"]
        assert grown and set(grown) <= set(declared), (name, grown, declared)
        for k in grown:
            assert st[k].shape[0] == 9 and torch.equal(st[k][:6], was[k]) and not st[k][6:].any(), (name, k)


def test_a_state_tensor_not_declared_is_refused():
    from nexus.growth.optimizer_surgery import transplant_optimizer_state
    from nexus.growth.param_map import ParamMap

    m = Tiny()
    opt = build_optimizer(m, tcfg("adamw"))
    train(m, opt, 1)
    old = opt.state_dict()
    old["state"]["hidden.weight"]["mystery"] = torch.zeros(6, 6)
    with pytest.raises(RuntimeError, match="'mystery'.*does not declare"):
        transplant_optimizer_state(
            old, build_optimizer(Tiny(), tcfg("adamw")), {"hidden.weight": ParamMap("hidden.weight")}
        )


def test_an_unknown_kind_or_one_without_a_builder_is_one_line():
    with pytest.raises(ConfigError, match=r"^train.optimizer.kind='sophia' \(valid: [a-z_|]+\)$"):
        TrainConfig(optimizer="sophia")

    @dataclass
    class SophiaOptions(OptimizerOptions, kind="sophia_test"):  # declared, but builds nothing
        rho: float = 0.04

    try:
        cfg = RunConfig()
        cfg.train.optimizer = "sophia_test"
        with pytest.raises(ConfigError) as e:
            cfg.validate()
    finally:
        del OptimizerOptions.registered["sophia_test"]  # registered for this test only
    assert "train.optimizer.kind='sophia_test'" in str(e.value) and "\n" not in str(e.value)
    assert typing.get_type_hints(SophiaOptions)  # (the class is a well-formed kind otherwise)
