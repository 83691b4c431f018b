"""NEXUS v4.1 RecurrentLM: the recurrence, deep supervision with a one-step gradient, causality,
cached decoding, test-time depth scaling, presets and the v4.1-style Python API."""

import pytest
import torch
from tolerance_guard import atol_for

from nexus.config import ConfigError, ModelConfig
from nexus.models import build_model
from nexus.models.recurrent import NexusConfig, NexusModel, RecurrentBlock, RecurrentLM, RecurrentOptions
from nexus.models.reference.recurrent_reference import ref_deep_supervision_loss, ref_logits


def make(n_sup=2, t_inner=3, d=16, ffn=32, layers=2, seed=0, **rec):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        arch=RecurrentOptions(n_sup=n_sup, t_inner=t_inner, **rec),
        vocab_size=50,
        d_model=d,
        n_layers=layers,
        n_heads=1,
        ffn_hidden=ffn,
    )
    return build_model(cfg)


def ids(T=9, B=2, seed=1):
    return torch.randint(0, 50, (B, T), generator=torch.Generator().manual_seed(seed))


def test_build_model_selects_recurrent():
    assert isinstance(make(), RecurrentLM)


@pytest.mark.parametrize("rec", [{}, {"act_quant": True}, {"ternary": False}, {"subln": False}])
def test_inference_matches_slow_reference(rec):
    model = make(**rec).eval()
    x = ids()
    with torch.no_grad():
        fast = model(x).logits
        slow = ref_logits(model, x, 2, 3)
    assert torch.allclose(fast, slow, atol=1e-4, rtol=1e-4)


def test_raising_t_inner_at_inference_runs_the_deeper_recurrence():
    model = make(n_sup=2, t_inner=2).eval()
    x = ids()
    with torch.no_grad():
        base = model(x).logits
        deeper = model(x, t_inner=5).logits
        assert torch.allclose(deeper, ref_logits(model, x, 2, 5), atol=1e-4, rtol=1e-4)
        assert not torch.allclose(deeper, base, atol=1e-3)
        # the same through the config (what `--set arch.t_inner=5` at load does) and generate()
        model.cfg.arch.t_inner = 5
        assert torch.equal(model(x).logits, deeper)
        model.cfg.arch.t_inner = 2
        with model.depth_scaled(n_sup=3):
            assert torch.allclose(model(x).logits, ref_logits(model, x, 3, 2), atol=1e-4, rtol=1e-4)
    assert model.effective_depth() == 2 * 2 * 2


@pytest.mark.parametrize("field", ["t_inner", "n_sup"])
@pytest.mark.parametrize("bad", [0, -1])
def test_depth_below_one_is_rejected_not_replaced_by_the_config(field, bad):
    """0 is a value, not "unset": it must raise, not silently run the configured depth."""
    model = make().eval()
    with pytest.raises(ConfigError, match=f"{field}={bad}"):
        model(ids(), **{field: bad})
    with pytest.raises(ConfigError, match=f"{field}={bad}"):
        model.generate(ids(T=3, B=1), max_new_tokens=2, temperature=0, **{field: bad})
    with pytest.raises(ConfigError, match=f"{field}={bad}"):
        with model.depth_scaled(**{field: bad}):
            pass
    assert model.depth() == (2, 3)  # None still means the configured depth
    errors = []
    ModelConfig(arch=RecurrentOptions(**{field: bad})).validate(errors)
    assert errors and f"model.arch.{field}={bad}" in errors[0]


def test_deep_supervision_loss_and_gradients_match_v41_listing():
    model = make(n_sup=3, t_inner=3).train()
    x, y = ids(), ids(seed=7)
    out = model(x, labels=y)
    out.loss.backward()
    fast = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    ref = ref_deep_supervision_loss(model, x, y, 3, 3)
    ref.backward()
    assert torch.allclose(out.loss, ref, atol=1e-4)
    for n, p in model.named_parameters():  # some gradients are ~4e-4 (norm gains): atol scaled per tensor
        torch.testing.assert_close(fast[n], p.grad, atol=atol_for(p.grad, 1e-3), rtol=1e-3, msg=n)
    # ce_loss is the final supervision step's CE, the quantity validation reports
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x, labels=y).loss, out.ce_loss, atol=1e-5)


