"""The one-token PlainDecoder's edges: every condition under which it must decline (training mode, an
embedding max_norm, a global forward pre-hook, a subclassed norm, a cache it did not prefill or whose
position disagrees with its buffers), its refusals (more than one token, past max_seq_len), QK-norm with
the model's own epsilon, and a preallocated capacity smaller than the head size."""

import pytest
import torch
from test_decode_cache import _plain

from nexus.models.cache import SeqBuffer
from nexus.models.decode import PlainDecoder
from nexus.models.layers import RMSNorm
from nexus.models.transformer import Block


def prefilled(model, T=3):
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, T, dtype=torch.long), cache=cache)
    return cache


def test_declines_what_it_does_not_reproduce():
    model = _plain()
    assert model.fast_decoder(prefilled(model)) is not None  # the control: this model is accepted
    cache = prefilled(model)
    model.train()
    assert model.fast_decoder(cache) is None  # training mode
    model.eval()
    model.embed.max_norm = 1.0
    assert model.fast_decoder(prefilled(model)) is None
    model.embed.max_norm = None
    with torch.nn.modules.module.register_module_forward_pre_hook(lambda *a: None):
        assert model.fast_decoder(prefilled(model)) is None


@pytest.mark.parametrize("where", ["attn_norm", "q_norm"])
def test_declines_a_subclassed_norm(where):
    class OtherNorm(RMSNorm):
        pass

    model = _plain()
    block = model.layers[1]
    owner = block if where == "attn_norm" else block.attn
    old = getattr(owner, where)
    setattr(owner, where, OtherNorm(old.weight.shape[0], old.eps))
    assert model.fast_decoder(prefilled(model)) is None


def test_declines_caches_it_cannot_continue():
    model = _plain()
    assert PlainDecoder.build(model, {}, Block) is None  # no per-layer list
    short = prefilled(model)
    short.layers = short.layers[:1]
    assert model.fast_decoder(short) is None  # fewer layers than the model
    moved = prefilled(model)
    moved.pos += 1
    assert model.fast_decoder(moved) is None  # position disagrees with the histories
    fresh = model.new_cache()
    assert model.fast_decoder(fresh) is None  # no prefill: no histories at all
    for layer in fresh.layers:
        layer["k"], layer["v"] = SeqBuffer(), SeqBuffer()
    assert model.fast_decoder(fresh) is None  # histories never written


def test_refuses_more_than_one_token_and_positions_past_max_seq_len():
    model = _plain()
    step = model.fast_decoder(prefilled(model))
    with pytest.raises(RuntimeError, match="one token"):
        step(torch.zeros(1, 2, dtype=torch.long))
    full = prefilled(model, T=model.cfg.max_seq_len)
    step = model.fast_decoder(full)
    with pytest.raises(RuntimeError, match=f"position {model.cfg.max_seq_len}"):
        step(torch.zeros(1, 1, dtype=torch.long))


def test_qk_norm_uses_the_model_epsilon_and_capacity_below_head_size_grows():
    """norm_eps 0.5 is of the order of the per-head mean square, so using any other epsilon shows; a
    capacity of 4 positions (head size 8) makes the decoder grow the history like the module path."""
    model = _plain(norm_eps=0.5)
    x = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache()
    for layer in cache.layers:
        layer.capacity = 4
    with torch.no_grad():
        full = model(x).logits
        parts = [model(x[:, :3], cache=cache).logits]
        step = model.fast_decoder(cache)
        parts += [step(x[:, t : t + 1])[:, None] for t in range(3, 9)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5 * float(full.abs().max()))
