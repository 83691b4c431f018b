"""Both model families share one base (models/base.py): embedding, head, loss, init, cache, generate."""

from __future__ import annotations

import pytest
import torch

from nexus.models import build_model
from nexus.models.base import LanguageModel
from nexus.models.recurrent import RecurrentLM
from nexus.models.transformer import TransformerLM
from nexus.presets import get_preset


def test_both_families_share_head_cache_generate_and_init():
    for cls in (TransformerLM, RecurrentLM):
        assert issubclass(cls, LanguageModel)
        for name in ("head", "new_cache", "init_weights", "tied_head_flops"):
            assert getattr(cls, name) is getattr(LanguageModel, name), (cls.__name__, name)


@pytest.mark.parametrize("preset", ["nexus-micro", "baseline-micro"])
def test_training_loss_needs_no_host_sync(preset):
    cfg = get_preset(preset).model
    cfg.z_loss = 1e-3
    torch.manual_seed(0)
    model = build_model(cfg).train()
    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    labels = ids.clone()
    labels[0, :3] = -100
    want = model(ids, labels=labels).loss.detach()
    mp = pytest.MonkeyPatch()
    try:
        for name in ("item", "tolist", "__int__", "__float__", "__bool__"):
            mp.setattr(torch.Tensor, name, _refuse)
        out = model(ids, labels=labels)
    finally:
        mp.undo()
    torch.testing.assert_close(out.loss.detach(), want, rtol=0, atol=0)


def _refuse(*args, **kwargs):
    raise AssertionError("host sync in the loss path")
