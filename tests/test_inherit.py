"""The routine every growth family builds on (nexus/growth/inherit.py), checked against its contract:
same-shape parameters copied whole, grown ones holding the old tensor in their leading corner with the
grower filling the rest, buffers copied by name, the new model on the old one's dtype, a seeded own
initialization that leaves the global RNG alone, new-entry blocks that tile the grown tensor, and the
scale and draws of random new entries."""

import pytest
import torch

from nexus.config import ModelConfig
from nexus.growth.inherit import build_initialized, fill_normal, inherit, matched_std, region_blocks
from nexus.models import build_model


def _cfg(ffn=48, **kw) -> ModelConfig:
    return ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=ffn, vocab_size=64, **kw)


@pytest.mark.parametrize("old,new", [((3, 4), (5, 6)), ((3, 4), (3, 6)), ((2,), (5,)), ((2, 3, 4), (4, 3, 5))])
def test_region_blocks_tile_the_new_entries_exactly_once(old, new):
    blocks = region_blocks(old, new)
    cover = torch.zeros(new, dtype=torch.int64)
    for tags, sl in blocks:
        assert any(t == "new" for t in tags)
        for d, (t, s) in enumerate(zip(tags, sl)):  # each tag names the side of its dim the slice covers
            assert (s.start, s.stop) == ((0, old[d]) if t == "old" else (old[d], new[d]))
        cover[sl] += 1
    corner = tuple(slice(0, o) for o in old)
    assert not cover[corner].any()  # the old corner is no block
    cover[corner] = 1
    assert bool((cover == 1).all())  # every entry once: the blocks and the corner tile the tensor
    grown = sum(n > o for o, n in zip(old, new))
    assert len(blocks) == 2**grown - 1


def test_region_blocks_of_an_unchanged_shape_are_none():
    assert region_blocks((3, 4), (3, 4)) == []


def test_inherit_copies_same_shapes_puts_old_in_the_corner_and_lets_the_grower_fill_the_rest():
    torch.manual_seed(0)
    old = build_model(_cfg(48)).double()
    with torch.no_grad():
        old.rope.cos.mul_(2.0)  # a buffer that differs from a fresh model's: it must be copied, not rebuilt
    filled = {}

    def fill_new(name, p, o):
        filled[name] = tuple(o.shape)
        corner = tuple(slice(0, s) for s in o.shape)
        assert torch.equal(p[corner], o)  # the old tensor is already in place when the grower runs
        mask = torch.ones_like(p, dtype=torch.bool)
        mask[corner] = False
        p[mask] = 7.0
        return None

    new, maps, old_shapes = inherit(old, _cfg(80), fill_new)
    grown = {
        "layers.0.mlp.gate_proj.weight": (48, 32),
        "layers.0.mlp.up_proj.weight": (48, 32),
        "layers.0.mlp.down_proj.weight": (32, 48),
    }
    assert filled == grown and old_shapes == {n: list(s) for n, s in grown.items()}
    olds = dict(old.named_parameters())
    for name, p in new.named_parameters():
        assert p.dtype == torch.float64
        o = olds[name]
        if name in grown:
            corner = tuple(slice(0, s) for s in o.shape)
            assert torch.equal(p[corner], o) and bool((p.sum() - o.sum()) == 7.0 * (p.numel() - o.numel()))
            assert maps[name].old_name == name and maps[name].old_slices == corner
        else:
            assert torch.equal(p, o) and maps[name].old_name == name and maps[name].old_slices is None
    for name, b in new.named_buffers():
        assert torch.equal(b, dict(old.named_buffers())[name])


def test_a_growers_own_param_map_is_kept():
    from nexus.growth import ParamMap

    old = build_model(_cfg(48))
    custom = {}

    def fill_new(name, p, o):
        p.zero_()
        custom[name] = ParamMap(old_name=name, old_slices=(slice(0, 1),), copy_source={0: torch.tensor([0])})
        return custom[name]

    _, maps, _ = inherit(old, _cfg(64), fill_new)
    assert custom and all(maps[n] is pm for n, pm in custom.items())


def test_init_seed_gives_new_parameters_their_own_seeded_init_and_leaves_the_global_rng():
    torch.manual_seed(0)
    old = build_model(_cfg(48, tie_embeddings=True))
    cfg = _cfg(48, tie_embeddings=False)  # the untied head is a parameter the old model lacks
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a, maps, _ = inherit(old, cfg, init_seed=5)
    assert torch.equal(torch.rand(3), expected_next)  # the global RNG did not move
    b = build_initialized(old, cfg, 5)
    torch.manual_seed(5)
    ref = build_model(cfg)  # the seed's own initialization, drawn as a fresh model would
    assert torch.equal(a.lm_head.weight, ref.lm_head.weight) and torch.equal(b.lm_head.weight, ref.lm_head.weight)
    assert maps["lm_head.weight"].old_name is None
    assert torch.equal(a.embed.weight, old.embed.weight)  # inherited parameters are still the old ones
    c = build_initialized(old.double(), cfg, 5)
    assert c.lm_head.weight.dtype == torch.float64


