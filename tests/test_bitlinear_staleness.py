"""BitLinear never serves stale ternary weights (issue 14, NEXUS v4.1).

Each test evaluates a recurrent model under no_grad (the path that used to reuse a cached
quantization keyed on the weight's address and version counter), changes the latent weights in a way
that does not bump that counter (fused AdamW, `.data` writes) or does (foreach AdamW,
load_state_dict), evaluates again and compares with a freshly built model holding the same weights.
"""

import pytest
import torch

from nexus.config import ModelConfig
from nexus.models import build_model
from nexus.models.bitlinear import BitLinear, hold_quantized_weights
from nexus.models.recurrent import RecurrentOptions
from nexus.models.reference.recurrent_reference import ref_ternary


def _cfg() -> ModelConfig:
    return ModelConfig(
        arch=RecurrentOptions(n_sup=2, t_inner=2), vocab_size=40, d_model=16, n_layers=2, n_heads=1, ffn_hidden=32
    )


def _ids():
    return torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(3))


def _eval_logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(_ids()).logits


def _fresh_logits(model) -> torch.Tensor:
    """Logits of a newly built model given `model`'s current weights (no state carried over)."""
    fresh = build_model(_cfg())
    fresh.load_state_dict({k: v.detach().clone() for k, v in model.state_dict().items()})
    return _eval_logits(fresh)


def _train_steps(model, opt, n=5):
    model.train()
    for _ in range(n):
        out = model(_ids(), labels=_ids())
        out.loss.backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("flavour", ["fused", "foreach"])
def test_eval_after_adamw_steps_uses_the_updated_weights(flavour):
    torch.manual_seed(0)
    model = build_model(_cfg())
    before = _eval_logits(model)  # warms any inference-time reuse of quantized weights
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, **{flavour: True})
    _train_steps(model, opt)
    after = _eval_logits(model)
    assert not torch.equal(after, before)  # the steps did change the model
    assert torch.equal(after, _fresh_logits(model))


@pytest.mark.parametrize("write", ["in_place", "assign"])
def test_eval_after_data_write_uses_the_new_weights(write):
    torch.manual_seed(0)
    model = build_model(_cfg())
    before = _eval_logits(model)
    for m in model.modules():
        if isinstance(m, BitLinear):
            if write == "in_place":
                m.weight.data.mul_(-1)  # through .data: the parameter's version counter does not move
            else:
                m.weight.data = torch.randn_like(m.weight) * 0.05  # new storage behind the same parameter
    after = _eval_logits(model)
    assert not torch.equal(after, before)
    assert torch.equal(after, _fresh_logits(model))


def test_eval_after_load_state_dict_uses_the_loaded_weights():
    torch.manual_seed(0)
    model = build_model(_cfg())
    _eval_logits(model)
    torch.manual_seed(1)
    other = build_model(_cfg())
    model.load_state_dict(other.state_dict())
    assert torch.equal(_eval_logits(model), _eval_logits(other))


def test_single_layer_inference_follows_data_writes():
    torch.manual_seed(0)
    lin = BitLinear(8, 4)
    x = torch.randn(2, 8)
    with torch.no_grad():
        lin(x)
        lin.weight.data.mul_(-1)
        b = lin(x)
    assert torch.allclose(b, x @ ref_ternary(lin.weight.detach()).t(), atol=1e-6)


def test_held_weights_nest_and_are_released():
    """generate() holds the quantization for a whole decode while the model's forward holds it per call:
    the inner hold must reuse the outer one and leave it in place, and both must be gone afterwards."""
    torch.manual_seed(0)
    model = build_model(_cfg())
    lin = model.layers[0].mlp.gate_proj
    with torch.no_grad(), hold_quantized_weights(model):
        outer = lin._held_weight
        with hold_quantized_weights(model):
            assert lin._held_weight is outer
        assert lin._held_weight is outer
    assert lin._held_weight is None
