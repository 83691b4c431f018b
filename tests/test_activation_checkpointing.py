"""train.activation_checkpointing recomputes each block in backward: the loss and every gradient equal
the plain model's, for the transformer (with ExoFormer anchors passed to every block and MoE auxiliary
losses read from the layers) and the recurrent model; parameter names are unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from tolerance_guard import atol_for

from nexus.config_overrides import parse_overrides
from nexus.models import build_model
from nexus.presets import get_preset
from nexus.train.fsdp import apply_activation_checkpointing

CASES = {
    "baseline": ("baseline-micro", []),
    "exo-moe": (
        "baseline-micro",
        [
            "--model.attention.gate",
            "elementwise",
            "--model.mixing.anchor",
            "exo",
            "--model.mixing.dynamic",
            "true",
            "--model.mlp.kind",
            "moe",
            "--model.mlp.n_experts",
            "4",
        ],
    ),
    "recurrent": ("nexus-micro", []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_checkpointed_blocks_give_equal_loss_and_grads(case):
    preset, over = CASES[case]
    cfg = parse_overrides(get_preset(preset), list(over)).validate()
    torch.manual_seed(0)
    plain = build_model(cfg.model).train()
    ckpt = copy.deepcopy(plain)
    assert apply_activation_checkpointing(ckpt) == cfg.model.n_layers
    assert [n for n, _ in ckpt.named_parameters()] == [n for n, _ in plain.named_parameters()]
    x = torch.randint(0, cfg.model.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    outs = []
    for m in (plain, ckpt):
        torch.manual_seed(5)
        out = m(x, labels=x)
        out.loss.backward()
        outs.append(out.loss.detach())
    assert torch.equal(outs[0], outs[1])
    for (n, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        if a.grad is None:
            assert b.grad is None, n
            continue
        torch.testing.assert_close(b.grad, a.grad, atol=atol_for(a.grad), rtol=1e-5, msg=n)  # some grads are ~1e-5


def test_checkpointing_saves_activation_memory():
    """Fewer tensors are kept for backward: the saved-tensor hook sees less with checkpointing."""
    cfg = parse_overrides(get_preset("baseline-micro"), ["--model.n_layers", "4"]).validate()
    torch.manual_seed(0)
    plain = build_model(cfg.model)
    ckpt = copy.deepcopy(plain)
    apply_activation_checkpointing(ckpt)
    x = torch.randint(0, cfg.model.vocab_size, (2, 32))

    def saved_bytes(m):
        total = [0]

        def pack(t):
            total[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            m(x, labels=x).loss  # noqa: B018  # the forward pass is what runs the hooks; .loss only names the output
        return total[0]

    assert saved_bytes(ckpt) < 0.5 * saved_bytes(plain)
