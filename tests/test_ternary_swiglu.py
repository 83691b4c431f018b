"""The fused packed SwiGLU decode (models/ternary_swiglu.py) against the SwiGLU and BitNet b1.58
definitions computed here in float64:

    y = gamma_d * N(silu(gamma_g x Cg^T) * (gamma_u x Cu^T)) Cd^T,   N = parameter-free RMSNorm (SubLN) or identity

Tolerance: three fp32 dot products in a row (K, then H terms) plus silu's exp and the norm; the sums'
recursive-summation bound (tests/test_ternary_kernels.py) is ~1e-5 relative at these sizes, and a
relative 1e-4 of the output's largest entry covers it with room, while a wrong scale, a dropped norm,
a swapped gate/up or a misplaced code changes outputs by O(1)."""

import pytest
import torch
import torch.nn.functional as F

from nexus.models import ternary_kernels, ternary_swiglu
from nexus.models.bitlinear import PackedTernaryLinear
from nexus.models.recurrent import RecurrentMLP

pytestmark = pytest.mark.skipif(not ternary_kernels.available(), reason="numba is not installed")
FP32_KERNELS = ["fp32-2bit", "fp32-int8"]


def _codes(g, n_out, n_in):
    w = torch.randn(n_out, n_in, generator=g, dtype=torch.float64)
    gamma = w.abs().mean()
    return torch.clamp(torch.round(w / gamma), -1, 1), gamma.float() * 0.1


def _mlp(kernel, d, h, subln, seed=0):
    g = torch.Generator().manual_seed(seed)
    (cg, gg), (cu, gu), (cd, gd) = _codes(g, h, d), _codes(g, h, d), _codes(g, d, h)
    mk = lambda c, s, norm: PackedTernaryLinear(c, s, None, False, norm, 1e-5, kernel=kernel)  # noqa: E731
    return mk(cg, gg, False), mk(cu, gu, False), mk(cd, gd, subln), (cg, gg, cu, gu, cd, gd)


def _reference(x, parts, subln, eps=1e-5):
    cg, gg, cu, gu, cd, gd = (p.double() for p in parts)
    x = x.double()
    a, b = gg * x @ cg.t(), gu * x @ cu.t()
    hidden = a * torch.sigmoid(a) * b  # silu(a) = a sigmoid(a)
    if subln:
        hidden = hidden / torch.sqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
    return gd * hidden @ cd.t()


@pytest.mark.parametrize("kernel", FP32_KERNELS)
@pytest.mark.parametrize("d,h", [(32, 80), (37, 70), (64, 173)])  # hidden and model widths off the 4-column planes
@pytest.mark.parametrize("subln", [True, False])
def test_fused_swiglu_matches_the_definition(kernel, d, h, subln):
    gate, up, down, parts = _mlp(kernel, d, h, subln, seed=d * h)
    x = torch.randn(1, 1, d, generator=torch.Generator().manual_seed(1)) * 2
    with torch.no_grad():
        got = ternary_swiglu.fused_swiglu(gate, up, down, x)
        unfused = down(F.silu(gate(x)) * up(x))
    want = _reference(x, parts, subln)
    assert got is not None and got.shape == (1, 1, d) and got.dtype == torch.float32
    assert (got.double() - want).abs().max() <= 1e-4 * want.abs().max()
    assert (got - unfused).abs().max() <= 1e-4 * unfused.abs().max()


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_the_fused_form_is_refused_where_it_does_not_apply(kernel):
    """More than one row (a prompt: the tiled kernels), autograd, 8-bit activations, a bias, a norm before
    gate/up, another kernel, another dtype: None, so the MLP runs its three projections."""
    gate, up, down, _ = _mlp(kernel, 32, 64, True)
    x = torch.randn(1, 1, 32)
    fused = ternary_swiglu.fused_swiglu
    assert fused(gate, up, down, x) is not None
    assert fused(gate, up, down, torch.randn(1, 2, 32)) is None
    assert fused(gate, up, down, x.double()) is None
    assert fused(gate, up, down, x.clone().requires_grad_()) is None
    for attr, value in (("act_quant", True), ("input_norm", True)):
        other, _, _, _ = _mlp(kernel, 32, 64, True)
        setattr(other, attr, value)
        assert fused(other, up, down, x) is None, attr
    with_bias = PackedTernaryLinear(
        torch.ones(32, 64), torch.tensor(0.5), torch.ones(32), False, True, 1e-5, kernel=kernel
    )
    assert fused(gate, up, with_bias, x) is None
    dense_down, *_ = _mlp("dense", 64, 32, False)
    assert fused(gate, up, dense_down, x) is None


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_a_decoding_recurrent_mlp_takes_the_fused_kernel_and_a_prompt_does_not(kernel, monkeypatch):
    """The MLP of the depth-recurrent model calls the fused kernel once per decoded token (counted by a
    spy around the real function) and gives what its three projections give."""
    mlp = RecurrentMLP(32, 80, ternary=True, act_quant=False, subln=True, norm_eps=1e-5)
    gate, up, down, _ = _mlp(kernel, 32, 80, True)
    mlp.gate_proj, mlp.up_proj, mlp.down_proj = gate, up, down
    calls = []
    real = ternary_swiglu.fused_swiglu

    def spy(*a):
        out = real(*a)
        calls.append(out is not None)
        return out

    monkeypatch.setattr("nexus.models.recurrent.fused_swiglu", spy)
    x = torch.randn(1, 1, 32)
    with torch.no_grad():
        got = mlp(x)
        mlp(torch.randn(1, 5, 32))
    assert calls == [True, False]
    with torch.no_grad():
        want = down(F.silu(gate(x)) * up(x))
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
