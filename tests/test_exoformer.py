"""ExoFormer family: mixing semantics, init, equivalences, caching, optimizer wiring, presets, config errors."""

from __future__ import annotations

import pytest
import torch

from nexus.analysis.hooks import anchor_removed, direct_anchor_projection
from nexus.config import ConfigError, ModelConfig, RunConfig
from nexus.models import build_model
from nexus.models.layers import RMSNorm
from nexus.models.mixing import COMPONENTS, mixers
from nexus.models.modulated_mix import modulated_mix
from nexus.models.reference.anchor_mixing_ref import reference_logits
from nexus.presets import get_preset
from nexus.presets.exoformer import TABLE2_ROWS, table2_presets


def micro_model_cfg(preset: str, **over) -> ModelConfig:
    """The Table-2 row of `preset` at d_model 64, 2-3 layers, with non-zero init so logits are informative."""
    m = get_preset(preset).model
    m.d_model, m.n_heads, m.n_layers, m.max_seq_len = 64, 4, 3, 64
    m.zero_init_out = m.zero_init_head = False
    for k, v in over.items():
        setattr(m, k, v)
    errors: list[str] = []
    m.validate(errors)
    assert not errors, errors
    return m


def randomize_mixing(model, seed: int = 0) -> None:
    """Move every coefficient and dynamic-mixing weight off its init so a test can see them act."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, mx in mixers(model):
            for c in mx.components:
                for coef in (mx.anchor_coef[c], mx.current_coef[c]):
                    coef.copy_(0.3 + torch.rand(coef.shape, generator=g))
            if mx.dynamic is not None:
                mx.dynamic.fc2.weight.normal_(0, 0.5, generator=g)
                mx.dynamic.fc2.bias.normal_(0, 0.5, generator=g)
        # every RMSNorm gain (block pre-norms, QK-norms, anchor norms) off 1: with unit gains the
        # pre-normed input already has RMS ~1, and a stray extra norm in front of the dynamic-mixing MLP
        # would be invisible
        for mod in model.modules():
            if isinstance(mod, RMSNorm) and mod.weight is not None:
                mod.weight.copy_(0.5 + torch.rand(mod.weight.shape, generator=g))


ALL_ROWS = table2_presets("tiny")
MIXED_ROWS = [f"{stem}-tiny" for stem, _, _, mix in TABLE2_ROWS if mix.anchor != "none"]


# ----------------------------------------------------------------------------- reference and order
@pytest.mark.parametrize("preset", ALL_ROWS)
def test_fast_forward_matches_literal_reference(preset):
    torch.manual_seed(0)
    m = micro_model_cfg(preset, n_layers=2, n_kv_heads=2 if "exo-h" in preset or "nures-s" in preset else 0)
    model = build_model(m)
    randomize_mixing(model)
    ids = torch.randint(0, m.vocab_size, (1, 9))
    fast = model(ids).logits[0]
    ref = reference_logits(model, ids[0])
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("preset", ["exo-dynamic-e-tiny", "nures-h-tiny", "naive-combination-tiny"])
def test_headwise_gate_with_gqa_matches_reference(preset):
    """One gate logit per head (its anchor normalized across heads) and 2 kv heads for 4 query heads."""
    torch.manual_seed(2)
    m = micro_model_cfg(preset, n_layers=2, n_kv_heads=2)
    m.attention.gate = "headwise"
    model = build_model(m)
    randomize_mixing(model)
    assert model.layers[1].attn.g_proj.out_features == m.n_heads
    ids = torch.randint(0, m.vocab_size, (1, 7))
    torch.testing.assert_close(model(ids).logits[0], reference_logits(model, ids[0]), rtol=1e-4, atol=1e-4)


def test_reference_would_catch_wrong_order():
    """Mixing after QK-norm instead of before changes the output: the reference test is not vacuous."""
    torch.manual_seed(0)
    m = micro_model_cfg("exo-e-tiny", n_layers=2)
    model = build_model(m)
    randomize_mixing(model)
    ids = torch.randint(0, m.vocab_size, (1, 9))
    ref = reference_logits(model, ids[0])
    for _, mx in mixers(model):  # move mixing of q/k after the QK-norm
        orig = mx.forward

        def late(parts, x, anchors, orig=orig, mx=mx):
            mixed = orig(parts, x, anchors)
            mx._saved = (parts, x)
            return {**mixed, "q": parts["q"], "k": parts["k"]}  # q, k go to QK-norm unmixed

        def after(q, k, anchors, orig=orig, mx=mx):
            parts, x = mx._saved
            mixed = orig({**parts, "q": q, "k": k}, x, anchors)  # ... and are mixed afterwards
            return mixed["q"], mixed["k"]

        mx.forward, mx.after_qk_norm = late, after
    wrong = model(ids).logits[0]
    assert not torch.allclose(wrong, ref, atol=1e-3)


# ----------------------------------------------------------------------------- dynamic mixing init
def test_dynamic_gamma_is_exactly_half_after_construction_and_global_init():
    m = micro_model_cfg("exo-dynamic-e-tiny")
    model = build_model(m)
    x = torch.randn(2, 5, m.d_model)

    def gammas():
        return [mx.dynamic(x) for _, mx in mixers(model)]

    assert len(gammas()) == m.n_layers
    for g in gammas():
        assert torch.equal(g, torch.full_like(g, 0.5))
    for _, mx in mixers(model):
        for c in mx.components:
            assert torch.equal(mx.anchor_coef[c], torch.ones_like(mx.anchor_coef[c]))
            assert torch.equal(mx.current_coef[c], torch.ones_like(mx.current_coef[c]))
    # a global re-init (what the released code did by accident) must not touch the zero layer
    model.init_weights()
    for g in gammas():
        assert torch.equal(g, torch.full_like(g, 0.5))
    for _, mx in mixers(model):
        assert torch.count_nonzero(mx.dynamic.fc2.weight) == 0 and torch.count_nonzero(mx.dynamic.fc2.bias) == 0
        assert torch.count_nonzero(mx.dynamic.fc1.weight) > 0  # fc1 keeps its random init


@pytest.mark.parametrize("preset", ["exo-e-tiny", "exo-h-tiny", "nures-s-tiny", "nures-e-nonorm-vg-tiny"])
def test_static_lambda_starts_at_half(preset):
    """Both coefficients (lambda1 on the anchor, lambda2 on the current projection) of every mixed
    component start at 0.5, also after the model's global re-init."""
    model = build_model(micro_model_cfg(preset))
    for _check in range(2):
        seen = 0
        for _, mx in mixers(model):
            for c in mx.components:
                for coef in (mx.anchor_coef[c], mx.current_coef[c]):
                    assert torch.equal(coef, torch.full_like(coef, 0.5)), (preset, c)
                    seen += 1
        assert seen == 2 * len(mixers(model)) * len(mixers(model)[0][1].components) > 0
        model.init_weights()


