"""SPARKLING section 4: copy init with symmetric optimizer state is a symmetry lock (copies stay
equal under AdamW and under Muon); the asymmetric reset of the new entries breaks it."""

import pytest
import torch

from nexus.config import ModelConfig, RunConfig, TrainConfig
from nexus.growth import grow
from nexus.growth.diagnostics import probe_batch, symmetry_lock
from nexus.models import build_model
from nexus.optim.param_groups import build_optimizer


def _train(model, opt, ids, steps):
    for _ in range(steps):
        out = model(ids[:, :-1], labels=ids[:, 1:])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return float(out.loss.detach())


@pytest.fixture(scope="module")
def trained():
    """A tiny dense model trained a few steps under each optimizer, with its optimizer state."""
    ids = probe_batch(259, batch=4, seq_len=32)
    made = {}
    for optimizer in ("adamw", "muon"):
        torch.manual_seed(0)
        cfg = RunConfig(
            model=ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48),
            train=TrainConfig(optimizer=optimizer, lr=3e-3, weight_decay=0.0),
        )
        model = build_model(cfg.model)
        opt = build_optimizer(model, cfg.train)
        _train(model, opt, ids, 5)
        made[optimizer] = (model, cfg, opt.state_dict())
    return made, ids


def _lock_after(trained, optimizer, policy, steps=15):
    made, ids = trained
    model, cfg, state = made[optimizer]
    new_model, new_cfg, new_opt, res = grow(
        model,
        cfg,
        {"family": "width", "ffn": 96, "init": "copy,copy", "preserve": "rms", "optimizer_state": policy},
        state,
        step=5,
    )
    before = symmetry_lock(new_model, res.param_maps)
    _train(new_model, new_opt, ids, steps)
    return before, symmetry_lock(new_model, res.param_maps)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("policy", ["copy", "drop"])
def test_symmetric_optimizer_state_keeps_copies_locked(trained, optimizer, policy):
    before, after = _lock_after(trained, optimizer, policy)
    assert before["min"] == pytest.approx(1.0, abs=1e-6)  # copies start identical (up to the rms factor)
    assert after["min"] > 0.9999, after["per_param"]  # and stay identical: the lock


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_asymmetric_reset_breaks_the_lock(trained, optimizer):
    _, locked = _lock_after(trained, optimizer, "copy")
    _, broken = _lock_after(trained, optimizer, "asymmetric")
    assert broken["min"] < 0.99, broken["per_param"]
    assert broken["mean"] < locked["mean"] - 0.005


def test_lock_metric_sees_a_perturbed_copy():
    """The metric itself must be able to fail: perturbing the copied columns lowers it below 1."""
    torch.manual_seed(0)
    cfg = RunConfig(model=ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48))
    model = build_model(cfg.model)
    _, _, _, res = grow(model, cfg, {"family": "width", "ffn": 96, "init": "copy,copy", "perturb": 0.5})
    lock = symmetry_lock(res.model, res.param_maps)
    assert lock["per_param"]["layers.0.mlp.up_proj.weight"] == pytest.approx(1.0, abs=1e-6)  # fan-out rows: copies
    assert lock["per_param"]["layers.0.mlp.down_proj.weight"] < 0.99  # fan-in columns: +-perturbed
