"""BitLinear (BitNet b1.58): ternary weights in the forward, straight-through gradients, 8-bit activations."""

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.config import ModelConfig
from nexus.models.accounting import param_count_for_config
from nexus.models.bitlinear import BitLinear, hold_quantized_weights
from nexus.models.recurrent import RecurrentOptions
from nexus.models.reference.recurrent_reference import ref_act_quant, ref_ternary


def _capture_linear_weights(monkeypatch):
    seen = []
    real = F.linear

    def spy(x, w, b=None):
        seen.append(w.detach().clone())
        return real(x, w, b)

    monkeypatch.setattr(F, "linear", spy)
    return seen


def test_every_weight_used_in_forward_is_ternary(monkeypatch):
    torch.manual_seed(0)
    lin = BitLinear(24, 16)
    seen = _capture_linear_weights(monkeypatch)
    lin(torch.randn(3, 24))
    (w,) = seen
    gamma = lin.weight.detach().abs().mean()
    values = torch.unique(w)
    assert len(values) <= 3
    for v in values.tolist():
        assert min(abs(v - g) for g in (-gamma.item(), 0.0, gamma.item())) == 0.0
    assert torch.allclose(w, ref_ternary(lin.weight.detach()), rtol=0, atol=1e-7)  # absmean rule


def test_recurrent_model_forward_only_multiplies_ternary_weights(monkeypatch):
    from nexus.models import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(arch=RecurrentOptions(n_sup=2, t_inner=2), d_model=16, n_layers=2, n_heads=1, ffn_hidden=32)
    model = build_model(cfg)
    seen = _capture_linear_weights(monkeypatch)
    model(torch.randint(0, 259, (1, 5)))
    assert len(seen) == 3 * 2 * 2 * 2  # 3 linears x 2 layers x (2 x 2) applications
    for w in seen:
        assert len(torch.unique(w.abs())) <= 2  # {0, gamma}


def test_gradient_reaches_latent_weights_straight_through():
    torch.manual_seed(0)
    lin = BitLinear(8, 4)
    x = torch.randn(5, 8)
    g_out = torch.randn(5, 4)
    (lin(x) * g_out).sum().backward()
    # STE: dL/dW = dL/dW_q = g_out^T x, exactly what a dense layer with W_q would get
    assert torch.allclose(lin.weight.grad, g_out.t() @ x, atol=1e-6)
    assert lin.weight.grad.abs().sum() > 0


def test_held_weights_give_same_output_and_gradient():
    torch.manual_seed(0)
    lin = BitLinear(8, 4)
    x = torch.randn(5, 8)
    lin(x).pow(2).sum().backward()
    g_plain = lin.weight.grad.clone()
    lin.weight.grad = None
    with hold_quantized_weights(lin):
        (lin(x).pow(2).sum()).backward()
    assert torch.equal(lin.weight.grad, g_plain)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(2, 16), st.floats(0.01, 100.0))
def test_activation_quant_matches_reference_and_has_256_levels(rows, dim, scale):
    x = torch.randn(rows, dim, generator=torch.Generator().manual_seed(rows * 100 + dim)) * scale
    lin = BitLinear(dim, 3, act_quant=True)
    q = lin.prepare_input(x)
    assert torch.allclose(q, ref_act_quant(x), rtol=1e-6, atol=1e-7 * scale)
    step = x.abs().amax(-1, keepdim=True) / 127
    # per token: values on the grid k*step, |k| <= 128, and the error at most half a step
    k = q / step
    assert torch.allclose(k, k.round(), atol=1e-3)
    assert ((q - x).abs() <= step / 2 + 1e-6 * scale).all()


def test_activation_quant_gradient_is_straight_through():
    x = torch.randn(4, 8, requires_grad=True)
    lin = BitLinear(8, 8, act_quant=True)
    lin.prepare_input(x).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_accounting_reports_ternary_size():
    cfg = ModelConfig(arch="recurrent", d_model=64, n_layers=2, n_heads=1, ffn_hidden=128)
    info = param_count_for_config(cfg)
    assert info["ternary_mb"] is not None and info["ternary_mb"] < info["fp16_mb"]
    off = param_count_for_config(
        ModelConfig(arch=RecurrentOptions(ternary=False), d_model=64, n_layers=2, n_heads=1, ffn_hidden=128)
    )
    assert off["ternary_mb"] is None and off["total"] == info["total"]