def test_dynamic_mixing_is_eq6_on_the_pre_normed_input():
    """Eq. 6: theta_DM = {W1 (d x 16), W2 (16 x 8), b (8)} and nothing else (no norm of its own), and
    the MLP reads the attention's pre-normed input: with non-unit pre-norm gains, an extra RMSNorm
    in front of W1 would change gamma."""
    torch.manual_seed(3)
    m = micro_model_cfg("exo-dynamic-e-tiny", n_layers=2)
    model = build_model(m)
    randomize_mixing(model)
    for _, mx in mixers(model):
        shapes = sorted((n, tuple(p.shape)) for n, p in mx.dynamic.named_parameters())
        assert shapes == [("fc1.weight", (16, m.d_model)), ("fc2.bias", (8,)), ("fc2.weight", (8, 16))]
    layer, mx = model.layers[1], model.layers[1].attn.mixer
    seen = {}
    hooks = [
        layer.attn_norm.register_forward_hook(lambda mod, inp, out: seen.setdefault("h", out)),
        # the MLP's first Linear: both mixing paths (eager, fused) run it on the MLP's input
        mx.dynamic.fc1.register_forward_pre_hook(lambda mod, inp: seen.setdefault("dm_input", inp[0])),
    ]
    with torch.no_grad():
        model(torch.randint(0, m.vocab_size, (2, 6)))
    for hk in hooks:
        hk.remove()
    h = seen["h"]
    assert torch.equal(seen["dm_input"], h)
    W1, W2, b = mx.dynamic.fc1.weight, mx.dynamic.fc2.weight, mx.dynamic.fc2.bias
    want = torch.sigmoid(torch.nn.functional.gelu(h @ W1.t()) @ W2.t() + b)
    torch.testing.assert_close(mx.dynamic(h), want)
    renormed = torch.sigmoid(
        torch.nn.functional.gelu((h / h.pow(2).mean(-1, keepdim=True).sqrt()) @ W1.t()) @ W2.t() + b
    )
    assert (renormed - want).abs().max() > 1e-3  # the extra-norm form is distinguishable here


