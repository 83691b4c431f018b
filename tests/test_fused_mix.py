"""The fused CPU mixing path (models/fused_mix.py over models/mix_kernels.py) against eq. 6-7 written
plainly and differentiated by autograd, against the eager path, and, for whole models, against the
literal reference of models/reference/anchor_mixing_ref.py on outputs and gradients."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_exoformer import micro_model_cfg, randomize_mixing

from nexus.models import build_model, fused_mix, mix_kernels
from nexus.models.mixing import DynamicMixing
from nexus.models.modulated_mix import mix_layer
from nexus.models.reference.anchor_mixing_ref import reference_logits

pytestmark = pytest.mark.skipif(not mix_kernels.available(), reason="numba is not installed")


@contextlib.contextmanager
def eager_only():
    fused_mix.set_enabled(False)
    try:
        yield
    finally:
        fused_mix.set_enabled(True)


def _eq6_eq7(x, dyn, currents, anchors, l1s, l2s, shapes, cols):
    """gamma = sigmoid(GELU(x W1) W2 + b); out_i = l1_i g1 anchor_i + l2_i g2 current_i, plainly."""
    gamma = None
    if dyn is not None:
        gamma = torch.sigmoid(F.gelu(x @ dyn.fc1.weight.t()) @ dyn.fc2.weight.t() + dyn.fc2.bias)
    outs = []
    for i, (cur, l1, l2, shape, (i1, i2)) in enumerate(zip(currents, l1s, l2s, shapes, cols)):
        g1 = gamma[..., i1, None, None] if gamma is not None else 1.0
        g2 = gamma[..., i2, None, None] if gamma is not None else 1.0
        out = l2.view(shape) * g2 * cur
        outs.append(out if anchors is None else out + l1.view(shape) * g1 * anchors[i])
    return outs


# q (4 heads x 5), k/v (2 kv heads x 5), g headwise (4 heads x 1); coefficients of each granularity
SHAPES = {"q": (4, 5), "k": (2, 5), "v": (2, 5), "g": (4, 1)}
COLS = [(0, 1), (2, 3), (4, 5), (6, 7)]


@pytest.mark.parametrize("granularity", ["elementwise", "headwise", "scalar"])
@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("removed", [False, True])
@pytest.mark.parametrize("head_major", [False, True])
def test_fused_layer_matches_eq6_eq7_by_autograd(granularity, dynamic, removed, head_major):
    g = torch.Generator().manual_seed(0)
    B, T, d = 2, 3, 6

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()

    x = leaf(B, T, d)
    dyn = None
    if dynamic:
        dyn = DynamicMixing(d, 4).double()
        with torch.no_grad():
            for p in dyn.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    currents = [leaf(B, T, *s) for s in SHAPES.values()]
    anchors = None if removed else [leaf(B, T, *s) for s in SHAPES.values()]
    shapes = [{"elementwise": s, "headwise": (s[0], 1), "scalar": (1, 1)}[granularity] for s in SHAPES.values()]
    l1s = [leaf(s[0] * s[1]) for s in shapes]
    l2s = [leaf(s[0] * s[1]) for s in shapes]
    leaves = [x, *currents, *(anchors or []), *l1s, *l2s, *(dyn.parameters() if dyn is not None else [])]
    ups = [torch.randn(B, T, *s, generator=g, dtype=torch.float64) for s in SHAPES.values()]
    if head_major:  # upstream gradients as attention hands them back for q and k: (B, heads, T, width) memory
        ups = [u.transpose(1, 2).contiguous().transpose(1, 2) for u in ups]

    def run(fn):
        outs = fn(currents, anchors, l1s, l2s, shapes, x, dyn, COLS)
        grads = torch.autograd.grad(outs, leaves, ups, allow_unused=True)
        return outs, grads

    fast, fast_grads = run(mix_layer)
    assert all(type(o.grad_fn).__name__ == "FusedMixBackward" for o in fast)  # the fused path ran
    ref, ref_grads = run(lambda c, a, l1, l2, s, x_, dy, cols: _eq6_eq7(x_, dy, c, a, l1, l2, s, cols))
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for a, b in zip(fast_grads, ref_grads, strict=True):
        if b is None:  # unused input (l1 when the anchor is removed, x when static): the fused path agrees
            assert a is None or torch.count_nonzero(a) == 0
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_fused_layer_passes_gradcheck():
    g = torch.Generator().manual_seed(1)
    dyn = DynamicMixing(6, 4).double()
    with torch.no_grad():
        for p in dyn.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    shapes = [(4, 5), (2, 5)]

    def fn(x, c0, c1, a0, a1, l10, l11, l20, l21):
        return tuple(mix_layer([c0, c1], [a0, a1], [l10, l11], [l20, l21], shapes, x, dyn, [(0, 1), (4, 5)]))

    args = [torch.randn(2, 3, 6, generator=g, dtype=torch.float64)]
    args += [torch.randn(2, 3, *s, generator=g, dtype=torch.float64) for s in shapes * 2]
    args += [torch.randn(s[0] * s[1], generator=g, dtype=torch.float64) for s in shapes * 2]
    assert torch.autograd.gradcheck(fn, [a.requires_grad_() for a in args])


def _logits_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(ids).logits[0]
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view(logits.shape)
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("preset", ["exo-dynamic-e-tiny", "exo-h-tiny", "nures-e-tiny", "naive-combination-tiny"])
def test_model_outputs_and_gradients_match_literal_reference(preset):
    """Whole model on the fused path: logits and every parameter's gradient against the slow reference
    written from the paper's equations (differentiated by autograd), and against the eager path."""
    torch.manual_seed(0)
    model = build_model(micro_model_cfg(preset, n_layers=2)).double()
    randomize_mixing(model)
    ids = torch.randint(0, model.cfg.vocab_size, (1, 7))
    fast, fast_grads = _logits_and_grads(model, ids)
    assert "FusedMixBackward" in {type(n).__name__ for n in _graph(model(ids).logits)}
    with eager_only():
        eager, eager_grads = _logits_and_grads(model, ids)
        assert "FusedMixBackward" not in {type(n).__name__ for n in _graph(model(ids).logits)}
    model.zero_grad(set_to_none=True)
    ref = reference_logits(model, ids[0])
    weights = torch.linspace(-1, 1, ref.numel(), dtype=ref.dtype).view(ref.shape)
    (ref * weights).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    # the model's RoPE tables are computed in float32, the reference's in float64: about 1e-8 apart
    torch.testing.assert_close(fast, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fast, eager, rtol=0, atol=1e-12)
    assert fast_grads.keys() == ref_grads.keys() == eager_grads.keys()
    for name in fast_grads:
        torch.testing.assert_close(fast_grads[name], ref_grads[name], rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(fast_grads[name], eager_grads[name], rtol=0, atol=1e-11, msg=name)


def test_half_precision_and_disabled_path_fall_back_to_eager():
    torch.manual_seed(0)
    model = build_model(micro_model_cfg("exo-dynamic-e-tiny", n_layers=2))
    ids = torch.randint(0, model.cfg.vocab_size, (1, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        names = {type(n).__name__ for n in _graph(model(ids).logits)}
    assert "FusedMixBackward" not in names and "ModulatedMixBackward" in names


def _graph(t: torch.Tensor) -> set:
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            stack.extend(f for f, _ in fn.next_functions)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("has_anchor", [True, False])
def test_layer_kernels_match_eq7_by_autograd(dtype, has_anchor):
    """The one-call-per-layer kernels on their own: every component of a layer (different head counts
    and widths; upstream gradients in both layouts within one call) against eq. 7 differentiated by
    autograd, for outputs, both input gradients, the per-channel coefficient gradients and the
    per-token factor gradients (each component's two columns of gamma)."""
    g = torch.Generator().manual_seed(2)
    B, T = 2, 3
    shapes, cols = list(SHAPES.values()), [(0, 1), (2, 3), (4, 5), (7, 6)]
    gam = torch.rand(B * T, 8, generator=g, dtype=torch.float64).requires_grad_()
    cur = [torch.randn(B, T, *s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
    anc = [torch.randn(B, T, *s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
    l1 = [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
    l2 = [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
    ups = [torch.randn(B, T, *s, generator=g, dtype=torch.float64) for s in shapes]
    ref = []
    for i, (i1, i2) in enumerate(cols):  # eq. 7: out = (l1 g1) anchor + (l2 g2) current
        g1, g2 = gam[:, i1].view(B, T, 1, 1), gam[:, i2].view(B, T, 1, 1)
        ref.append(l2[i] * g2 * cur[i] + (l1[i] * g1 * anc[i] if has_anchor else 0))
    leaves = [gam, *cur, *l2, *((*anc, *l1) if has_anchor else ())]
    ref_grads = torch.autograd.grad(ref, leaves, ups)

    def np_(ts):
        return tuple(t.detach().to(dtype).contiguous().numpy() for t in ts)

    curs, ancs = np_(cur), np_(anc if has_anchor else cur)
    outs = tuple(np.empty_like(c) for c in curs)
    table = np.asarray(cols, dtype=np.int64)
    gam_np = gam.detach().to(dtype).numpy()
    mix_kernels.forward_layer_kernel()(curs, ancs, np_(l1), np_(l2), gam_np, table, has_anchor, outs)
    tol = {"rtol": 0, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(torch.from_numpy(o).double(), r.detach(), **tol)
    head_major = np.array([True, False, True, False])  # q, v as attention hands them back; k, g token-major
    grads = tuple(
        u.to(dtype).transpose(1, 2).contiguous().numpy() if hm else u.to(dtype).numpy()
        for u, hm in zip(ups, head_major)
    )
    d_cur = tuple(np.empty_like(c) for c in curs)
    d_anc = tuple(np.empty_like(c) for c in curs) if has_anchor else d_cur
    d_l = tuple(np.zeros((2, *c.shape[2:]), dtype=c.dtype) for c in curs)
    d_gam = np.zeros_like(gam_np)
    mix_kernels.backward_layer_kernel()(
        grads, head_major, curs, ancs, np_(l1), np_(l2), gam_np, table, has_anchor, d_cur, d_anc, d_l, d_gam
    )
    fast = [d_gam, *d_cur, *(dl[1] for dl in d_l)]
    if has_anchor:
        fast += [*d_anc, *(dl[0] for dl in d_l)]
    for a, b in zip(fast, ref_grads, strict=True):
        torch.testing.assert_close(torch.from_numpy(a).double(), b, **tol)
