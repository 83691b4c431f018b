"""Preallocated decode caches (issue 17): attention KV, higher-order inner levels, recurrent conv rings.

Each cached decode is held to the uncached full forward, and the storage is shown to be written in
place (the buffer a layer holds keeps its address from the first to the last decoded token)."""

import pytest
import torch

from nexus.config import AttentionOptions, ModelConfig
from nexus.models import build_model
from nexus.models.cache import KVCache, LayerCache, SeqBuffer, append_history
from nexus.models.generate import generate
from nexus.models.recurrent import ConvHistory, RecurrentOptions


def test_seq_buffer_equals_concatenation_and_reuses_storage():
    chunks = [torch.randn(2, 3, n, 4) for n in (5, 1, 1, 3, 1)]
    cache = LayerCache(capacity=11)
    ptrs = set()
    for i, c in enumerate(chunks):
        got = append_history(cache, "k", c)
        assert torch.equal(got, torch.cat(chunks[: i + 1], dim=2))
        ptrs.add(cache["k"].data.data_ptr())
    assert len(ptrs) == 1  # allocated once at the capacity


def test_seq_buffer_without_capacity_doubles_and_keeps_the_prefix():
    buf = SeqBuffer(dim=1)
    seen = []
    for t in range(9):
        x = torch.full((1, 1, 2), float(t))
        seen.append(x)
        assert torch.equal(buf.append(x), torch.cat(seen, dim=1))
    assert buf.data.shape[1] == 16  # 1, 2, 4, 8, 16: amortized, not one copy per token


def test_seq_buffer_rejects_a_different_batch():
    buf = SeqBuffer()
    buf.append(torch.zeros(2, 1, 3, 4))
    with pytest.raises(RuntimeError, match="one batch"):
        buf.append(torch.zeros(3, 1, 1, 4))


def _transformer(order=1, form="projected", shared=True):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=50, max_seq_len=64, qk_norm=True)
    if order > 1:
        cfg.attention = AttentionOptions.make(
            "higher_order", order=order, ho_form=form, ho_shared=shared, ho_targets="qk"
        )
    return build_model(cfg).eval()


def _recurrent():
    torch.manual_seed(0)
    cfg = ModelConfig(
        arch=RecurrentOptions(n_sup=2, t_inner=2, conv_kernel=4),
        vocab_size=50,
        d_model=16,
        n_layers=2,
        n_heads=1,
        ffn_hidden=32,
    )
    return build_model(cfg).eval()


def _buffers(cache: KVCache) -> dict:
    """Address of every preallocated buffer in the cache, by a path of keys."""
    out = {}

    def walk(d, path):
        for k, v in d.items():
            if isinstance(v, SeqBuffer):
                out[path + (k,)] = v.data.data_ptr()
            elif isinstance(v, ConvHistory):
                out[path + (k,)] = v.buf.data_ptr()
            elif isinstance(v, dict):
                walk(v, path + (k,))

    for i, layer in enumerate(cache.layers):
        walk(layer, (i,))
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda: _transformer(1),
        lambda: _transformer(2),
        lambda: _transformer(3, form="self"),
        lambda: _transformer(2, shared=False),
        _recurrent,
    ],
    ids=["order1", "order2", "order3-self", "order2-unshared", "recurrent"],
)
def test_cached_chunks_equal_full_forward_and_write_in_place(make):
    model = make()
    x = torch.randint(0, 50, (2, 14), generator=torch.Generator().manual_seed(1))
    cache = model.new_cache()
    for layer in cache.layers:
        layer.capacity = 14
    with torch.no_grad():
        full = model(x).logits
        parts = [model(x[:, :5], cache=cache).logits]
        first = _buffers(cache)
        # single tokens, then a multi-token chunk after single tokens, then single tokens again
        for lo, hi in ((5, 6), (6, 7), (7, 10), (10, 11), (11, 12), (12, 13), (13, 14)):
            parts.append(model(x[:, lo:hi], cache=cache).logits)
    assert first and _buffers(cache) == first  # every history was preallocated and written in place
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 3])
def test_generate_with_cache_equals_uncached_greedy(batch):
    model = _transformer(2)
    prompt = torch.randint(0, 50, (batch, 4), generator=torch.Generator().manual_seed(2))
    assert torch.equal(
        generate(model, prompt, 12, temperature=0), generate(model, prompt, 12, temperature=0, use_cache=False)
    )


def _plain(**overrides):
    """A plain Transformer++ exercising every branch of the one-token decoder: GQA, QK-norm, q/k/v
    bias, an untied head with a logit scale."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=50,
        max_seq_len=64,
        qk_norm=True,
        attention_bias=True,
        tie_embeddings=False,
        logit_scale=0.5,
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    model = build_model(cfg).eval()
    with torch.no_grad():  # nonzero biases and norm gains, so a dropped term would show
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize(
    "overrides",
    [{}, {"qk_norm": False, "attention_bias": False, "tie_embeddings": True, "logit_scale": 1.0, "n_kv_heads": 4}],
    ids=["all-branches", "plain"],
)
def test_plain_decoder_steps_equal_the_module_forward(overrides):
    model = _plain(**overrides)
    x = torch.randint(0, 50, (3, 14), generator=torch.Generator().manual_seed(1))
    cache = model.new_cache()
    for layer in cache.layers:
        layer.capacity = 12  # the last two tokens go past it: the decoder grows the history like the module path
    with torch.no_grad():
        full = model(x).logits
        parts = [model(x[:, :5], cache=cache).logits]
        step = model.fast_decoder(cache)
        assert step is not None  # this model takes the fast path
        parts += [step(x[:, t : t + 1])[:, None] for t in range(5, 14)]
    assert cache.pos == 14 and all(layer["k"].length == 14 for layer in cache.layers)
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 3])
def test_generate_with_the_plain_decoder_equals_uncached_greedy(batch):
    model = _plain()
    prompt = torch.randint(0, 50, (batch, 4), generator=torch.Generator().manual_seed(2))
    assert torch.equal(
        generate(model, prompt, 20, temperature=0), generate(model, prompt, 20, temperature=0, use_cache=False)
    )


def test_plain_decoder_declines_models_it_does_not_reproduce():
    def prefilled(model):
        cache = model.new_cache()
        with torch.no_grad():
            model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
        return cache

    model = _plain()
    assert model.fast_decoder(prefilled(model)) is not None
    assert _transformer(2).fast_decoder(prefilled(_transformer(2))) is None  # higher-order attention
    gated = _plain(qk_norm=False)
    gated.cfg.attention.gate = "headwise"
    gated = build_model(gated.cfg).eval()
    assert gated.fast_decoder(prefilled(gated)) is None  # output gate
    handle = model.layers[1].attn.hook_qk.register_forward_hook(lambda *a: None)
    assert model.fast_decoder(prefilled(model)) is None  # an analysis hook must see every step
    handle.remove()
    with torch.nn.modules.module.register_module_forward_hook(lambda *a: None):
        assert model.fast_decoder(prefilled(model)) is None


def test_generate_keeps_calling_forward_hooks_every_step():
    model = _plain()
    seen = []
    model.layers[0].attn.hook_qk.register_forward_hook(lambda mod, args, out: seen.append(out[0].shape[2]))
    generate(model, torch.zeros(1, 3, dtype=torch.long), 5, temperature=0)
    assert seen == [3, 1, 1, 1, 1]  # the prefill, then one call per decoded token
