"""BitLinear's edges that the main tests leave open: the exact round-half-to-even tie of the ternary rule,
dtypes and devices the layer is built with, SubLN with its default epsilon, activations of any rank, the
bias term, held quantization, and the packed layer's default kernel. Expected values come from the
BitNet b1.58 equations (models/reference/recurrent_reference.py), never from the layer itself."""

import pytest
import torch

from nexus.config import ModelConfig
from nexus.models.bitlinear import (
    BitLinear,
    PackedTernaryLinear,
    act_quant_8bit,
    hold_quantized_weights,
    int4_supported,
    ternary_codes,
    ternary_scale,
)
from nexus.models.reference.recurrent_reference import ref_act_quant, ref_rmsnorm, ref_ternary


def test_a_weight_at_exactly_half_gamma_rounds_to_zero():
    """clamp(round(W/gamma)) with round half to even: W/gamma == 0.5 gives code 0, not 1."""
    w = torch.tensor([[1.0, 2.0, 3.0, 2.0], [-1.0, -2.0, -3.0, -2.0]])  # gamma = 2: ratios 0.5, 1, 1.5, 1
    gamma = ternary_scale(w)
    assert float(gamma) == 2.0
    codes = ternary_codes(w, gamma)
    assert codes.dtype == torch.int8  # what the export stores
    assert codes.tolist() == [[0, 1, 1, 1], [0, -1, -1, -1]]
    assert torch.equal(codes.float() * gamma, ref_ternary(w))


def test_layer_keeps_the_dtype_and_device_it_is_built_with():
    torch.manual_seed(0)
    lin = BitLinear(6, 4, bias=True, act_quant=True, input_norm=True, dtype=torch.float64)
    assert lin.weight.dtype == lin.bias.dtype == torch.float64
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    y = lin(x)
    assert y.dtype == torch.float64
    want = ref_act_quant(ref_rmsnorm(x, None, lin.norm_eps)) @ ref_ternary(lin.weight).t() + lin.bias
    torch.testing.assert_close(y, want, rtol=1e-5, atol=0)  # gamma and the 8-bit grid are computed in fp32
    meta = BitLinear(6, 4, device="meta")
    assert meta.weight.device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_input_quantizers_return_the_input_dtype(dtype):
    x = torch.randn(3, 8, dtype=torch.float64).to(dtype)
    assert BitLinear(8, 2, input_norm=True).prepare_input(x).dtype == dtype
    assert act_quant_8bit(x).dtype == dtype


def test_subln_normalizes_with_the_default_model_epsilon():
    """input_norm=True divides by sqrt(mean(x^2) + eps) with the models' default eps; at rms 1e-2 an eps
    of order 1 would shrink the output ~100x."""
    x = 1e-2 * torch.randn(4, 16, dtype=torch.float64)
    lin = BitLinear(16, 2, input_norm=True)
    want = ref_rmsnorm(x, None, ModelConfig().norm_eps)
    torch.testing.assert_close(lin.prepare_input(x), want, rtol=1e-6, atol=0)  # the layer normalizes in fp32
    assert torch.equal(BitLinear(16, 2).prepare_input(x), x)  # off by default


def test_activation_scale_is_per_token_for_any_rank():
    """absmax over the last (feature) axis: a (B, T, D) input has one scale per token, not per (B, D)."""
    x = torch.randn(2, 5, 7, dtype=torch.float64) * torch.arange(1, 8, dtype=torch.float64)
    torch.testing.assert_close(act_quant_8bit(x), ref_act_quant(x), rtol=1e-6, atol=0)  # the grid is fp32


def test_bias_is_added_after_the_ternary_matmul():
    torch.manual_seed(0)
    lin = BitLinear(5, 3, bias=True, dtype=torch.float64)
    torch.nn.init.normal_(lin.bias)
    x = torch.randn(4, 5, dtype=torch.float64)
    # gamma is computed in fp32 (the layer's rule), hence rtol 1e-5 against the float64 reference
    torch.testing.assert_close(lin(x), x @ ref_ternary(lin.weight).t() + lin.bias, rtol=1e-5, atol=0)
    codes = ternary_codes(lin.weight, ternary_scale(lin.weight))
    dense = PackedTernaryLinear(
        codes, ternary_scale(lin.weight), lin.bias.detach().float(), False, False, 1e-5, kernel="dense"
    )
    xf = x.float()
    torch.testing.assert_close(
        dense(xf), xf @ ref_ternary(lin.weight.float()).t() + lin.bias.float(), rtol=1e-6, atol=0
    )
    assert list(dense.state_dict()) == []  # derived from the export's codes: nothing of its own to save


def test_held_quantization_is_computed_once_and_used_by_every_call(monkeypatch):
    """Inside hold_quantized_weights the layer multiplies with the weight quantized on entry: a change to
    the latent weight inside the block does not reach the forward until the hold ends."""
    torch.manual_seed(0)
    lin = BitLinear(8, 4, dtype=torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64)
    before = x @ ref_ternary(lin.weight).t()
    with torch.no_grad(), hold_quantized_weights(lin):
        lin.weight.mul_(-1)
        torch.testing.assert_close(lin(x), before, rtol=1e-5, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(lin(x), -before, rtol=1e-5, atol=0)


def test_packed_layer_default_kernel_is_auto():
    """No kernel given: every kernel this CPU runs is timed on the layer, dense among them, and the
    fastest is taken (so it is never one measured slower than dense)."""
    from nexus.models.ternary_kernel_choice import candidates

    layer = PackedTernaryLinear(torch.ones(64, 96), torch.tensor(0.5), None, False, False, 1e-5)
    choice = layer.kernel_choice
    assert set(choice.ms) == set(candidates()) and "dense" in choice.ms
    assert choice.kernel == min(choice.ms, key=choice.ms.get)
    assert choice.ms[choice.kernel] <= choice.ms["dense"]
    assert layer.kernel == (choice.kernel if choice.kernel != "int4" or int4_supported(64, 96) else "int8")


def test_repr_names_the_quantization():
    text = repr(BitLinear(4, 2, act_quant=True))
    assert (
        "in_features=4" in text and "ternary=True" in text and "act_quant=True" in text and "input_norm=False" in text
    )