def test_only_last_iteration_of_each_supervision_step_carries_gradient():
    model = make(n_sup=3, t_inner=4, layers=1).train()
    pattern = []
    model.layers[0].register_forward_hook(lambda m, i, o: pattern.append(o.requires_grad))
    model(ids(), labels=ids(seed=3)).loss.backward()
    assert pattern == ([False] * 3 + [True]) * 3
    # the control (full backprop) records a graph everywhere, so the hook can tell the difference
    ctrl = make(n_sup=3, t_inner=4, layers=1, full_backprop=True).train()
    seen = []
    ctrl.layers[0].register_forward_hook(lambda m, i, o: seen.append(o.requires_grad))
    ctrl(ids(), labels=ids(seed=3))
    assert seen == [True] * 12


@pytest.mark.parametrize("n_sup", [2, 3])
def test_state_is_detached_between_supervision_steps(n_sup):
    """At T_inner = 1 there is no no-grad iteration to cut the graph, so only the detach between
    supervision steps keeps step s's loss from flowing back into step s-1's iteration. Gradients must
    equal the v4.1 script's listing (which detaches) and differ from backprop through every step."""
    x, y = ids(), ids(seed=5)
    model = make(n_sup=n_sup, t_inner=1).train()
    out = model(x, labels=y)
    fast = torch.autograd.grad(out.loss, list(model.parameters()))
    ref = torch.autograd.grad(ref_deep_supervision_loss(model, x, y, n_sup, 1), list(model.parameters()))
    assert torch.allclose(out.loss, ref_deep_supervision_loss(model, x, y, n_sup, 1).detach(), atol=1e-5)
    names = [n for n, _ in model.named_parameters()]
    for name, g, r in zip(names, fast, ref):  # some gradients are ~4e-4 (norm gains): atol scaled per tensor
        torch.testing.assert_close(g, r, atol=atol_for(r, 1e-3), rtol=1e-3, msg=name)
    # the setting is sensitive: without the detach (the full-backprop control) the gradients change
    undetached = make(n_sup=n_sup, t_inner=1, full_backprop=True).train()
    undetached.load_state_dict(model.state_dict())
    g_full = torch.autograd.grad(undetached(x, labels=y).loss, [undetached.embed.weight])[0]
    assert not torch.allclose(g_full, fast[names.index("embed.weight")], atol=1e-4)


@pytest.mark.parametrize("train_mode", [False, True])
def test_no_future_leakage(train_mode):
    model = make(n_sup=2, t_inner=3, conv_kernel=4).train(train_mode)
    x = ids(T=12, B=1)
    for t in (0, 5, 10):
        x2 = x.clone()
        x2[0, t + 1] = (x2[0, t + 1] + 1) % 50
        with torch.no_grad():
            a, b = model(x).logits, model(x2).logits
        assert torch.equal(a[0, : t + 1], b[0, : t + 1])
        assert not torch.allclose(a[0, t + 1 :], b[0, t + 1 :])  # the change is visible from t+1 on


def test_cached_decoding_matches_full_forward():
    model = make(n_sup=2, t_inner=3, conv_kernel=3).eval()
    x = ids(T=10)
    cache = model.new_cache()
    with torch.no_grad():
        full = model(x).logits
        parts = [model(x[:, :4], cache=cache).logits]
        parts += [model(x[:, i : i + 1], cache=cache).logits for i in range(4, 10)]
    assert cache.pos == 10
    assert len(cache.layer(0)) == 2 * 3  # one conv history per (supervision step, iteration) per layer
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-5)