@pytest.mark.parametrize(
    "granularity,expect",
    [("elementwise", lambda H, hd: H * hd), ("headwise", lambda H, hd: H), ("scalar", lambda H, hd: 1)],
)
def test_coefficient_granularity_shapes(granularity, expect):
    m = micro_model_cfg("exo-e-tiny")
    m.mixing.granularity = granularity
    model = build_model(m)
    (_, mx), *_ = mixers(model)
    for c in COMPONENTS:
        assert mx.anchor_coef[c].numel() == expect(m.n_heads, m.hd)


# ----------------------------------------------------------------------------- equivalences
def test_exo_with_anchor_off_equals_gated_baseline_exactly():
    gated_cfg = micro_model_cfg("gated-tiny")
    exo_cfg = micro_model_cfg("exo-e-tiny")
    torch.manual_seed(3)
    gated = build_model(gated_cfg)
    exo = build_model(exo_cfg)
    missing, unexpected = exo.load_state_dict(gated.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("anchor.") or ".mixer." in k for k in missing)
    with torch.no_grad():
        for _, mx in mixers(exo):
            for c in mx.components:
                mx.anchor_coef[c].zero_()
                mx.current_coef[c].fill_(1.0)
    ids = torch.randint(0, 259, (2, 16))
    assert torch.equal(exo(ids).logits, gated(ids).logits)
    with torch.no_grad():  # and the anchor does matter once its coefficient is non-zero
        mixers(exo)[1][1].anchor_coef["v"].fill_(0.5)
    assert not torch.allclose(exo(ids).logits, gated(ids).logits)


def test_resformer_is_half_half_value_residual():
    """v_n = 0.5 v_1 + 0.5 v_n with v_1 layer 0's raw value projection; q, k untouched."""
    m = micro_model_cfg("resformer-tiny")
    model = build_model(m)
    seen = {}
    for i, layer in enumerate(model.layers):
        orig = layer.attn.project

        def rec(x, i=i, orig=orig):
            parts = orig(x)
            seen[i] = {k: v.clone() for k, v in parts.items()}
            return parts

        layer.attn.project = rec
    mixed = {}
    for i, mx in mixers(model):
        orig = mx.forward

        def rec_mix(parts, x, anchors, i=i, orig=orig):
            out = orig(parts, x, anchors)
            mixed[i] = out
            return out

        mx.forward = rec_mix
    model(torch.randint(0, 259, (1, 8)))
    for i in range(1, m.n_layers):
        torch.testing.assert_close(mixed[i]["v"], 0.5 * seen[0]["v"] + 0.5 * seen[i]["v"])
        assert torch.equal(mixed[i]["q"], seen[i]["q"]) and torch.equal(mixed[i]["k"], seen[i]["k"])
    assert not any(p.requires_grad for n, p in model.named_parameters() if ".mixer." in n)


def test_resformer_learnable_option():
    m = micro_model_cfg("resformer-tiny")
    m.mixing.learnable = True
    model = build_model(m)
    coefs = [p for n, p in model.named_parameters() if ".mixer." in n]
    assert coefs and all(p.requires_grad and torch.equal(p, torch.full_like(p, 0.5)) for p in coefs)
    assert all(p.numel() == m.kv_heads * m.hd for p in coefs)  # elementwise over v's channels


def test_anchor_removal_zeroes_only_the_anchor_term():
    m = micro_model_cfg("exo-e-tiny")
    model = build_model(m)
    randomize_mixing(model)
    ids = torch.randint(0, 259, (1, 8))
    full = model(ids).logits
    with anchor_removed(model):
        removed = model(ids).logits
    with torch.no_grad():
        for _, mx in mixers(model):
            for c in mx.components:
                mx.anchor_coef[c].zero_()
    assert torch.equal(removed, model(ids).logits)
    assert not torch.allclose(full, removed)


# ----------------------------------------------------------------------------- fast paths vs references
def _mix_by_autograd(cur, anc, l1, l2, g1, g2):
    """eq. 7 written plainly, differentiated by autograd: the reference for the hand-written backward."""
    current = cur * l2 * (g2 if g2 is not None else 1.0)
    return current if anc is None else current + anc * l1 * (g1 if g1 is not None else 1.0)


