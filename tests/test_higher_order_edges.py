"""Higher-order attention's edges beyond reference parity: what the attention-map hooks see (the level
directly below the outer one, once per refined target), anchor mixing on the outer level only,
zero_init_out on the outer output projection only, and which width growths it refuses."""

import itertools
from types import SimpleNamespace

import pytest
import torch
from test_higher_order import make_model, open_gates

from nexus.models.higher_order import HigherOrderAttention


def capture(layer: HigherOrderAttention, name: str) -> list:
    seen = []
    hook = layer.hook_qk if name == "outer" else layer.hook_inner[name]
    hook.register_forward_hook(lambda m, args, out: seen.append(args))
    return seen


def run(model, T=6, seed=0):
    x = torch.randn(1, T, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model.layers[0].attn(x, model.rope.tables(0, T))
    return x


@pytest.mark.parametrize("shared", [True, False])
def test_inner_hooks_at_order_2_see_the_standard_attention_of_the_layer(shared):
    """Projected form, order 2: the level below the outer is order-1 attention, so each target's inner
    hook receives the (q, k) that a standard layer with those weights shows at its own hook, once."""
    model = make_model(order=2, shared=shared, targets="qk")
    layer = model.layers[0].attn
    inner = {t: capture(layer, f"inner_{t}") for t in "qk"}
    run(model)
    for t in "qk":
        std = make_model(order=1)
        std.layers[0].attn.load_state_dict((layer if shared else layer.inner[t]).state_dict(), strict=False)
        want = capture(std.layers[0].attn, "outer")
        run(std)
        assert len(inner[t]) == 1 and len(want) == 1
        for got, ref in zip(inner[t][0], want[0]):
            torch.testing.assert_close(got, ref, rtol=1e-6, atol=0)


def test_inner_hooks_at_order_3_see_the_refined_level_not_the_first():
    model = make_model(order=3, targets="qk")
    std = make_model(order=1)
    std.layers[0].attn.load_state_dict(model.layers[0].attn.state_dict(), strict=False)
    inner = {t: capture(model.layers[0].attn, f"inner_{t}") for t in "qk"}
    first = capture(std.layers[0].attn, "outer")
    run(model), run(std)
    for t in "qk":
        assert len(inner[t]) == 1 and all(isinstance(a, torch.Tensor) for a in inner[t][0])
        q, k = inner[t][0]
        assert q.shape == first[0][0].shape and (q - first[0][0]).abs().max() > 1e-3  # order 2, not order 1


@pytest.mark.parametrize("order", [2, 3])
def test_self_form_inner_hook_sees_the_last_refinement_input(order):
    """Eq. 7-8 refines z <- softmax(z z^T / sqrt(d)) z; the hook sees the input of the last refinement
    (as query and as keys): at order 2 the raw per-head projection, at order 3 the once-refined one."""
    model = make_model(form="self", order=order, targets="q")
    layer = model.layers[0].attn
    seen = capture(layer, "inner_q")
    x = run(model)
    raw = layer.q_proj(x).view(1, 6, 4, 8).transpose(1, 2).detach()
    assert len(seen) == 1
    z, hist = seen[0]
    assert torch.equal(z, hist)
    if order == 2:
        torch.testing.assert_close(z, raw, rtol=1e-6, atol=0)
    else:
        assert z.shape == raw.shape and (z - raw).abs().max() > 1e-3


def test_anchor_mixing_acts_on_the_outer_level_only():
    calls = []

    class Spy(torch.nn.Module):
        def forward(self, parts, x, anchors):
            calls.append("before")
            return parts

        def after_qk_norm(self, q, k, anchors):
            calls.append("after")
            return q, k

    model = make_model(order=3, targets="qkv")
    layer = model.layers[0].attn
    layer.mixer = Spy()
    run(model)
    assert calls == ["before", "after"]
    from nexus.models.higher_order import _build

    built = _build(model.cfg, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, mixer=Spy())
    assert isinstance(built.mixer, Spy)  # the injected mixer is kept


def test_zero_init_out_zeroes_the_outer_output_projection_not_the_inner_ones():
    """An inner attention's W_o produces Y, from which Q~ = Y W_q: zeroing it would zero the refinement."""
    model = make_model(order=2, shared=False, targets="qk", zero_init_out=True)
    layer = model.layers[0].attn
    assert torch.count_nonzero(layer.o_proj.weight) == 0
    assert all(torch.count_nonzero(m.o_proj.weight) > 0 for m in layer.inner.values())


def test_width_refusal_only_where_exactness_cannot_hold():
    """Refused iff projected form, hidden growth, --preserve exact and zero new fan-out (init_out zero)."""
    for form in ("projected", "self"):
        layer = make_model(form=form, order=2).layers[0].attn
        for hidden, preserve, init_out in itertools.product([0, 64], ["exact", "rms"], ["zero", "copy"]):
            spec = SimpleNamespace(hidden=hidden, preserve=preserve, init_out=init_out)
            refused = layer.width_refusal(spec)
            assert bool(refused) == (form == "projected" and hidden and preserve == "exact" and init_out == "zero")
            if refused:
                assert refused.startswith("--preserve exact with --init zero,<any> on width.hidden")
                assert refused.endswith("valid: --init copy,copy, or --preserve rms)")


@pytest.mark.parametrize("form", ["projected", "self"])
def test_the_refinement_gate_keeps_the_autocast_dtype(form):
    """Under bf16 autocast the gated blend base + alpha (refined - base) stays in the projections' dtype
    (alpha is cast to it), so the higher-order layer hands its outer attention q, k in the same dtype as
    standard attention does; an fp32 alpha would promote them to fp32 (twice the attention memory)."""
    model = make_model(form=form, order=2, targets="qk", gate=True)
    std = make_model(order=1)
    layer = model.layers[0].attn
    assert layer.ho_gate is not None
    open_gates(model)
    outer, ref = capture(layer, "outer"), capture(std.layers[0].attn, "outer")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        run(model), run(std)
    (q, k), (q_std, k_std) = outer[0], ref[0]
    assert q_std.dtype == k_std.dtype == torch.bfloat16  # what standard attention hands SDPA here
    assert q.dtype == q_std.dtype and k.dtype == k_std.dtype
