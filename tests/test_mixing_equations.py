"""The ExoFormer mixing pieces one by one at tiny shapes, in float64, against the paper's equations
written out here (ExoFormer, eq. 1, 5, 6, 7 and app. A.1-A.4):

    RMSNorm per head with gain:  y = x / sqrt(mean_width(x^2) + eps) * gain             (A.1)
    exogenous anchors:           S_anc = H_0 W_anc^S                                    (eq. 5)
    dynamic factors:             gamma = sigmoid(GELU(H W1) W2 + b), 8 per token,
                                 ordered q1, q2, k1, k2, v1, v2, g1, g2                 (eq. 6)
    mixing:                      S_hat = (l1 g1) Norm(S_anc) + (l2 g2) S                (eq. 7; eq. 1 with g = 1)

Each case runs in milliseconds (no model is built), so this file is what mutation testing maps
first for models/mixing.py, modulated_mix.py, fused_mix.py and mix_kernels.py; the whole-model
tests in test_exoformer.py / test_fused_mix.py hold the wiring into the model."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from nexus.config import MixingConfig
from nexus.models import fused_mix, mix_kernels
from nexus.models.mixing import (
    COMPONENTS,
    AnchorCapture,
    AnchorMixer,
    AnchorNorm,
    DynamicMixing,
    ExoAnchor,
    LayerZeroAnchor,
    anchor_is_normed,
    build_anchor_mixing,
    coefficient_granularity,
    coefficient_shape,
    mixers,
)
from nexus.models.modulated_mix import mix_layer, modulated_mix

F64 = torch.float64
# GQA-like table: q and an elementwise gate per query head, k/v per kv head (as attention.component_shapes)
SHAPES = {"q": (2, 3), "k": (1, 3), "v": (1, 3), "g": (2, 3)}
EPS = 0.25  # far from RMSNorm's default, so a dropped eps shows
needs_numba = pytest.mark.skipif(not mix_kernels.available(), reason="numba is not installed")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rms(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-token RMSNorm over the last axis with gain (app. A.1), written out."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _eq6(x, W1, W2, b):
    """gamma = sigmoid(GELU(x W1^T) W2^T + b), with W stored (out, in) as nn.Linear stores it."""
    return 1 / (1 + torch.exp(-(_gelu(x @ W1.t()) @ W2.t() + b)))


def _randomize(module: nn.Module, seed: int) -> None:
    g = _gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 + torch.rand(p.shape, generator=g, dtype=p.dtype))


@contextlib.contextmanager
def _eager_only():
    fused_mix.set_enabled(False)
    try:
        yield
    finally:
        fused_mix.set_enabled(True)


# ----------------------------------------------------------------------------- configuration rules
def test_coefficient_granularity_and_shape():
    """ResFormer's fixed 0.5/0.5 is one scalar; a learnable value residual and every other anchor use
    mixing.granularity; the shapes are (heads, width), (heads, 1), (1, 1) (app. A.1)."""
    assert (
        coefficient_granularity(MixingConfig(anchor="value_residual", learnable=False, granularity="headwise"))
        == "scalar"
    )
    assert (
        coefficient_granularity(MixingConfig(anchor="value_residual", learnable=True, granularity="headwise"))
        == "headwise"
    )
    assert coefficient_granularity(MixingConfig(anchor="exo", learnable=False, granularity="headwise")) == "headwise"
    assert coefficient_shape((4, 5), "elementwise") == (4, 5)
    assert coefficient_shape((4, 5), "headwise") == (4, 1)
    assert coefficient_shape((4, 5), "scalar") == (1, 1)


def test_which_anchors_are_normed():
    """ResFormer reuses raw v_1; otherwise norm=all normalizes every anchor, qk only Q/K, none none."""
    for comp in COMPONENTS:
        assert not anchor_is_normed(MixingConfig(anchor="value_residual", norm="all"), comp)
        assert anchor_is_normed(MixingConfig(anchor="exo", norm="all"), comp)
        assert anchor_is_normed(MixingConfig(anchor="nures", norm="qk"), comp) == (comp in ("q", "k"))
        assert not anchor_is_normed(MixingConfig(anchor="exo", norm="none"), comp)


def test_anchor_norm_is_per_head_rms_with_gain_or_across_heads_for_a_headwise_gate():
    g = _gen(0)
    norm = AnchorNorm(2, 3, EPS).double()
    with torch.no_grad():
        norm.norm.weight.copy_(torch.rand(3, generator=g, dtype=F64) + 0.5)
    x = torch.randn(2, 4, 2, 3, generator=g, dtype=F64)
    torch.testing.assert_close(norm(x), _rms(x, norm.norm.weight, EPS), rtol=0, atol=1e-14)
    across = AnchorNorm(2, 1, EPS).double()  # one logit per head: normalized across the heads
    with torch.no_grad():
        across.norm.weight.copy_(torch.tensor([0.7, 1.9], dtype=F64))
    x1 = torch.randn(2, 4, 2, 1, generator=g, dtype=F64)
    out = across(x1)
    assert out.shape == x1.shape
    torch.testing.assert_close(out[..., 0], _rms(x1[..., 0], across.norm.weight, EPS), rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------- anchor sources
def _exo(shapes, comps, normed, d=4):
    anchor = ExoAnchor(d, shapes, comps, normed, EPS).double()
    _randomize(anchor, 1)
    with torch.no_grad():  # signed weights: the norms see both signs
        anchor.proj.weight.sub_(0.8)
    return anchor


def _eq5_anchors(anchor, shapes, comps, normed, h0):
    """S_anc = H_0 W_anc^S for each component, row blocks of the fused weight in component order,
    then the per-head norm of the normed ones."""
    out, row = {}, 0
    W = anchor.proj.weight
    for c in comps:
        heads, width = shapes[c]
        a = (h0 @ W[row : row + heads * width].t()).reshape(*h0.shape[:-1], heads, width)
        row += heads * width
        if c in normed:
            gain = anchor.norms[c].norm.weight
            a = _rms(a[..., 0], gain, EPS)[..., None] if width == 1 else _rms(a, gain, EPS)
        out[c] = a
    assert row == W.shape[0]
    return out


@pytest.mark.parametrize("path", ["direct", "table", "ids_without_table", "vocab_not_smaller"])
def test_exo_anchor_is_eq5_then_norm_on_every_path(path):
    """Eq. 5 per component (its own row block), normalized where asked; the table path (vocabulary
    smaller than the batch's tokens) projects the V embedding rows once and gathers them."""
    shapes = {"q": (2, 3), "k": (1, 3), "g": (2, 1)}
    comps, normed = ["q", "k", "g"], ["q", "g"]
    anchor = _exo(shapes, comps, normed)
    g = _gen(2)
    vocab = {"vocab_not_smaller": 6}.get(path, 5)
    table = torch.randn(vocab, 4, generator=g, dtype=F64)
    ids = torch.randint(0, vocab, (2, 3), generator=g)
    h0 = table[ids]
    seen = []
    hook = anchor.proj.register_forward_pre_hook(lambda mod, inp: seen.append(tuple(inp[0].shape)))
    kwargs = {"direct": {}, "ids_without_table": {"input_ids": ids}}.get(
        path, {"input_ids": ids, "embed_weight": table}
    )
    got = anchor(h0, **kwargs)
    hook.remove()
    assert seen == ([(vocab, 4)] if path == "table" else [(2, 3, 4)])
    want = _eq5_anchors(anchor, shapes, comps, normed, h0)
    assert list(got) == comps
    for c in comps:
        assert got[c].shape == (2, 3, *shapes[c])
        torch.testing.assert_close(got[c], want[c], rtol=0, atol=1e-13)


def test_exo_anchor_layout_for_muon_and_flops():
    """The fused Linear(d, sum of blocks) has no bias; Muon splits it into the paper's independent
    matrices: equal blocks by count, unequal ones at their row counts."""
    equal = ExoAnchor(4, SHAPES, ["q", "g"], [], EPS)
    assert equal.proj.weight.shape == (12, 4) and equal.proj.bias is None
    assert equal.proj.weight._muon_blocks == 2 and not hasattr(equal.proj.weight, "_muon_split")
    assert len(equal.norms) == 0
    unequal = ExoAnchor(4, SHAPES, list(COMPONENTS), ["k"], EPS)
    assert unequal.proj.weight.shape == (6 + 3 + 3 + 6, 4)
    assert unequal.proj.weight._muon_split == [6, 3, 3, 6] and not hasattr(unequal.proj.weight, "_muon_blocks")
    assert list(unequal.norms) == ["k"]
    assert equal.flops_per_token(7) == 0.0  # the Linear is counted by the model's walker


def test_width_refusal_names_the_field_and_the_valid_value():
    line = LayerZeroAnchor().width_refusal(None)
    assert line.startswith("anchor mixing (model.mixing.anchor) has no width-growth rule")
    assert line.endswith("(valid: model.mixing.anchor=none)")
    assert ExoAnchor(4, SHAPES, ["v"], [], EPS).width_refusal(None) == line


def test_layer_zero_anchor_starts_every_forward_empty():
    src = LayerZeroAnchor()
    first = src(torch.zeros(1, 2, 4))
    assert first == {} and isinstance(first, dict)
    first["v"] = torch.zeros(1)
    assert src(torch.zeros(1, 2, 4)) == {}


def test_anchor_capture_records_layer_zero_projections():
    """v, g raw projections and q (after layer 0's QK-norm), normalized per mixing.norm; k not mixed
    here, so never recorded; layer 0's own projections pass unchanged."""
    cap = AnchorCapture(SHAPES, ["q", "v", "g"], ["q", "v"], EPS).double()
    _randomize(cap, 3)
    g = _gen(4)
    parts = {c: torch.randn(2, 3, *s, generator=g, dtype=F64) for c, s in SHAPES.items()}
    anchors = {}
    assert cap(parts, parts["q"], anchors) is parts
    assert sorted(anchors) == ["g", "v"]
    torch.testing.assert_close(anchors["v"], _rms(parts["v"], cap.norms["v"].norm.weight, EPS), rtol=0, atol=1e-14)
    assert anchors["g"] is parts["g"]
    q_normed, k_normed = parts["q"] * 2, parts["k"] * 3  # stand-ins for the QK-normed q, k
    assert cap.after_qk_norm(q_normed, k_normed, anchors) == (q_normed, k_normed)
    assert sorted(anchors) == ["g", "q", "v"]
    torch.testing.assert_close(anchors["q"], _rms(q_normed, cap.norms["q"].norm.weight, EPS), rtol=0, atol=1e-14)
    # k mixed (and its anchor not normed), q not: the QK-normed k is recorded as it is
    cap_k, anchors = AnchorCapture(SHAPES, ["k"], [], EPS), {}
    assert cap_k(parts, parts["q"], anchors) is parts and anchors == {}
    cap_k.after_qk_norm(q_normed, k_normed, anchors)
    assert list(anchors) == ["k"] and anchors["k"] is k_normed


# ----------------------------------------------------------------------------- dynamic mixing (eq. 6)
def test_dynamic_mixing_is_eq6_and_starts_at_one_half():
    dm = DynamicMixing(4, 5).double()
    shapes = sorted((n, tuple(p.shape)) for n, p in dm.named_parameters())
    assert shapes == [("fc1.weight", (5, 4)), ("fc2.bias", (8,)), ("fc2.weight", (8, 5))]
    x = torch.randn(2, 3, 4, generator=_gen(5), dtype=F64)
    assert torch.equal(dm(x), torch.full((2, 3, 8), 0.5, dtype=F64))  # W2 = 0, b = 0: sigmoid(0)
    _randomize(dm, 6)
    with torch.no_grad():
        dm.fc1.weight.sub_(0.8)  # GELU sees both signs
        dm.fc2.weight.sub_(0.8)
    W1, W2, b = dm.fc1.weight, dm.fc2.weight, dm.fc2.bias
    h, a, gamma = dm.stages(x)
    torch.testing.assert_close(h, x @ W1.t(), rtol=0, atol=1e-14)
    torch.testing.assert_close(a, _gelu(x @ W1.t()), rtol=0, atol=1e-14)
    torch.testing.assert_close(gamma, _eq6(x, W1, W2, b), rtol=0, atol=1e-14)
    torch.testing.assert_close(dm(x), gamma, rtol=0, atol=0)
    fc1 = W1.clone()
    dm.reset_special_parameters()  # only the output layer returns to zero
    assert torch.count_nonzero(dm.fc2.weight) == 0 and torch.count_nonzero(dm.fc2.bias) == 0
    assert torch.equal(dm.fc1.weight, fc1)
    assert dm.flops_per_token(9) == 0.0


# ----------------------------------------------------------------------------- the mixer (eq. 1, 7)
def _eq7(parts, anchors, mixer, comps, gamma):
    """S_hat = (l1 g1) anchor + (l2 g2) S, gamma's columns in the paper's order q1, q2, k1, ..., g2."""
    out = dict(parts)
    for c in comps:
        l1, l2 = (coef.view(mixer.shapes[c]) for coef in (mixer.anchor_coef[c], mixer.current_coef[c]))
        i = COMPONENTS.index(c)
        g1 = gamma[..., 2 * i, None, None] if gamma is not None else 1.0
        g2 = gamma[..., 2 * i + 1, None, None] if gamma is not None else 1.0
        out[c] = l2 * g2 * parts[c] + (0 if anchors is None else l1 * g1 * anchors[c])
    return out


@pytest.mark.parametrize("granularity", ["elementwise", "headwise", "scalar"])
@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("fused", [pytest.param(True, marks=needs_numba), False])
def test_anchor_mixer_is_eq7(granularity, dynamic, fused):
    """k and g mixed (gamma columns 2, 3 and 6, 7), q and v passed through; the anchor dropped on request."""
    comps = ["k", "g"]
    mixer = AnchorMixer(4, SHAPES, comps, granularity, learnable=True, dynamic=dynamic, dynamic_hidden=5).double()
    _randomize(mixer, 7)
    g = _gen(8)
    x = torch.randn(2, 3, 4, generator=g, dtype=F64)
    parts = {c: torch.randn(2, 3, *s, generator=g, dtype=F64) for c, s in SHAPES.items()}
    anchors = {c: torch.randn(2, 3, *SHAPES[c], generator=g, dtype=F64) for c in comps}
    gamma = None
    if dynamic:
        gamma = _eq6(x, mixer.dynamic.fc1.weight, mixer.dynamic.fc2.weight, mixer.dynamic.fc2.bias)
    with contextlib.nullcontext() if fused else _eager_only():
        for anc in (anchors, None):
            got = mixer(parts, x, anc)
            want = _eq7(parts, anc, mixer, comps, gamma)
            assert sorted(got) == sorted(SHAPES)
            assert got["q"] is parts["q"] and got["v"] is parts["v"]
            for c in comps:
                torch.testing.assert_close(got[c], want[c], rtol=0, atol=1e-13)
                name = type(got[c].grad_fn).__name__
                assert name == ("FusedMixBackward" if fused else "ModulatedMixBackward")
    q, k = parts["q"], parts["k"]
    assert mixer.after_qk_norm(q, k, anchors) == (q, k)  # mixing happens before QK-norm only


@pytest.mark.parametrize(
    "granularity,numel",
    [("elementwise", {"q": 6, "g": 6}), ("headwise", {"q": 2, "g": 2}), ("scalar", {"q": 1, "g": 1})],
)
@pytest.mark.parametrize("dynamic", [True, False])
def test_anchor_mixer_coefficients(granularity, numel, dynamic):
    """lambda is stored flat per component at its granularity; it starts at 1 with dynamic mixing
    (gamma = 0.5 at init, app. A.4) and at 0.5 without; FLOPs are 3 per mixed element (app. F.2)."""
    mixer = AnchorMixer(4, SHAPES, ["q", "g"], granularity, learnable=True, dynamic=dynamic, dynamic_hidden=5)
    init = 1.0 if dynamic else 0.5
    assert sorted(n for n, _ in mixer.named_parameters() if "coef" in n) == [
        "anchor_coef.g",
        "anchor_coef.q",
        "current_coef.g",
        "current_coef.q",
    ]
    assert (mixer.dynamic is not None) == dynamic
    if dynamic:
        assert mixer.dynamic.fc1.out_features == 5
    for c in ("q", "g"):
        for coef in (mixer.anchor_coef[c], mixer.current_coef[c]):
            assert coef.shape == (numel[c],) and torch.equal(coef, torch.full_like(coef, init))
        l1, l2 = mixer.coefficients(c)
        assert l1.shape == l2.shape == coefficient_shape(SHAPES[c], granularity)
    with torch.no_grad():
        mixer.anchor_coef["q"].fill_(3.0)
        mixer.current_coef["g"].fill_(-2.0)
    l1, l2 = mixer.coefficients("q")
    assert torch.equal(l1, torch.full_like(l1, 3.0)) and torch.equal(l2, torch.full_like(l2, init))
    mixer.reset_special_parameters()
    for c in ("q", "g"):
        for coef in (mixer.anchor_coef[c], mixer.current_coef[c]):
            assert torch.equal(coef, torch.full_like(coef, init))
    assert mixer.flops_per_token(11) == 3.0 * (6 + 6)


def test_fixed_coefficients_are_half_half_buffers_outside_the_checkpoint():
    """ResFormer's fixed 0.5 / 0.5: buffers (nothing trains them), not written to a state dict."""
    mixer = AnchorMixer(4, SHAPES, ["v"], "scalar", learnable=False, dynamic=False, dynamic_hidden=5)
    assert list(mixer.parameters()) == [] and mixer.state_dict() == {}
    l1, l2 = mixer.coefficients("v")
    assert l1.shape == l2.shape == (1, 1) and l1.item() == l2.item() == 0.5
    g = _gen(9)
    parts = {"v": torch.randn(1, 2, 1, 3, generator=g)}
    anchors = {"v": torch.randn(1, 2, 1, 3, generator=g)}
    torch.testing.assert_close(
        mixer(parts, parts["v"], anchors)["v"], 0.5 * anchors["v"] + 0.5 * parts["v"], rtol=0, atol=0
    )


# ----------------------------------------------------------------------------- construction
@pytest.mark.parametrize("anchor", ["exo", "nures", "value_residual"])
def test_build_anchor_mixing(anchor):
    """ExoFormer mixes every layer from an external anchor; internal anchors capture layer 0 (unmixed)
    and mix the rest. Components in canonical order, norms per mixing.norm with the model's eps."""
    comps = ["v"] if anchor == "value_residual" else ["g", "q"]
    mixing = MixingConfig(
        anchor=anchor,
        components=comps,
        granularity="headwise",
        norm="qk",
        dynamic=anchor != "value_residual",
        learnable=anchor != "value_residual",
        dynamic_hidden=3,
    )
    source, layers = build_anchor_mixing(mixing, 4, SHAPES, 3, EPS)
    want = ["v"] if anchor == "value_residual" else ["q", "g"]
    assert len(layers) == 3
    mixed = layers if anchor == "exo" else layers[1:]
    if anchor == "exo":
        assert type(source) is ExoAnchor and source.components == want
        norms = source.norms
    else:
        assert type(source) is LayerZeroAnchor and type(layers[0]) is AnchorCapture
        assert layers[0].components == want
        norms = layers[0].norms
    assert list(norms) == ([] if anchor == "value_residual" else ["q"])
    assert all(n.norm.eps == EPS for n in norms.values())
    for mx in mixed:
        assert type(mx) is AnchorMixer and mx.components == want
        if anchor == "value_residual":  # fixed 0.5 / 0.5 scalars
            assert mx.shapes == {"v": (1, 1)} and mx.dynamic is None and list(mx.parameters()) == []
        else:  # learnable lambdas: parameters
            assert mx.shapes == {"q": (2, 1), "g": (2, 1)}
            assert sorted(n for n, _ in mx.named_parameters() if "coef" in n) == [
                "anchor_coef.g",
                "anchor_coef.q",
                "current_coef.g",
                "current_coef.q",
            ]
            assert mx.dynamic is not None and mx.dynamic.fc1.out_features == 3
    assert len({id(mx) for mx in mixed}) == len(mixed)  # one mixer per layer, not shared


def test_mixers_lists_each_mixed_layer_with_its_index():
    mixer = AnchorMixer(4, SHAPES, ["v"], "scalar", learnable=True, dynamic=False, dynamic_hidden=5)
    capture = AnchorCapture(SHAPES, ["v"], [], EPS)

    def layer(m):
        block = nn.Module()
        block.attn = nn.Module()
        block.attn.mixer = m
        return block

    model = nn.Module()
    model.layers = nn.ModuleList([layer(capture), layer(None), layer(mixer)])
    assert mixers(model) == [(2, mixer)]
    assert mixers(nn.Module()) == []


# ----------------------------------------------------------------------------- the two mixing paths
def _leaf(g, *shape, grad=True):
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(grad)


@pytest.mark.parametrize("anchor", [True, False])
@pytest.mark.parametrize(
    "factors,need",
    [
        (True, "all"),
        (True, "current_only"),
        (True, "coefficients_only"),
        (True, "factors_only"),
        (False, "all"),
        (False, "current_only"),
        (False, "coefficients_only"),
    ],
)
def test_modulated_mix_forward_and_backward_are_eq7(anchor, factors, need):
    """The eager Function's hand-written backward against eq. 7 differentiated by autograd, for every
    subset of inputs that needs a gradient (each side's three gradients are computed separately)."""
    g = _gen(10)
    cur, anc = _leaf(g, 2, 3, 2, 3), _leaf(g, 2, 3, 2, 3) if anchor else None
    l1, l2 = _leaf(g, 2, 1), _leaf(g, 2, 1)  # headwise: the per-channel gradient is summed over width
    gamma = torch.rand(2, 3, 2, generator=g, dtype=F64).requires_grad_() if factors else None
    wants = {
        "all": (True, True, True),
        "current_only": (True, False, False),
        "coefficients_only": (False, True, False),
        "factors_only": (False, False, True),
    }[need]
    for t, w in ((cur, wants[0]), (anc, wants[0]), (l1, wants[1]), (l2, wants[1]), (gamma, wants[2])):
        if t is not None:
            t.requires_grad_(w)
    inputs = [t for t in (cur, anc, l1, l2, gamma) if t is not None and t.requires_grad]
    up = torch.randn(2, 3, 2, 3, generator=g, dtype=F64)

    def run(fn):
        g1, g2 = (gamma[..., 0, None, None], gamma[..., 1, None, None]) if factors else (None, None)
        out = fn(cur, anc, l1, l2, g1, g2)
        return out, torch.autograd.grad(out, inputs, up, allow_unused=True, materialize_grads=True)

    def eq7(c, a, x1, x2, g1, g2):
        out = x2 * (g2 if g2 is not None else 1.0) * c
        return out if a is None else out + x1 * (g1 if g1 is not None else 1.0) * a

    out, grads = run(modulated_mix)
    ref, ref_grads = run(eq7)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-14)
    for a, b in zip(grads, ref_grads, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize(
    "activations,coefficients",
    [(torch.bfloat16, torch.float32), (F64, torch.float32)],
    ids=["bf16_autocast", "fp64_activations"],
)
def test_modulated_mix_with_mixed_precision_follows_eq7(activations, coefficients):
    """The eager Function takes any dtypes: under bf16 autocast the projections and the dynamic factors
    arrive in bf16 while the coefficients stay fp32, and fp64 activations may meet fp32 coefficients.
    The coefficient and factor gradients still follow eq. 7 (at the lower precision)."""
    g = _gen(11)
    cur = torch.randn(2, 3, 2, 3, generator=g).to(activations)
    l1 = torch.rand(2, 1, generator=g).to(coefficients).requires_grad_()
    l2 = torch.rand(2, 1, generator=g).to(coefficients).requires_grad_()
    anc = torch.randn(2, 3, 2, 3, generator=g).to(activations)
    gamma = torch.rand(2, 3, 2, generator=g).to(activations).requires_grad_()
    out = modulated_mix(cur, anc, l1, l2, gamma[..., 0, None, None], gamma[..., 1, None, None])
    up = torch.randn(out.shape, generator=g).to(out.dtype)
    d_l1, d_l2, d_gam = torch.autograd.grad(out, [l1, l2, gamma], up)
    ref = [t.detach().double().requires_grad_() for t in (l1, l2, gamma)]
    r = ref[1] * ref[2][..., 1, None, None] * cur.double() + ref[0] * ref[2][..., 0, None, None] * anc.double()
    want = torch.autograd.grad(r, ref, up.double())
    for got, w in zip((d_l1, d_l2, d_gam), want, strict=True):
        assert got.shape == w.shape
        torch.testing.assert_close(got.double(), w, rtol=1e-2, atol=1e-2 * w.abs().max().item())


def test_fused_path_choice():
    """The fused kernels take CPU float32/float64 tensors of one dtype, when enabled and numba is there."""
    f32, f64 = torch.zeros(2), torch.zeros(2, dtype=F64)
    assert fused_mix.usable([f32, f32]) == mix_kernels.available()
    assert fused_mix.usable([f64, f64]) == mix_kernels.available()
    assert not fused_mix.usable([f32, f64]) and not fused_mix.usable([f64, f32])
    assert not fused_mix.usable([torch.zeros(2, dtype=torch.bfloat16)] * 2)
    assert not fused_mix.usable([torch.zeros(2, dtype=torch.float16)] * 2)
    assert not fused_mix.usable([f32, torch.zeros(2, device="meta")])
    assert fused_mix.enabled()
    with _eager_only():
        assert not fused_mix.enabled() and not fused_mix.usable([f32, f32])
    assert fused_mix.enabled()


@needs_numba
@pytest.mark.parametrize("granularity", ["elementwise", "headwise", "scalar"])
@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("anchor", [True, False])
@pytest.mark.parametrize("grads", ["all", "activations_only", "head_major", "strided"])
def test_mix_layer_fused_is_eq6_eq7_with_gradients(granularity, dynamic, anchor, grads):
    """One layer's mixing in one node, forward and backward, against eq. 6-7 differentiated by autograd;
    gradients only for what needs them (fixed coefficients, an input that is a constant)."""
    g = _gen(12)
    comps = list(SHAPES.values())
    shapes = [coefficient_shape(s, granularity) for s in comps]
    coef_grad = grads != "activations_only"
    x = _leaf(g, 2, 3, 4)
    dyn = None
    if dynamic:
        dyn = DynamicMixing(4, 5).double()
        _randomize(dyn, 13)
        with torch.no_grad():
            dyn.fc1.weight.sub_(0.8)
            dyn.fc2.weight.sub_(0.8)
    currents = [_leaf(g, 2, 3, *s) for s in comps]
    anchors = [_leaf(g, 2, 3, *s) for s in comps] if anchor else None
    l1s = [_leaf(g, s[0] * s[1], grad=coef_grad) for s in shapes]
    l2s = [_leaf(g, s[0] * s[1], grad=coef_grad) for s in shapes]
    cols = [(0, 1), (2, 3), (4, 5), (7, 6)]
    ups = [torch.randn(2, 3, *s, generator=g, dtype=F64) for s in comps]
    if grads == "head_major":  # q and k's gradients come back from attention as (B, heads, T, width) memory
        ups = [u.transpose(1, 2).contiguous().transpose(1, 2) if i < 2 else u for i, u in enumerate(ups)]
    if grads == "strided":  # neither layout (every other entry of a wider tensor): copied to the token-major one
        ups = [torch.randn(2, 3, s[0], 2 * s[1], generator=g, dtype=F64)[..., ::2] for s in comps]
    leaves = [x, *currents, *(anchors or []), *l1s, *l2s, *(dyn.parameters() if dyn is not None else [])]
    wanted = [t for t in leaves if t.requires_grad]

    outs = mix_layer(currents, anchors, l1s, l2s, shapes, x, dyn, cols)
    assert {type(o.grad_fn).__name__ for o in outs} == {"FusedMixBackward"}
    got = torch.autograd.grad(outs, wanted, ups, allow_unused=True, materialize_grads=True)
    gamma = _eq6(x, dyn.fc1.weight, dyn.fc2.weight, dyn.fc2.bias) if dyn is not None else None
    ref = []
    for i, (cur, shape, (i1, i2)) in enumerate(zip(currents, shapes, cols)):
        g1 = gamma[..., i1, None, None] if gamma is not None else 1.0
        g2 = gamma[..., i2, None, None] if gamma is not None else 1.0
        r = l2s[i].view(shape) * g2 * cur
        ref.append(r if anchors is None else r + l1s[i].view(shape) * g1 * anchors[i])
    want = torch.autograd.grad(ref, wanted, ups, allow_unused=True, materialize_grads=True)
    for o, r in zip(outs, ref, strict=True):
        assert o.shape == r.shape and o.dtype == F64
        torch.testing.assert_close(o, r, rtol=0, atol=1e-13)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@needs_numba
def test_mix_layer_fused_float32_matches_the_eager_path():
    """float32 activations and parameters take the fused path and agree with the eager Function."""
    g = _gen(14)
    x = torch.randn(2, 3, 4, generator=g)
    dyn = DynamicMixing(4, 5)
    _randomize(dyn, 15)
    # all four components, as a float32 ExoFormer layer has them (headwise and scalar coefficients)
    currents = [torch.randn(2, 3, *s, generator=g) for s in SHAPES.values()]
    anchors = [torch.randn(2, 3, *s, generator=g) for s in SHAPES.values()]
    shapes = [(2, 1), (1, 1), (1, 1), (2, 1)]
    l1s, l2s = [torch.rand(h * w, generator=g) for h, w in shapes], [torch.rand(h * w, generator=g) for h, w in shapes]
    args = (currents, anchors, l1s, l2s, shapes, x, dyn, [(0, 1), (2, 3), (5, 4), (6, 7)])
    fused = mix_layer(*args)
    assert {type(o.grad_fn).__name__ for o in fused} == {"FusedMixBackward"}
    with _eager_only():
        eager = mix_layer(*args)
    assert {type(o.grad_fn).__name__ for o in eager} == {"ModulatedMixBackward"}
    for a, b in zip(fused, eager, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fused", [pytest.param(True, marks=needs_numba), False])
@pytest.mark.parametrize("modified", ["current", "anchor", "l1", "l2"])
def test_a_backward_after_an_input_was_modified_in_place_is_refused(fused, modified):
    """Both paths read their inputs again in the backward (the fused one through numpy views of the
    same memory), so autograd's in-place check must cover every one of them: a gradient computed from
    a modified coefficient or anchor would be silently wrong."""
    g = _gen(16)
    currents, anchors = [_leaf(g, 1, 2, 2, 3)], [_leaf(g, 1, 2, 2, 3)]
    l1s, l2s = [_leaf(g, 6)], [_leaf(g, 6)]
    x = _leaf(g, 1, 2, 4)
    with contextlib.nullcontext() if fused else _eager_only():
        outs = mix_layer(currents, anchors, l1s, l2s, [(2, 3)], x, None, [(0, 1)])
    assert type(outs[0].grad_fn).__name__ == ("FusedMixBackward" if fused else "ModulatedMixBackward")
    target = {"current": currents, "anchor": anchors, "l1": l1s, "l2": l2s}[modified][0]
    with torch.no_grad():
        target.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(outs, [*currents, *anchors, *l1s, *l2s], [torch.ones_like(outs[0])])


@pytest.mark.parametrize("fused", [pytest.param(True, marks=needs_numba), False])
def test_without_the_anchor_l1_gets_no_gradient(fused):
    """Anchor removal drops l1 from eq. 7, so autograd must report it unused (None), as it does for the
    equation itself: a zero gradient instead would still let AdamW step and decay the coefficient.
    The four components of SHAPES, as the other fused tests, so numba compiles nothing new."""
    g = _gen(17)
    comps = list(SHAPES.values())
    currents = [_leaf(g, 2, 3, *s) for s in comps]
    l1s, l2s = [_leaf(g, h * w) for h, w in comps], [_leaf(g, h * w) for h, w in comps]
    with contextlib.nullcontext() if fused else _eager_only():
        outs = mix_layer(currents, None, l1s, l2s, comps, _leaf(g, 2, 3, 4), None, [(0, 1)] * 4)
    assert {type(o.grad_fn).__name__ for o in outs} == {"FusedMixBackward" if fused else "ModulatedMixBackward"}
    ups = [torch.randn(2, 3, *s, generator=g, dtype=F64) for s in comps]
    ref = [l2.view(s) * cur for l2, s, cur in zip(l2s, comps, currents)]
    want = torch.autograd.grad(ref, [*currents, *l1s, *l2s], ups, allow_unused=True)
    got = torch.autograd.grad(outs, [*currents, *l1s, *l2s], ups, allow_unused=True)
    assert all(w is None for w in want[4:8]) and all(d is None for d in got[4:8])
    for a, b in zip(got[:4] + got[8:], want[:4] + want[8:], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


@needs_numba
def test_head_major_gradients_reach_the_kernel_in_their_own_memory(monkeypatch):
    """Attention hands q and k's gradients back as (B, heads, T, width) memory: the backward hands that
    memory to the kernel flagged head-major rather than copying it token-major (a copy per layer and
    step); a token-major gradient goes as it is, flagged token-major."""
    real, seen = mix_kernels.backward_layer_kernel(), {}

    def spy(grads, head_major, *rest):
        seen["grads"], seen["head_major"] = grads, head_major.tolist()
        return real(grads, head_major, *rest)

    monkeypatch.setattr(mix_kernels, "backward_layer_kernel", lambda: spy)
    g = _gen(18)
    comps = list(SHAPES.values())  # T = 3 differs from every head count, so the two layouts differ
    currents = [_leaf(g, 2, 3, *s) for s in comps]
    l1s, l2s = [_leaf(g, h * w) for h, w in comps], [_leaf(g, h * w) for h, w in comps]
    outs = mix_layer(currents, None, l1s, l2s, comps, _leaf(g, 2, 3, 4), None, [(0, 1)] * 4)
    ups = [
        torch.randn(2, h, 3, w, generator=g, dtype=F64).transpose(1, 2)
        if i < 2
        else torch.randn(2, 3, h, w, generator=g, dtype=F64)
        for i, (h, w) in enumerate(comps)
    ]
    got = torch.autograd.grad(outs, currents, ups)
    # k has one head: its (B, 1, T, width) memory is token-major already (torch calls it contiguous)
    assert seen["head_major"] == [True, False, False, False]
    assert [a.shape for a in seen["grads"]] == [(2, 2, 3, 3), (2, 3, 1, 3), (2, 3, 1, 3), (2, 3, 2, 3)]
    assert all(np.shares_memory(a, u.numpy()) for a, u in zip(seen["grads"], ups))
    for d, l2, s, u in zip(got, l2s, comps, ups):  # eq. 7 without the anchor, factors 1: d out / d current = l2
        torch.testing.assert_close(d, l2.detach().view(s) * u, rtol=0, atol=1e-13)


def test_the_kernels_column_table_is_an_n_by_2_read_only_int64_copy_of_cols():
    """The layer kernel reads component i's factor columns from row i; `_cols_array` caches the table
    per cols, so it must be read-only (a write would change every later layer with the same cols).
    The builder is called directly: a cached table from an earlier test would hide it."""
    for cols in (((7, 6),), ((0, 1), (2, 3), (5, 4))):
        table = fused_mix._build_cols_array(cols)
        assert table.dtype == np.int64 and table.shape == (len(cols), 2)
        assert table.tolist() == [list(c) for c in cols]
        assert not table.flags.writeable
    assert fused_mix._cols_array(((1, 0),)) is fused_mix._cols_array(((1, 0),))