@pytest.mark.parametrize("coef_shape", [(4, 5), (4, 1), (1, 1)], ids=["elementwise", "headwise", "scalar"])
@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("removed", [False, True])
@pytest.mark.parametrize("coef_trainable", [True, False])
def test_modulated_mix_matches_autograd_reference(coef_shape, dynamic, removed, coef_trainable):
    g = torch.Generator().manual_seed(0)

    def leaf(*shape, grad=True):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)

    cur, anc = leaf(2, 3, 4, 5), None if removed else leaf(2, 3, 4, 5)
    l1, l2 = leaf(*coef_shape, grad=coef_trainable), leaf(*coef_shape, grad=coef_trainable)
    gamma = torch.rand(2, 3, 8, generator=g, dtype=torch.float64).requires_grad_() if dynamic else None

    def run(fn):
        g1 = g2 = None
        if gamma is not None:  # strided slices of the (B, T, 8) factors, as the mixer passes them
            g1, g2 = gamma[..., 4, None, None], gamma[..., 5, None, None]
        out = fn(cur, anc, l1, l2, g1, g2)
        inputs = [t for t in (cur, anc, l1, l2, gamma) if t is not None and t.requires_grad]
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        # l1 is unused once the anchor is removed: its gradient is zero on both sides
        return out, torch.autograd.grad(out, inputs, upstream, allow_unused=True, materialize_grads=True)

    fast, fast_grads = run(modulated_mix)
    ref, ref_grads = run(_mix_by_autograd)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-12)
    for a, b in zip(fast_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    inputs = (cur, anc, l1, l2, gamma)
    assert torch.autograd.gradcheck(
        lambda c, a, x1, x2, gm: modulated_mix(
            c, a, x1, x2, *((gm[..., 4, None, None], gm[..., 5, None, None]) if gm is not None else (None, None))
        ),
        inputs,
    )


def _outputs_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("preset", ["exo-dynamic-e-tiny", "exo-h-tiny", "exo-s-tiny"])
def test_anchor_table_lookup_matches_direct_projection(preset):
    """With more tokens than vocabulary rows the anchor is projected per vocabulary row and gathered;
    logits and every gradient must equal the per-token projection's."""
    torch.manual_seed(0)
    m = micro_model_cfg(preset, n_kv_heads=2 if "exo-h" in preset else 0)
    model = build_model(m).double()
    randomize_mixing(model)
    ids = torch.randint(0, m.vocab_size, (4, 80))
    assert ids.numel() > m.vocab_size
    rows = []
    hook = model.anchor.proj.register_forward_hook(lambda mod, inp, out: rows.append(inp[0].shape[:-1]))
    table_out, table_grads = _outputs_and_grads(model, ids)
    with direct_anchor_projection(model):
        direct_out, direct_grads = _outputs_and_grads(model, ids)
    hook.remove()
    assert rows == [torch.Size([m.vocab_size]), torch.Size([4, 80])]  # each path really ran
    torch.testing.assert_close(table_out, direct_out, rtol=0, atol=1e-12)
    assert table_grads.keys() == direct_grads.keys()
    for name in table_grads:
        torch.testing.assert_close(table_grads[name], direct_grads[name], rtol=0, atol=1e-12, msg=name)


# ----------------------------------------------------------------------------- caching
@pytest.mark.parametrize("preset", ALL_ROWS)
def test_cached_decoding_matches_full_forward(preset):
    torch.manual_seed(1)
    model = build_model(micro_model_cfg(preset)).eval()
    randomize_mixing(model)
    # 6 x 50 prefill tokens > 259 vocabulary rows: the prefill gathers ExoFormer anchors from the
    # vocabulary table, the one-token decode steps project them directly
    ids = torch.randint(0, 259, (6, 56))
    full = model(ids).logits
    cache = model.new_cache()
    steps = [model(ids[:, :50], cache=cache).logits]
    for t in range(50, 56):
        steps.append(model(ids[:, t : t + 1], cache=cache).logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_future_tokens_do_not_leak():
    model = build_model(micro_model_cfg("exo-dynamic-e-tiny")).eval()
    randomize_mixing(model)
    ids = torch.randint(0, 259, (1, 10))
    a = model(ids).logits
    ids2 = ids.clone()
    ids2[0, 6] = (ids2[0, 6] + 1) % 259
    b = model(ids2).logits
    assert torch.equal(a[:, :6], b[:, :6]) and not torch.allclose(a[:, 6:], b[:, 6:])


# ----------------------------------------------------------------------------- optimizer wiring
def _muon_params(cfg: RunConfig, model):
    from nexus.optim.param_groups import build_optimizer

    opt = build_optimizer(model, cfg.train)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)] for g in opt.optimizers["muon"].param_groups for p in g["params"]}, opt


