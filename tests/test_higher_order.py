"""Nexus higher-order attention: reference parity, causality at every level, cached decoding,
parameter sharing, lossless gate, composition, FLOPs accounting, bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nexus.config import AttentionOptions, ConfigError, ModelConfig, RunConfig
from nexus.models.higher_order import HigherOrderAttention
from nexus.models.reference.higher_order_ref import reference_higher_order
from nexus.models.transformer import TransformerLM

VOCAB = 40

# every (form, shared, targets, order) the layer offers; the self form has no separate inner weights
VARIANTS = [
    (f, s, t, o)
    for f, s, t, o in itertools.product(["projected", "self"], [True, False], ["q", "qk", "qkv"], [2, 3])
    if not (f == "self" and not s)
]


def make_cfg(
    form="projected", shared=True, targets="qk", order=2, gate=False, attn_gate="none", **model
) -> ModelConfig:
    base = dict(
        d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, qk_norm=True, vocab_size=VOCAB, max_seq_len=32, init_std=0.2
    )  # a large init so outputs are O(1) and differences are visible
    base.update(model)
    cfg = ModelConfig(**base)
    cfg.attention = (
        AttentionOptions.make(
            "higher_order",
            order=order,
            ho_form=form,
            ho_shared=shared,
            ho_targets=targets,
            ho_gate=gate,
            gate=attn_gate,
        )
        if order > 1
        else AttentionOptions(gate=attn_gate)
    )
    errors: list[str] = []
    cfg.validate(errors)
    assert not errors, errors
    return cfg


def make_model(seed=0, **kw) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(make_cfg(**kw)).eval()


def open_gates(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, HigherOrderAttention) and m.ho_gate is not None:
            for p in m.ho_gate.values():
                p.data.copy_(torch.rand(p.shape, generator=g) * 2 - 1)


# ----------------------------------------------------------------------------- reference parity
@pytest.mark.parametrize("form,shared,targets,order", VARIANTS)
def test_layer_matches_naive_reference_outputs_and_grads(form, shared, targets, order):
    # output gate, q/k/v bias, GQA and QK-norm at every level, refinement gate open
    model = make_model(
        form=form, shared=shared, targets=targets, order=order, gate=True, attn_gate="headwise", attention_bias=True
    )
    layer = model.layers[0].attn
    open_gates(model)
    x = torch.randn(2, 9, 32, requires_grad=True)
    cos, sin = model.rope.tables(0, 9)
    fast = layer(x, (cos, sin))
    ref = reference_higher_order(layer, x, cos, sin)
    assert ref.abs().mean() > 1e-2  # the comparison is not between two near-zero tensors
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-5)
    w = torch.randn_like(fast)
    g_fast = torch.autograd.grad((fast * w).sum(), [x] + list(layer.parameters()), allow_unused=True)
    g_ref = torch.autograd.grad((ref * w).sum(), [x] + list(layer.parameters()), allow_unused=True)
    for a, b in zip(g_fast, g_ref):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- causality
def _leak(model, ids, t):
    """Max change of logits at positions <= t, and after t, when every token t+1..T changes."""
    other = ids.clone()
    other[:, t + 1 :] = (other[:, t + 1 :] + 7) % VOCAB  # each future token differs from the original
    with torch.no_grad():
        a, b = model(ids).logits, model(other).logits
    return (a[:, : t + 1] - b[:, : t + 1]).abs().max().item(), (a[:, t + 1 :] - b[:, t + 1 :]).abs().max().item()


@pytest.mark.parametrize("form,shared,targets,order", VARIANTS + [("projected", True, "qk", 1)])
def test_no_future_leakage(form, shared, targets, order):
    model = make_model(form=form, shared=shared, targets=targets, order=order)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    for t in (0, 2, 6, 10):
        past, future = _leak(model, ids, t)
        assert past <= 1e-5, f"logits at <= {t} moved by {past} when tokens {t + 1}..11 changed"
        assert future > 1e-3  # and the change does reach the positions it may reach


@pytest.mark.parametrize("form", ["projected", "self"])
def test_leakage_check_catches_a_non_causal_inner_attention(form):
    # The same probe on the reference with non-causal inner levels must see the leak, so the
    # no-leakage test above is able to fail.
    model = make_model(form=form, targets="qk", order=2)
    layer = model.layers[0].attn
    x = torch.randn(1, 10, 32)
    x2 = x.clone()
    x2[:, 6:] += 1.0  # every position after 5 changes
    cos, sin = model.rope.tables(0, 10)
    with torch.no_grad():
        ok = (reference_higher_order(layer, x, cos, sin) - reference_higher_order(layer, x2, cos, sin))[:, :6]
        bad = (
            reference_higher_order(layer, x, cos, sin, causal_inner=False)
            - reference_higher_order(layer, x2, cos, sin, causal_inner=False)
        )[:, :6]
    assert ok.abs().max() <= 1e-6
    assert bad.abs().max() > 1e-3


# ----------------------------------------------------------------------------- cached decoding
# order 3 runs every code path of order 2 (an order-2 level sits inside it); one order-2 case too
@pytest.mark.parametrize(
    "form,shared,targets,order", [v for v in VARIANTS if v[3] == 3] + [("projected", True, "qk", 2)]
)
def test_incremental_decoding_equals_full_forward(form, shared, targets, order):
    model = make_model(form=form, shared=shared, targets=targets, order=order)
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full = model(ids).logits
        cache = model.new_cache()
        pieces = [model(ids[:, :4], cache=cache).logits]
        pieces += [model(ids[:, t : t + 1], cache=cache).logits for t in range(4, 9)]
        pieces.append(model(ids[:, 9:], cache=cache).logits)  # a 2-token chunk after the cache
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-4, atol=1e-5)
    layer_cache = cache.layer(0)
    inner = [k for k in layer_cache if k.startswith("ho:")]
    assert inner, "inner levels keep their own caches"
    for k in inner:  # every inner cache holds the whole prefix: decoding never recomputes it
        for v in layer_cache[k].values():
            assert v.shape[2] == 11


def test_cached_generation_matches_uncached_generation():
    from nexus.models.generate import generate

    model = make_model(order=2, targets="qkv", n_layers=1)
    prompt = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(9))
    fast = generate(model, prompt, max_new_tokens=8, temperature=0)
    slow = generate(model, prompt, max_new_tokens=8, temperature=0, use_cache=False)
    assert torch.equal(fast, slow)


# ----------------------------------------------------------------------------- parameters, gate
def _n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_shared_weights_add_no_parameters_and_separate_weights_add_one_attention_per_target():
    base = _n_params(make_model(order=1))
    attn_params = _n_params(make_model(order=1).layers[0].attn)
    for order in (2, 3):
        assert _n_params(make_model(order=order, shared=True)) == base
        for targets in ("q", "qk", "qkv"):
            grown = _n_params(make_model(order=order, shared=False, targets=targets))
            assert grown == base + 2 * len(targets) * attn_params  # 2 layers, independent of the order


@pytest.mark.parametrize("form,targets,order", [("projected", "qk", 2), ("projected", "qkv", 3), ("self", "qk", 2)])
def test_closed_gate_computes_standard_attention_and_opens_under_training(form, targets, order):
    std = make_model(order=1)
    ho = make_model(form=form, targets=targets, order=order, gate=True, shared=form == "self")
    ho.load_state_dict(std.state_dict(), strict=False)
    ids = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ho(ids).logits, std(ids).logits, rtol=0, atol=1e-5)
    ho.train()
    out = ho(ids[:, :-1], labels=ids[:, 1:])
    out.loss.backward()
    gate_grads = [p.grad for m in ho.modules() if isinstance(m, HigherOrderAttention) for p in m.ho_gate.values()]
    assert all(g is not None and g.abs().sum() > 0 for g in gate_grads)  # the gate learns
    open_gates(ho)
    with torch.no_grad():
        assert (ho(ids).logits - std(ids).logits).abs().max() > 1e-3


# ----------------------------------------------------------------------------- composition
@pytest.mark.parametrize(
    "anchor,components", [("exo", ["q", "k", "v"]), ("nures", ["q", "k", "v"]), ("value_residual", ["v"])]
)
def test_composes_with_anchor_mixing_causally_and_incrementally(anchor, components):
    cfg = make_cfg(order=2, targets="qk")
    cfg.mixing.anchor, cfg.mixing.components = anchor, components
    if anchor == "value_residual":
        cfg.mixing.norm = "none"
    try:
        errors: list[str] = []
        cfg.validate(errors)
        assert not errors, errors
        torch.manual_seed(0)
        model = TransformerLM(cfg).eval()
    except ImportError:
        pytest.fail("anchor mixing module missing")
    ids = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(4))
    past, _ = _leak(model, ids, 4)
    assert past <= 1e-5
    with torch.no_grad():
        full = model(ids).logits
        cache = model.new_cache()
        inc = torch.cat(
            [model(ids[:, :3], cache=cache).logits]
            + [model(ids[:, t : t + 1], cache=cache).logits for t in range(3, 10)],
            1,
        )
    torch.testing.assert_close(inc, full, rtol=1e-4, atol=1e-5)


def test_composes_with_multi_query_attention_and_no_qk_norm():
    model = make_model(order=2, targets="qkv", n_kv_heads=1, qk_norm=False)
    layer = model.layers[1].attn
    x = torch.randn(1, 7, 32)
    cos, sin = model.rope.tables(0, 7)
    with torch.no_grad():
        torch.testing.assert_close(
            layer(x, (cos, sin)), reference_higher_order(layer, x, cos, sin), rtol=1e-4, atol=1e-5
        )


# ----------------------------------------------------------------------------- FLOPs
@pytest.mark.parametrize("form,shared,targets,order", VARIANTS)
def test_flops_walker_counts_what_the_forward_does(form, shared, targets, order, monkeypatch):
    """Count every attention product (via SDPA) and every Linear pass (via hooks) in a real forward;
    the FLOPs walker over the layer (child Linears + every flops_per_token) must give the same."""
    from nexus.analysis.flops import module_flops

    model = make_model(form=form, shared=shared, targets=targets, order=order)
    layer = model.layers[0].attn
    T = 8
    counted = {"attn": 0.0, "lin": 0.0}
    real_sdpa = F.scaled_dot_product_attention

    def counting_sdpa(q, k, v, *a, **kw):
        counted["attn"] += 2 * 2 * q.shape[1] * q.shape[-1] * k.shape[2]  # per query token, full square
        return real_sdpa(q, k, v, *a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    hooks = [
        m.register_forward_hook(
            lambda m, i, o: counted.__setitem__("lin", counted["lin"] + 2 * m.in_features * m.out_features)
        )
        for m in layer.modules()
        if isinstance(m, nn.Linear)
    ]
    with torch.no_grad():
        layer(torch.randn(1, T, 32), model.rope.tables(0, T))
    for h in hooks:
        h.remove()
    assert module_flops(layer, T) == pytest.approx(counted["attn"] + counted["lin"])


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "field,value,needle", [("order", 0, "order"), ("ho_targets", "kv", "ho_targets"), ("ho_form", "eq9", "ho_form")]
)
def test_bad_attention_config_is_one_config_error(field, value, needle):
    cfg = RunConfig()
    cfg.model.attention = AttentionOptions.make("higher_order")
    setattr(cfg.model.attention, field, value)  # set in Python, past the parser's Literal check: validate catches it
    with pytest.raises(ConfigError, match=needle):
        cfg.validate()


def test_self_form_with_separate_weights_is_rejected():
    cfg = RunConfig()
    cfg.model.attention = AttentionOptions.make("higher_order", ho_form="self", ho_shared=False)
    with pytest.raises(ConfigError, match="ho_shared"):
        cfg.validate()


@pytest.mark.parametrize(
    "args",
    [
        ["--model.attention.kind", "higher_order", "--model.attention.order", "0"],
        ["--model.attention.kind", "higher_order", "--model.attention.ho_targets", "k"],
        ["--model.attention.order", "2"],
    ],
)
def test_cli_rejects_bad_order_and_targets_with_exit_2(args, tmp_path, capsys):
    from nexus.cli import main

    out = tmp_path / "run"
    assert main(["train", "--preset", "baseline-micro", "--train.out_dir", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.attention" in err[0]
    assert not out.exists()
