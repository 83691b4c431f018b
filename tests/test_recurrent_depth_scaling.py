"""Test-time depth scaling of the recurrent model: `depth_scaled` blocks nest, and `generate` hands every
sampling argument to the shared sampler at the depth it was asked for."""

import torch

from nexus.config import ModelConfig
from nexus.models import build_model
from nexus.models.generate import generate as sample
from nexus.models.recurrent import RecurrentOptions


def make():
    torch.manual_seed(0)
    cfg = ModelConfig(
        arch=RecurrentOptions(n_sup=2, t_inner=3), vocab_size=50, d_model=16, n_layers=1, n_heads=1, ffn_hidden=32
    )
    return build_model(cfg).eval()


def test_depth_scaled_blocks_nest_and_restore_the_enclosing_depth():
    model = make()
    with model.depth_scaled(n_sup=4) as outer:
        assert outer is model
        assert model.depth() == (4, 3)
        with model.depth_scaled(t_inner=5):
            assert model.depth() == (4, 5)  # the inner block leaves the outer n_sup alone
        assert model.depth() == (4, 3)
        with model.depth_scaled():
            assert model.depth() == (4, 3)
        assert model.depth() == (4, 3)
    with model.depth_scaled(t_inner=5):
        with model.depth_scaled(n_sup=4):
            assert model.depth() == (4, 5)  # and the outer t_inner alone
        assert model.depth() == (2, 5)
    assert model.depth() == (2, 3)


def test_generate_inside_a_depth_block_runs_at_that_depth():
    """A bug before: generate()'s own block set (None, None), so it ran the configured depth."""
    model = make()
    x = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(1))
    calls = []
    model.layers[0].register_forward_hook(lambda *_: calls.append(1))

    def applications(**depth):  # of the layer stack: (prefill + decode steps) x n_sup x t_inner
        calls.clear()
        model.generate(x, max_new_tokens=2, temperature=0, **depth)
        return len(calls)

    assert applications(n_sup=4) == 2 * 4 * 3 and applications() == 2 * 2 * 3
    with model.depth_scaled(n_sup=4):
        assert applications() == 2 * 4 * 3
        assert model.depth() == (4, 3)


def test_generate_hands_every_sampling_argument_to_the_sampler():
    model = make()
    x = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(1))
    args = dict(max_new_tokens=6, temperature=0.7, top_k=7, top_p=0.8)
    with model.depth_scaled(n_sup=3, t_inner=2):
        free = sample(model, x, **args, generator=torch.Generator().manual_seed(5))
    eos = int(free[0, x.shape[1] + 1])  # the second sampled token: generation stops after it
    with model.depth_scaled(n_sup=3, t_inner=2):
        want = sample(model, x, **args, eos_id=eos, generator=torch.Generator().manual_seed(5))
    assert want.shape[1] < free.shape[1]
    got = model.generate(x, **args, eos_id=eos, generator=torch.Generator().manual_seed(5), n_sup=3, t_inner=2)
    assert torch.equal(got, want)
    assert model.depth() == (2, 3)


def test_generate_defaults_are_the_samplers():
    model = make()
    x = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(9)
    want = sample(model, x)
    torch.manual_seed(9)
    got = model.generate(x)
    assert torch.equal(got, want)
