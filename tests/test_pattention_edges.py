"""Pattention's edges against TokenFormer's definition (models/reference/nexus_rank_ref.py): the bias term,
the layer's defaults (GELU-L2, no bias, small-normal token init), the config reaching every layer
(tokens, activation, bias, init std, the pinned tau of attention and FFN layers only with freeze_scale),
FLOPs and the description a printed model carries."""

import math

import pytest
import torch

from nexus.config import ModelConfig, ProjectionOptions
from nexus.models import build_model
from nexus.models.pattention import Pattention, pattention_modules
from nexus.models.reference.nexus_rank_ref import pattention_ref


def test_bias_is_added_to_the_token_mixture():
    torch.manual_seed(0)
    mod = Pattention(8, 6, 10, bias=True).double()
    assert torch.equal(mod.bias, torch.zeros(6, dtype=torch.float64))  # starts at zero
    with torch.no_grad():
        mod.bias.normal_()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    want = pattention_ref(x, mod.key_tokens, mod.value_tokens, "gelu_l2") + mod.bias
    torch.testing.assert_close(mod(x), want, rtol=1e-10, atol=1e-12 * float(want.detach().abs().max()))


def test_defaults_are_gelu_l2_without_bias_and_small_normal_tokens():
    torch.manual_seed(0)
    mod = Pattention(64, 48, 200).double()
    assert mod.bias is None and mod.frozen_n == 0
    x = torch.randn(2, 3, 64, dtype=torch.float64)
    want = pattention_ref(x, mod.key_tokens, mod.value_tokens, "gelu_l2")
    torch.testing.assert_close(mod(x), want, rtol=1e-10, atol=1e-12 * float(want.detach().abs().max()))
    for tokens in (mod.key_tokens, mod.value_tokens):  # ~10^4 draws: std within a few percent of 0.02
        assert tokens.std().item() == pytest.approx(0.02, rel=0.05)


def _model(freeze: bool, **model):
    proj = ProjectionOptions.make(
        "pattention",
        targets=["q", "k", "v", "o", "ffn"],
        param_tokens=0,
        ffn_param_tokens=0,
        freeze_scale=freeze,
        pattention_act="softmax",
    )
    cfg = ModelConfig(
        d_model=16, n_layers=1, n_heads=2, max_seq_len=32, projection=proj, attention_bias=True, init_std=0.05, **model
    )
    cfg.growth_state.update(frozen_n=5, ffn_frozen_n=7)
    torch.manual_seed(0)
    return build_model(cfg)


@pytest.mark.parametrize("freeze", [True, False])
def test_config_reaches_every_pattention_layer(freeze):
    """Token counts default to the widths they replace (d_model; the FFN's size), q/k/v take the attention
    bias, the activation and init std come from the config, and tau is pinned from growth_state (attention
    and FFN layers each their own count) only with freeze_scale."""
    mods = pattention_modules(_model(freeze))
    attn, ffn = mods["layers.0.attn.q_proj"], mods["layers.0.mlp"]
    assert attn.n_tokens == 16 and ffn.n_tokens == _model(freeze).cfg.ffn
    assert attn.bias is not None and mods["layers.0.attn.o_proj"].bias is None
    assert {m.act for m in mods.values()} == {"softmax"}
    values = torch.cat([m.value_tokens.flatten() for m in mods.values()])
    assert values.std().item() == pytest.approx(0.05, rel=0.1)
    assert (attn.tau, ffn.tau) == ((math.sqrt(5), math.sqrt(7)) if freeze else (math.sqrt(16), math.sqrt(ffn.n_tokens)))


def test_flops_and_description():
    """Two matmuls per token: the scores (2 n d_in) and the weighted sum of value tokens (2 n d_out)."""
    assert Pattention(8, 6, 10).flops_per_token(99) == 2 * 10 * 8 + 2 * 10 * 6
    assert repr(Pattention(8, 6, 10)).endswith("(8->6, tokens=10, act=gelu_l2, tau=sqrt(10))")
    assert "tau=sqrt(4)" in repr(Pattention(8, 6, 10, frozen_n=4))
    why = Pattention(8, 6, 10).width_refusal(None)
    assert why.startswith("Pattention projections (model.projection.kind='pattention') do not take width growth")
    assert why.endswith("(valid: linear or nexus_rank projections; grow Pattention with --add-tokens)")