def test_muon_gets_q_k_v_g_as_separate_matrices_and_anchor_blocks():
    from nexus.optim.optimizers import Muon, orthogonalize

    cfg = get_preset("exo-dynamic-e-tiny")
    cfg.model = micro_model_cfg("exo-dynamic-e-tiny")
    model = build_model(cfg.model)
    muon, opt = _muon_params(cfg, model)
    for i in range(cfg.model.n_layers):
        for proj in ("q_proj", "k_proj", "v_proj", "g_proj"):
            assert f"layers.{i}.attn.{proj}.weight" in muon
    assert "anchor.proj.weight" in muon
    assert not any("coef" in n for n in muon)  # lambdas are AdamW parameters
    w = model.anchor.proj.weight
    assert Muon.blocks_of(w) == 4
    grad = torch.randn_like(w)
    group = opt.optimizers["muon"].param_groups[0]
    direction = opt.optimizers["muon"].direction(w, grad, group)
    blocks = torch.cat([orthogonalize(b, group["ns_steps"], group["ns_method"]) for b in grad.chunk(4)])
    torch.testing.assert_close(direction, blocks)
    assert not torch.allclose(direction, orthogonalize(grad, group["ns_steps"], group["ns_method"]), atol=1e-3)


def test_muon_splits_unequal_anchor_blocks_with_gqa():
    from nexus.optim.optimizers import orthogonalize

    cfg = get_preset("exo-h-tiny")
    cfg.model = micro_model_cfg("exo-h-tiny", n_kv_heads=2)
    model = build_model(cfg.model)
    _, opt = _muon_params(cfg, model)
    w = model.anchor.proj.weight
    sizes = model.anchor.sizes
    assert sizes == [64, 32, 32, 64]
    group = opt.optimizers["muon"].param_groups[0]
    grad = torch.randn_like(w)
    d = opt.optimizers["muon"].direction(w, grad, group)
    for got, piece in zip(d.split(sizes), grad.split(sizes)):
        scale = max(1.0, piece.shape[0] / piece.shape[1]) ** 0.5
        torch.testing.assert_close(got, orthogonalize(piece, group["ns_steps"], group["ns_method"]) * scale)


# ----------------------------------------------------------------------------- presets and recipe
def test_every_table2_row_has_tiny_and_450m_presets_with_the_recipe():
    assert len(ALL_ROWS) == 18
    for stem, *_ in TABLE2_ROWS:
        for scale in ("tiny", "450m"):
            cfg = get_preset(f"{stem}-{scale}").validate()
            m, t = cfg.model, cfg.train
            assert m.zero_init_out and m.zero_init_head and not m.tie_embeddings and m.qk_norm
            assert m.z_loss == 1e-5
            assert t.optimizer.kind == "muon" and t.optimizer.lr == 0.01 and t.optimizer.weight_decay == 0.1
            assert t.optimizer.ns_method == "polar_express" and t.cautious_wd
            assert t.lr == 3e-3 and t.weight_decay == 0.0
            assert t.schedule == "linear_warmdown" and t.decay_fraction == 0.2
    assert get_preset("gated-450m").model.n_layers == 29 and get_preset("base-transformer-450m").model.n_layers == 32
    one_b = get_preset("exo-dynamic-e-1b")
    assert one_b.model.d_model == 1536 and one_b.train.optimizer.lr == 0.003 and one_b.train.lr == 0.001
    for name in ("gated-1b", "exo-dynamic-e-1b"):  # Table 4 keeps Table 3's 16 heads: 16 of 96 at d 1536
        m = get_preset(name).model
        assert (m.n_heads, m.hd, m.n_layers) == (16, 96, 32), name


def test_paper_parameter_counts_at_450m_and_1b():
    from nexus.models.accounting import param_count_for_config

    def total(name):
        return param_count_for_config(get_preset(name).model)["total"] / 1e6

    # Table 1 / 3 / 4: 454M without gate, 453M with gate, 457M external anchor; 1.01B and 1.02B
    assert round(total("base-transformer-450m")) in (453, 454, 455)
    assert round(total("gated-450m")) in (452, 453, 454)
    assert round(total("exo-e-450m")) in (456, 457, 458)
    assert abs(total("gated-1b") - 1010) < 10 and abs(total("exo-dynamic-e-1b") - 1020) < 10