def test_generate_greedy_equals_uncached_argmax_and_depth_override():
    model = make().eval()
    prompt = ids(T=4, B=1)
    out = model.generate(prompt, max_new_tokens=5, temperature=0)
    seq = prompt
    for _ in range(5):
        seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
    deep = model.generate(prompt, max_new_tokens=5, temperature=0, t_inner=6)
    seq = prompt
    for _ in range(5):
        seq = torch.cat([seq, model(seq, t_inner=6).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(deep, seq)
    assert model.depth() == (2, 3)  # the override does not outlive the call


def test_training_memory_does_not_keep_no_grad_iterations():
    """Saved activations of the backward graph do not grow with T_inner (the O(1) promise)."""

    def saved_bytes(t_inner):
        model = make(n_sup=2, t_inner=t_inner, d=32, ffn=64).train()
        total = [0]

        def pack(t):
            total[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(ids(T=16), labels=ids(T=16, seed=2))
        return total[0]

    assert saved_bytes(12) == saved_bytes(2)


def test_flops_account_for_every_application():
    model = make(n_sup=2, t_inner=3)
    per_app = sum(
        2 * m.in_features * m.out_features for l in model.layers for m in l.modules() if isinstance(m, torch.nn.Linear)
    )
    per_app += sum(m.flops_per_token(8) for l in model.layers for m in l.modules() if hasattr(m, "flops_per_token"))
    head = 2 * 16 * 50  # tied head: d_model x vocab
    assert model.flops_per_token(8) == pytest.approx((2 * 3 - 1) * per_app + head)
    from nexus.analysis.flops import forward_flops_per_token

    # the walker counts each child once; together with the model's own term: every application once
    assert forward_flops_per_token(model, 8) == pytest.approx(2 * 3 * per_app + head)


def test_presets_match_the_v41_table():
    from nexus.models.accounting import param_count_for_config
    from nexus.presets import get_preset

    table = {
        "nexus-tiny": (10e6, 4, 4, 32),
        "nexus-small": (40e6, 4, 6, 48),
        "nexus-base": (100e6, 6, 8, 144),
        "nexus-medium": (200e6, 8, 10, 240),
    }
    for name, (params, n_sup, t_inner, depth) in table.items():
        cfg = get_preset(name)
        rc = cfg.model.arch
        assert (rc.n_sup, rc.t_inner) == (n_sup, t_inner), name
        assert cfg.model.n_layers * rc.t_inner * rc.n_sup == depth, name
        info = param_count_for_config(cfg.model)
        assert abs(info["total"] - params) / params < 0.05, (name, info["total"])
        # a conventional SwiGLU ratio (8/3, up to rounding), not a giant FFN standing in for width
        assert 8 / 3 <= cfg.model.ffn_hidden / cfg.model.d_model < 2.75, (name, cfg.model.ffn_hidden)
        # the table's ternary size (params x 1.6 bits) needs nearly every parameter to be ternary
        assert info["embedding"] / info["total"] < 0.03, name
        t = cfg.train
        assert (t.lr, t.optimizer.betas, t.weight_decay, t.grad_clip, t.schedule) == (
            3e-4,
            [0.9, 0.95],
            0.01,
            1.0,
            "cosine",
        )


def test_nexus_config_and_model_api():
    cfg = NexusConfig.from_dict(
        {"vocab_size": 50, "d_model": 16, "n_layers": 2, "ffn_hidden": 32, "n_sup": 2, "T_inner": 2}
    )
    torch.manual_seed(0)
    model = NexusModel(cfg)
    assert model.depth() == (2, 2)
    sd = model.state_dict()
    cfg.T_inner = 4  # the v4.1 script's test-time scaling recipe: change the config, rebuild, load weights
    deeper = NexusModel(cfg)
    deeper.load_state_dict(sd)
    assert deeper.depth() == (2, 4)
    x = ids()
    with torch.no_grad():
        assert torch.allclose(deeper(x).logits, model(x, t_inner=4).logits, atol=1e-6)
    out = model.generate(
        ids(T=3, B=1), max_new_tokens=4, temperature=0.8, top_p=0.9, generator=torch.Generator().manual_seed(0)
    )
    assert out.shape == (1, 7)
    with pytest.raises(ConfigError, match="bogus"):
        NexusConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="t_inner"):
        NexusModel(NexusConfig(T_inner=0))


def test_block_is_conv_then_swiglu_with_residuals():
    block = make().layers[0]
    assert isinstance(block, RecurrentBlock)
    assert block.conv.conv.groups == block.conv.conv.in_channels  # depthwise
    assert block.conv.kernel_size == 4
