"""The per-layer gradient-norm hook (train/grad_norm.py), the proof of issue 37 item 2: a hook kind added
as one new file is found by the registry, configured by a train.hooks entry, its options typed and
checked like a config section's."""

from __future__ import annotations

import json

import pytest
import torch.nn as nn
from test_core_train import micro_cfg

from nexus.config import ConfigError
from nexus.train.hooks import HOOK_KINDS, Hook
from nexus.train.trainer import Trainer


class GradCapture(Hook):
    """Keeps a copy of every gradient the optimizer is about to apply, per step (after the hook under test)."""

    priority = -1000

    def __init__(self):
        self.grads = {}

    def before_optimizer_step(self, trainer, step):
        seen, per_layer = set(), []
        for name, module in layer_modules(trainer.model):
            own = [p for p in module.parameters() if id(p) not in seen and p.grad is not None]
            seen |= {id(p) for p in module.parameters()}  # a tied weight counts once, in its first layer
            per_layer.append((name, [p.grad.detach().double().clone() for p in own]))
        self.grads[step + 1] = per_layer


def layer_modules(model: nn.Module):
    """(group name, module) per layer, from the module tree: each entry of a ModuleList, each other child."""
    out = []
    for name, child in model.named_children():
        if isinstance(child, nn.ModuleList):
            out += [(f"{name}.{i}", sub) for i, sub in enumerate(child)]
        else:
            out.append((name, child))
    return out


def test_grad_norm_is_a_registered_kind():
    assert "grad_norm" in HOOK_KINDS.names()


def test_logged_norms_are_each_layers_gradient_norm(tmp_path):
    cfg = micro_cfg(tmp_path / "run", "--train.steps", "4", "--train.grad_clip", "0")
    cfg.train.hooks = [{"kind": "grad_norm", "every": 2}]
    capture = GradCapture()
    Trainer(cfg.validate(), quiet=True, hooks=[capture]).fit()
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r for r in rows if r.get("event") == "grad_norm"}
    assert sorted(logged) == [2, 4]
    for step, rec in logged.items():
        expected = {}
        for name, grads in capture.grads[step]:
            if grads:  # ||g|| over the layer's parameters: sqrt of the sum of every entry squared
                expected[f"grad_norm/{name}"] = float(sum((g * g).sum() for g in grads) ** 0.5)
        got = {k: v for k, v in rec.items() if k.startswith("grad_norm/")}
        assert set(got) == set(expected)
        assert any(k.startswith("grad_norm/layers.") for k in got)
        for k in expected:
            assert got[k] == pytest.approx(expected[k], rel=1e-5), k


@pytest.mark.parametrize(
    "entry,needle",
    [
        ({"kind": "grad_norm", "every": -1}, "train.hooks[0].every=-1 (valid: an integer >= 0"),
        ({"kind": "grad_norm", "every": "often"}, "train.hooks[0].every='often' (valid: an integer)"),
        ({"kind": "grad_norm", "evry": 3}, "train.hooks[0].evry=3 (valid: options of hook kind 'grad_norm': every)"),
    ],
)
def test_a_bad_option_is_one_line_before_anything_is_written(tmp_path, entry, needle):
    cfg = micro_cfg(tmp_path / "run", "--train.steps", "2")
    cfg.train.hooks = [entry]
    with pytest.raises(ConfigError) as e:
        Trainer(cfg.validate(), quiet=True).fit()
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()