def test_z_loss_counted_once():
    m = micro_model_cfg("exo-e-tiny")
    model = build_model(m)
    ids = torch.randint(0, 259, (2, 8))
    out = model(ids, labels=ids)
    lse = torch.logsumexp(out.logits.float(), -1)
    torch.testing.assert_close(out.loss, out.ce_loss + m.z_loss * lse.pow(2).mean())


def test_cautious_weight_decay_only_where_update_and_weight_agree():
    from nexus.optim.optimizers import _apply_update

    p = torch.tensor([1.0, 1.0, -1.0, -1.0])
    upd = torch.tensor([0.5, -0.5, 0.5, -0.5])
    q = p.clone()
    _apply_update(q, upd, 0.1, 0.1, cautious=True)
    decayed = torch.tensor([True, False, False, True])  # sign(update) == sign(p)
    expect = p - 0.1 * upd - 0.1 * 0.1 * p * decayed
    torch.testing.assert_close(q, expect)


def test_linear_warmdown_schedule():
    from nexus.optim.schedule import lr_factor

    t = get_preset("exo-e-tiny").train
    f = [lr_factor(s, t) for s in range(t.steps)]
    assert f[t.warmup_steps - 1] == 1.0 and f[0] < f[1]
    start = t.steps - int(round(0.2 * t.steps))
    assert all(x == 1.0 for x in f[t.warmup_steps : start])
    diffs = [f[s] - f[s + 1] for s in range(start, t.steps - 1)]
    assert max(diffs) - min(diffs) < 1e-9 and f[-1] == pytest.approx(0.0)


# ----------------------------------------------------------------------------- training
def _micro_run(preset: str, tmp_path, steps: int = 30) -> tuple[float, float]:
    from nexus.train.trainer import Trainer

    cfg = get_preset(preset)
    cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers, cfg.model.max_seq_len = 64, 2, 2, 64
    cfg.data.seq_len = 64
    t = cfg.train
    t.steps, t.batch_size, t.warmup_steps, t.eval_batches, t.eval_every = steps, 8, 5, 2, 0
    t.out_dir, t.optimizer.lr = str(tmp_path / preset), 0.02
    tr = Trainer(cfg, quiet=True)
    before = tr.evaluate()
    for s in range(steps):
        tr.train_step(s)
    return before, tr.evaluate()


@pytest.mark.parametrize("preset", ALL_ROWS)
def test_each_variant_trains(preset, tmp_path):
    torch.manual_seed(0)
    before, after = _micro_run(preset, tmp_path)
    assert after < before - 0.5, (before, after)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("components", ["q", "x"], "model.mixing.components"),
        ("granularity", "rowwise", "model.mixing.granularity"),
        ("norm", "sometimes", "model.mixing.norm"),
    ],
)
def test_bad_mixing_values_are_config_errors(field, value, needle):
    cfg = get_preset("exo-e-tiny")
    setattr(cfg.model.mixing, field, value)
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        cfg.validate()


def test_dynamic_without_anchor_and_g_without_gate_and_recurrent_arch_fail():
    cfg = get_preset("gated-tiny")
    cfg.model.mixing.dynamic = True
    with pytest.raises(ConfigError, match=r"model\.mixing\.dynamic"):
        cfg.validate()
    cfg = get_preset("exo-e-tiny")
    cfg.model.attention.gate = "none"
    with pytest.raises(ConfigError, match=r"attention\.gate"):
        cfg.validate()
    cfg = get_preset("exo-e-tiny")
    cfg.model.arch = "recurrent"
    with pytest.raises(ConfigError, match=r"model\.arch"):
        cfg.validate()
    cfg = get_preset("resformer-tiny")
    cfg.model.mixing.components = ["q", "v"]
    with pytest.raises(ConfigError, match=r"value_residual"):
        cfg.validate()


@pytest.mark.parametrize(
    "override",
    [
        ["--model.mixing.granularity", "rowwise"],
        ["--model.mixing.components", "q,z"],
        ["--model.mixing.dynamic", "true"],
    ],
)
def test_cli_bad_mixing_input_exits_2_with_one_line(override, capsys):
    from nexus.cli import main

    preset = "gated-tiny" if "dynamic" in override[0] else "exo-e-tiny"
    rc = main(["train", "--preset", preset, "--quiet", *override])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "model.mixing" in err