def test_matched_std_is_the_std_of_an_evenly_strided_subsample_with_a_fallback():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(40, 50, generator=g) * 0.3
    assert matched_std(w) == pytest.approx(float(w.std()), rel=1e-6)
    big = torch.cat([torch.randn(1000, generator=g) * 0.1, torch.randn(1000, generator=g) * 5.0])
    flat = big.reshape(-1)
    assert matched_std(big, max_samples=100) == pytest.approx(float(flat[::20].std()), rel=1e-6)  # 2000 // 100
    assert matched_std(big, max_samples=100) != pytest.approx(float(flat[:100].std()), rel=0.1)  # spread, not a prefix
    assert matched_std(torch.full((4, 4), 0.5)) == 0.02  # zero spread: a fresh init's scale
    assert matched_std(torch.tensor([3.0])) == 0.02
    assert matched_std(torch.tensor([1.0, 3.0])) == pytest.approx(2**0.5, rel=1e-6)  # two entries have a spread


def test_fill_normal_draws_only_into_its_block_from_the_generator_at_the_asked_scale():
    t = torch.zeros(200, 300)
    fill_normal(t[:, 100:], 0.5, torch.Generator().manual_seed(3))
    assert not t[:, :100].any()
    assert float(t[:, 100:].std()) == pytest.approx(0.5, rel=0.03) and abs(float(t[:, 100:].mean())) < 0.01
    torch.manual_seed(99)  # a different global RNG state: the draw must not depend on it
    again = torch.zeros(200, 300)
    fill_normal(again[:, 100:], 0.5, torch.Generator().manual_seed(3))
    assert torch.equal(again, t)  # the draw is the generator's alone
    # and the same values an off-CPU block gets (drawn on the CPU in the block's shape, then copied),
    # whatever the block's strides: a grown model's random entries do not depend on the device
    ref = torch.empty(200, 200).normal_(0.0, 0.5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(t[:, 100:], ref)
    whole = torch.zeros(200, 200)
    fill_normal(whole, 0.5, torch.Generator().manual_seed(3))
    assert torch.equal(whole, ref)


@pytest.mark.parametrize("fill", [None, lambda name, p, o: None])
def test_every_new_entry_has_a_source(fill):
    """Growth that changes a shape with no grower to fill it, or that leaves a parameter with no source
    (no init_seed), is refused instead of leaving uninitialized memory in the model."""
    old = build_model(_cfg(48, tie_embeddings=True))
    with pytest.raises(RuntimeError):
        inherit(old, _cfg(48, tie_embeddings=False), fill)
    if fill is None:
        with pytest.raises(RuntimeError):
            inherit(old, _cfg(64), None)


@pytest.mark.parametrize("init_seed", [None, 3])
def test_an_old_parameter_with_no_place_in_the_grown_model_is_refused_by_name(init_seed):
    """Growth never drops a trained tensor silently: an untied head has no place in a tied model."""
    old = build_model(_cfg(48, tie_embeddings=False))
    with pytest.raises(RuntimeError, match="no place for the old parameter 'lm_head.weight'"):
        inherit(old, _cfg(48, tie_embeddings=True), lambda name, p, o: None, init_seed=init_seed)


def test_a_shrunk_dimension_is_refused_naming_both_shapes():
    """Width growth only grows: a smaller FFN cannot hold the old one's trained rows, whatever the grower."""
    old = build_model(_cfg(64))
    with pytest.raises(RuntimeError, match=r"gate_proj.weight: cannot embed shape \(64, 32\) in \(48, 32\)"):
        inherit(old, _cfg(48), lambda name, p, o: None)


def test_a_buffer_the_old_model_cannot_provide_is_refused_by_name():
    """Buffers are copied by name; one whose shape the growth changes (the rotary tables of a longer
    context) cannot be derived from the old model, and the grower must rebuild it."""
    old = build_model(_cfg(48, max_seq_len=64))
    with pytest.raises(RuntimeError, match="cannot derive buffer 'rope"):
        inherit(old, _cfg(48, max_seq_len=128), lambda name, p, o: None)


def test_fill_normal_draws_in_the_blocks_own_dtype():
    """A float64 model's new entries are float64 draws, not float32 draws widened."""
    t = torch.zeros(30, 40, dtype=torch.float64)
    fill_normal(t[:, 10:], 0.5, torch.Generator().manual_seed(8))
    ref = torch.empty(30, 30, dtype=torch.float64).normal_(0.0, 0.5, generator=torch.Generator().manual_seed(8))
    assert torch.equal(t[:, 10:], ref)


def test_a_model_built_with_its_own_init_goes_to_the_old_models_device_and_dtype():
    """A meta-device old model (shapes, no data) shows where the new one is put: the new model is drawn on the
    CPU under the seed, then moved to the old model's device and floating dtype."""
    with torch.device("meta"):
        old = build_model(_cfg()).double()
    new = build_initialized(old, _cfg(ffn=64), seed=0)
    assert {(p.device.type, p.dtype) for p in new.parameters()} == {("meta", torch.float64)}


def test_fill_normal_advances_its_generator_alike_on_every_device():
    """A block on another device (meta here: shapes, no data) takes its draw from the CPU generator like a CPU
    block, so the entries drawn after it do not depend on where it lives."""
    g_cpu, g_meta = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    fill_normal(torch.empty(3, 4), 0.1, g_cpu)
    fill_normal(torch.empty(3, 4, device="meta"), 0.1, g_meta)
    assert torch.equal(g_cpu.get_state(), g_meta.get_state())
