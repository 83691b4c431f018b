"""SPARKLING width growth's per-axis plan and spec parsing against their definitions (growth/width.py's
docstring and the paper's section 3.2): which old channel each new one copies, the fan-in factor per
column under each preservation mode and split, the tied head's factor, the zero-sum perturbation, the
grown config, the growth record, and the RHO,TAU pairs of the re-warmup options."""

import math
import statistics

import pytest
import torch

from nexus.config import ModelConfig, RunConfig
from nexus.growth import grow
from nexus.growth.width import WidthSpec, _zero_sum_perturbation, both_copy_alpha, grow_tensor, parse_pair, plan_axis
from nexus.models import build_model


def spec(**kw) -> WidthSpec:
    return WidthSpec(**{"ffn": 1, **kw}).validate()


def groups(old: int, new: int) -> torch.Tensor:
    """Copy-group size of each new index: new channel i copies old channel i mod n."""
    src = torch.arange(new) % old
    return torch.bincount(src, minlength=old).double()[src]


@pytest.mark.parametrize("old,new", [(4, 6), (4, 8), (4, 13)])
def test_copy_plan_and_fan_in_factors_per_preservation_mode(old, new):
    gen = torch.Generator().manual_seed(0)
    m = groups(old, new)
    rms = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="rms"), gen)
    assert torch.equal(rms.src, torch.arange(new) % old) and (rms.old, rms.new, rms.grows) == (old, new, True)
    # rms, both sides copied: every column times alpha (eq. 16-17); an even split cancels the group size
    torch.testing.assert_close(rms.col_scale, torch.full((new,), both_copy_alpha(old, new)), atol=0, rtol=1e-6)
    assert rms.tied_scale == pytest.approx(both_copy_alpha(old, new), rel=1e-12)
    # exact: each copy group splits its fan-in weight evenly (net2net), 1/m per column
    exact = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="exact"), gen)
    torch.testing.assert_close(exact.col_scale, (1 / m).float(), atol=0, rtol=1e-6)
    assert exact.tied_scale == pytest.approx(1 / float(m.max()), rel=1e-12)
    none = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="none"), gen)
    assert torch.equal(none.col_scale, torch.ones(new)) and none.tied_scale == 1.0


@pytest.mark.parametrize(
    "init,preserve,axis,factor,tied",
    [
        ("random,random", "rms", "ffn", "sqrt", "sqrt"),
        ("copy,random", "rms", "ffn", "sqrt", "alpha"),
        ("zero,random", "exact", "hidden", "sqrt", "sqrt"),
        ("zero,random", "exact", "ffn", 1.0, "sqrt"),
        ("random,zero", "exact", "ffn", 1.0, "sqrt"),
        ("random,random", "none", "ffn", 1.0, 1.0),
        ("copy,zero", "exact", "hidden", 1.0, "group"),
    ],
)
def test_one_side_or_no_copy_fan_in_factor(init, preserve, axis, factor, tied):
    """Not both sides copied: rms takes sqrt(n/n') on every column; exact takes it only on the hidden
    axis with a zero fan-out (to undo RMSNorm's rescaling), else 1; none takes 1. The tied head's factor
    follows the fan-out side: copy -> as both copied, else sqrt(n/n') unless none."""
    old, new = 32, 48
    plan = plan_axis(axis, old, new, spec(init=init, preserve=preserve), torch.Generator().manual_seed(0))
    want = math.sqrt(old / new) if factor == "sqrt" else factor
    torch.testing.assert_close(plan.col_scale, torch.full((new,), want), atol=0, rtol=1e-6)
    tied_want = {"sqrt": math.sqrt(old / new), "alpha": both_copy_alpha(old, new), "group": 1 / 2}.get(tied, tied)
    assert plan.tied_scale == pytest.approx(tied_want, rel=1e-12)


def test_uneven_splits_keep_each_groups_fan_in_weight_whole():
    """Appendix H: `1:2` gives the source column 1/3 and its copy 2/3; `random` gives the source r in
    [0.1, 0.5] and its copies (1 - r) shared; under exact each group's factors sum to 1 (the function
    is kept), and channels without a copy keep 1."""
    old, new = 4, 7  # groups: channels 0-2 copied once, channel 3 alone
    src = torch.arange(new) % old
    gen = torch.Generator().manual_seed(3)
    p12 = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="exact", split="1:2"), gen)
    torch.testing.assert_close(
        p12.col_scale, torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0, 2 / 3, 2 / 3, 2 / 3]), atol=0, rtol=1e-6
    )
    pr = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="exact", split="random"), gen)
    r = pr.col_scale[:3]
    assert bool(((r >= 0.1) & (r <= 0.5)).all()) and len(set(r.tolist())) == 3  # one draw per group
    sums = torch.zeros(old, dtype=torch.float64).index_add_(0, src, pr.col_scale.double())
    torch.testing.assert_close(sums, torch.ones(old, dtype=torch.float64), atol=0, rtol=1e-6)
    rms = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="rms", split="1:2"), gen)
    m = groups(old, new)
    torch.testing.assert_close(
        rms.col_scale, (both_copy_alpha(old, new) * m * p12.col_scale.double()).float(), atol=0, rtol=1e-6
    )


def test_zero_sum_perturbation_cancels_within_every_copy_group():
    old, new = 3, 8
    plan = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="exact"), torch.Generator().manual_seed(0))
    t = torch.randn(5, new)
    eps = _zero_sum_perturbation(t, 1, plan, 0.5, torch.Generator().manual_seed(1))
    sums = torch.zeros(5, old).index_add_(1, plan.src, eps)
    torch.testing.assert_close(sums, torch.zeros(5, old), atol=1e-6, rtol=0)
    assert float(eps.abs().max()) > 0.1  # a real perturbation, at the asked scale
    assert float(eps[:, old:].std()) == pytest.approx(0.5, rel=0.5)


@pytest.mark.parametrize(
    "value,want",
    [
        ("1.3,250", {"rho": 1.3, "tau": 250}),
        ([2, 10.0], {"rho": 2.0, "tau": 10}),
        ("2,7.9", {"rho": 2.0, "tau": 7}),
        ({"rho": 1.5}, {"rho": 1.5, "tau": 250}),
        ({"tau": 3}, {"rho": 1.3, "tau": 3}),
        (True, {"rho": 1.3, "tau": 250}),
        ("0.5,0", {"rho": 0.5, "tau": 0}),
        (None, None),
        (False, None),
        ("", None),
        ("none", None),
    ],
)
def test_rewarmup_pairs(value, want):
    got = parse_pair(value, "--rewarmup")
    assert got == want and (got is None or (type(got["rho"]), type(got["tau"])) == (float, int))


def test_spec_normalizes_init_and_rewarmup_all():
    s = spec(init="random")
    assert s.init == "random,random" and (s.init_out, s.init_in) == ("random", "random")
    s = spec(init=["zero", "copy"])
    assert (s.init_out, s.init_in) == ("zero", "copy")
    s = spec(rewarmup_all="2,5")
    assert s.rewarmup == {"rho": 2.0, "tau": 5} and s.rewarmup_all is True
    s = spec(rewarmup="2,5", rewarmup_all=True)  # the normalized form of --rewarmup-all beside its pair
    assert s.rewarmup == {"rho": 2.0, "tau": 5} and s.rewarmup_all is True
    s = spec(rewarmup="2,5")
    assert s.rewarmup == {"rho": 2.0, "tau": 5} and s.rewarmup_all is False
    assert spec().rewarmup is None and spec().rewarmup_all is False


def _tiny(tie=True):
    return RunConfig(
        model=ModelConfig(
            d_model=32,
            n_layers=1,
            n_heads=2,
            ffn_hidden=48,
            vocab_size=64,
            tie_embeddings=tie,
            norm_eps=1e-5,
            logit_scale=0.8,
        )
    )


def test_grown_config_and_record_follow_the_plan():
    torch.manual_seed(0)
    cfg = _tiny()
    model = build_model(cfg.model)
    _, new_run, _, res = grow(
        model, cfg, {"family": "width", "hidden": 48, "ffn": 80, "init": "zero,random", "preserve": "exact", "seed": 4}
    )
    m = new_run.model
    assert (m.d_model, m.ffn_hidden, m.head_dim, m.n_heads) == (48, 80, 16, 2)
    assert m.norm_eps == pytest.approx(1e-5 * 32 / 48, rel=1e-12)  # eps shrinks with mean(x^2) (zero channels)
    assert m.logit_scale == pytest.approx(0.8 * math.sqrt(32 / 48), rel=1e-12)  # tied head: the factor moves here
    rec = res.record
    assert rec["axes"] == {"hidden": [32, 48], "ffn": [48, 80]} and rec["init"] == ["zero", "random"]
    assert (rec["preserve"], rec["split"], rec["perturb"], rec["seed"]) == ("exact", "even", 0.0, 4)
    assert rec["fan_in_scale"] == {"hidden": pytest.approx(math.sqrt(32 / 48), abs=1e-6), "ffn": 1.0}
    assert "zeroes the up side only" in res.report["note"]
    _, rms_run, _, _ = grow(model, cfg, {"family": "width", "hidden": 48, "init": "zero,random", "preserve": "rms"})
    assert rms_run.model.norm_eps == 1e-5  # only exact rescales eps
    _, untied, _, _ = grow(
        build_model(_tiny(tie=False).model), _tiny(tie=False), {"family": "width", "hidden": 48, "init": "zero,random"}
    )
    assert untied.model.logit_scale == 0.8  # an untied head takes the factor in its own columns


def test_random_new_entries_take_the_trained_weights_scale_and_the_growth_seed():
    """Random fan-in columns are drawn at the std of the matrix's own (trained) entries, not the init std,
    times the rms factor; and the draws (perturbation included) come from the growth seed alone."""
    torch.manual_seed(0)
    cfg = _tiny()
    model = build_model(cfg.model)
    with torch.no_grad():
        model.layers[0].mlp.down_proj.weight.mul_(10.0)  # far from the init std 0.02
    old_std = float(model.layers[0].mlp.down_proj.weight.std())
    new, *_ = grow(model, cfg, {"family": "width", "ffn": 96, "init": "copy,random", "preserve": "rms"})
    w = new.layers[0].mlp.down_proj.weight.detach()
    assert float(w[:, 48:].std()) == pytest.approx(old_std * math.sqrt(48 / 96), rel=0.15)
    s = {"family": "width", "ffn": 64, "init": "copy,copy", "preserve": "exact", "perturb": 0.5, "seed": 9}
    torch.manual_seed(1)
    a, *_ = grow(model, cfg, s)
    torch.manual_seed(2)  # another global RNG state: the same grown model
    b, *_ = grow(model, cfg, s)
    c, *_ = grow(model, cfg, {**s, "seed": 10})
    wa, wb, wc = (m.layers[0].mlp.down_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_random_entries_of_a_matrix_without_spread_use_the_init_std_and_the_growth_seed():
    """A matrix with no spread (zero-initialized) gives no scale to copy: new random entries are drawn
    at the model's init std. They come from the growth seed, not the global RNG."""
    torch.manual_seed(0)
    cfg = _tiny()
    model = build_model(cfg.model)
    with torch.no_grad():
        model.layers[0].mlp.down_proj.weight.zero_()
    s = {"family": "width", "ffn": 96, "init": "copy,random", "preserve": "none"}
    torch.manual_seed(1)
    a, *_ = grow(model, cfg, s)
    torch.manual_seed(2)
    b, *_ = grow(model, cfg, s)
    wa, wb = a.layers[0].mlp.down_proj.weight.detach(), b.layers[0].mlp.down_proj.weight.detach()
    assert torch.equal(wa, wb)
    assert float(wa[:, 48:].std()) == pytest.approx(cfg.model.init_std, rel=0.15)


@pytest.mark.parametrize("init", ["random,copy", "random,zero"])
def test_exact_hidden_growth_without_a_zero_or_copied_fan_out_is_refused(init):
    """On the hidden axis exact preservation needs a zero fan-out, or a copied one with a copied or zero
    fan-in (SPARKLING 3.2): random new channels change what RMSNorm sees, at any width."""
    from nexus.config import ConfigError

    cfg = _tiny()
    with pytest.raises(ConfigError, match=f"--preserve exact with --init {init}"):  # the refused pair named
        grow(build_model(cfg.model), cfg, {"family": "width", "hidden": 64, "init": init, "preserve": "exact"})


def test_hidden_growth_with_random_sides_depends_on_the_growth_seed_only():
    """Random columns and the gains sampled for new channels (a non-copy fan-out) come from the growth
    seed: two growths under different global RNG states give the same model, another seed another."""
    torch.manual_seed(0)
    cfg = _tiny()
    model = build_model(cfg.model)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)  # gains that differ, so a sampled gain shows its draw
    s = {"family": "width", "hidden": 48, "init": "random,random", "seed": 3}
    torch.manual_seed(1)
    a, *_ = grow(model, cfg, s)
    torch.manual_seed(2)
    b, *_ = grow(model, cfg, s)
    c, *_ = grow(model, cfg, {**s, "seed": 4})
    assert all(torch.equal(pa, pb) for pa, pb in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.norm.weight, c.norm.weight)
    assert set(a.norm.weight[32:].tolist()) <= set(model.norm.weight.tolist())  # new gains are old gains


@pytest.mark.parametrize("old_vals", [[3.0], [1.0, 4.0]])
def test_random_growth_of_a_one_or_two_entry_tensor_takes_its_spread_or_the_init_std(old_vals):
    """The trained scale of a tensor is the std of its entries; two entries have one, a single entry has
    none (no spread to copy), so its new random entries are drawn at the init std."""
    n, n_add, init_std = len(old_vals), 4000, 0.05
    ws = spec(init="random,random", preserve="none")
    gen = torch.Generator().manual_seed(0)
    plan = plan_axis("ffn", n, n + n_add, ws, gen)
    old = torch.tensor(old_vals)
    t, copy_source, fan_in = grow_tensor(old, {0: ("ffn", "out")}, {"ffn": plan}, ws, gen, init_std)
    assert torch.equal(t[:n], old) and t.shape == (n + n_add,) and not copy_source and not fan_in
    want = statistics.stdev(old_vals) if n > 1 else init_std
    assert float(t[n:].std()) == pytest.approx(want, rel=0.1)  # 4000 draws: the std's error is ~1%
    assert abs(float(t[n:].mean())) < 0.1 * want  # zero-mean draws


def test_sampled_gains_draw_from_every_old_gain():
    """A gain over a grown axis with a non-copy fan-out is sampled uniformly from the old gains (the
    first channel included), never drawn at random or rescaled."""
    old = torch.tensor([0.5, 1.5])
    ws = spec(init="random,random", preserve="rms")
    gen = torch.Generator().manual_seed(0)
    plan = plan_axis("hidden", 2, 402, ws, gen)
    t, _, fan_in = grow_tensor(old, {0: ("hidden", "gain")}, {"hidden": plan}, ws, gen, 0.02)
    assert torch.equal(t[:2], old) and not fan_in
    new = t[2:].tolist()
    assert set(new) == {0.5, 1.5}
    assert 150 < new.count(0.5) < 250  # uniform over 2 gains: 200 +- 10 (binomial sd)


def test_random_entries_of_a_float64_tensor_are_the_seeded_draw_scaled_in_float64():
    """The standard-normal draw is float32 (the same seed gives the same draw for every dtype); the scale is
    applied in the tensor's own precision, so a float64 tensor keeps float64 products."""
    ws = spec(init="random,random", preserve="none")
    old = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    plan = plan_axis("ffn", 4, 7, ws, torch.Generator().manual_seed(0))
    t, _, _ = grow_tensor(old, {1: ("ffn", "out")}, {"ffn": plan}, ws, torch.Generator().manual_seed(5), 0.02)
    draw = torch.randn((3, 3), generator=torch.Generator().manual_seed(5), dtype=torch.float32)
    assert t.dtype == torch.float64 and torch.equal(t[:, :4], old)
    assert torch.equal(t[:, 4:], draw.double() * float(old.float().std()))


def test_zero_sum_perturbation_of_a_float64_tensor_cancels_to_float64_rounding():
    old, new = 3, 8
    plan = plan_axis("ffn", old, new, spec(init="copy,copy", preserve="exact"), torch.Generator().manual_seed(0))
    t = torch.randn(5, new, dtype=torch.float64)
    eps = _zero_sum_perturbation(t, 1, plan, 0.5, torch.Generator().manual_seed(1))
    sums = torch.zeros(5, old, dtype=torch.float64).index_add_(1, plan.src, eps)
    assert eps.dtype == torch.float64 and float(sums.abs().max()) < 1e-14 and float(eps.abs().max()) > 0.1


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"hidden": True}, "width.hidden=True"),
        ({"ffn": 64.5}, "width.ffn=64.5"),
        ({"expert_inner": -3}, "width.expert_inner=-3"),
        ({"init": "copy,copy,copy"}, "--init='copy,copy,copy'"),
        ({"init": "copy,bogus"}, "--init='copy,bogus'"),
        ({"init": "random,random", "split": "1:2"}, "--split/--perturb with --init=random,random"),
        ({"init": "copy,random", "perturb": 0.1}, "--split/--perturb with --init=copy,random"),
        ({"rewarmup": "fast", "rewarmup_all": True}, "--rewarmup-all='fast'"),
        ({"rewarmup_all": "fast"}, "--rewarmup-all='fast'"),
        ({"rewarmup": "fast"}, "--rewarmup='fast'"),
    ],
)
def test_bad_width_spec_fields_are_refused_by_name(kw, match):
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        WidthSpec(**{"ffn": 1, **kw}).validate()


def test_rewarmup_all_alone_takes_the_papers_pair():
    s = WidthSpec(ffn=1, rewarmup_all=True).validate()
    assert s.rewarmup == {"rho": 1.3, "tau": 250} and s.rewarmup_all is True


@pytest.mark.parametrize("value", ["0,5", "1.3,-1", "-2,5"])
def test_rewarmup_pair_needs_a_positive_rho_and_a_non_negative_tau(value):
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match="RHO > 0 and TAU >= 0"):
        parse_pair(value, "--rewarmup")


def test_split_factors_are_the_float64_fractions_rounded_once():
    """1:2 gives the source 1/3 and its copy 2/3 exactly as float32 roundings of the fractions; a copy group of 3
    splits the copies' share (1 - r) evenly between them."""
    old, new = 4, 7
    p12 = plan_axis(
        "ffn", old, new, spec(init="copy,copy", preserve="exact", split="1:2"), torch.Generator().manual_seed(0)
    )
    want = torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0, 2 / 3, 2 / 3, 2 / 3], dtype=torch.float64).float()
    assert torch.equal(p12.col_scale, want)
    three = plan_axis(
        "ffn", 2, 6, spec(init="copy,copy", preserve="exact", split="1:2"), torch.Generator().manual_seed(0)
    )
    want3 = torch.tensor([1 / 3, 1 / 3] + [1 / 3] * 4, dtype=torch.float64)  # source 1/3, two copies (2/3) / 2 each
    torch.testing.assert_close(three.col_scale.double(), want3, atol=0, rtol=1e-7)


def test_random_split_ratios_are_uniform_in_0_1_to_0_5_from_the_growth_generator():
    """r = 0.1 + 0.4 U, U uniform in [0, 1) drawn in float64 from the growth generator (one per old channel), not
    the global RNG."""
    old, new = 4, 7
    torch.manual_seed(123)
    a = plan_axis(
        "ffn", old, new, spec(init="copy,copy", preserve="exact", split="random"), torch.Generator().manual_seed(3)
    )
    torch.manual_seed(321)
    b = plan_axis(
        "ffn", old, new, spec(init="copy,copy", preserve="exact", split="random"), torch.Generator().manual_seed(3)
    )
    assert torch.equal(a.col_scale, b.col_scale)
    r = 0.1 + 0.4 * torch.rand(old, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.testing.assert_close(a.col_scale[:3].double(), r[:3], atol=0, rtol=1e-7)


def test_a_target_at_the_current_size_beside_a_growing_axis_is_accepted_and_the_check_draws_nothing_global():
    """width.hidden equal to d_model with the FFN growing is no shrink; checking a spec (random split ratios
    included) leaves the global RNG where it was."""
    cfg = _tiny()
    torch.manual_seed(7)
    state = torch.get_rng_state()
    WidthSpec(hidden=32, ffn=64, split="random").validate().applies_to(cfg.model)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("init,role", [("random,zero", "in"), ("zero,random", "out"), ("random,random", "in")])
def test_a_bfloat16_tensor_grows_in_bfloat16(init, role):
    """New entries and the fan-in factor are made in the tensor's own dtype: a bf16 weight comes back bf16, its
    old entries times the factor rounded to bf16 (not an fp32 product rounded once), zero entries exactly 0."""
    ws = spec(init=init, preserve="rms")
    old = torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    plan = plan_axis("ffn", 4, 6, ws, torch.Generator().manual_seed(0))
    t, _, _ = grow_tensor(old, {1: ("ffn", role)}, {"ffn": plan}, ws, torch.Generator().manual_seed(2), 0.02)
    assert t.dtype == torch.bfloat16 and t.shape == (3, 6)
    factor = (
        torch.tensor(math.sqrt(4 / 6)).to(torch.bfloat16) if role == "in" else torch.tensor(1.0, dtype=torch.bfloat16)
    )
    assert torch.equal(t[:, :4], old * factor)
    if init.split(",")[0 if role == "out" else 1] == "zero":
        assert torch.equal(t[:, 4:], torch.zeros(3, 2, dtype=torch.bfloat16))


def test_random_draws_do_not_follow_torchs_default_dtype():
    """The draws are float32 whatever torch's default dtype: the same seed grows the same (float64) tensor
    after torch.set_default_dtype(torch.float64)."""
    old = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    plan = plan_axis("ffn", 4, 7, spec(init="copy,copy", preserve="exact"), torch.Generator().manual_seed(0))
    rnd = spec(init="random,random", preserve="none")

    def both():
        a = grow_tensor(old, {1: ("ffn", "out")}, {"ffn": plan}, rnd, torch.Generator().manual_seed(5), 0.02)[0]
        b = _zero_sum_perturbation(a, 1, plan, 0.5, torch.Generator().manual_seed(6))
        return a, b

    want = both()
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = both()
    finally:
        torch.set_default_dtype(prev)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_the_perturbation_is_drawn_at_its_std_relative_to_the_weights_std():
    """`perturb` is the std of the +-perturbation relative to the weight's std (the spec's help): noise drawn at
    perturb * std(W), then centred within each copy group of m columns so it cancels, has std
    perturb * std(W) * sqrt(1 - 1/m); here m = 2 and std(W) = 0.02: about 0.007 (not 0.5 / 0.02 = 25)."""
    torch.manual_seed(0)
    old = torch.randn(64, 32) * 0.02
    outs = {}
    for p in (0.0, 0.5):
        ws = spec(ffn=64, init="copy,copy", preserve="exact", perturb=p, seed=3)
        plan = plan_axis("ffn", 32, 64, ws, torch.Generator().manual_seed(3))
        outs[p], *_ = grow_tensor(old, {1: ("ffn", "in")}, {"ffn": plan}, ws, torch.Generator().manual_seed(4), 0.02)
    eps = (outs[0.5] - outs[0.0]).double()
    assert float(eps.std()) == pytest.approx(0.5 * float(old.std()) * math.sqrt(1 - 1 / 2), rel=0.1)


@pytest.mark.parametrize("init", ["copy,copy", "zero,copy", "copy,zero"])
def test_an_init_with_nothing_random_draws_nothing_from_the_growth_generator(init):
    """The growth seed drives random entries, sampled gains, random split ratios and perturbations (the spec's
    `seed`) and nothing else: a fan-in grown by copies or zeros without a perturbation leaves the generator where
    it was, so the tensors grown after it draw what the seed gives them. With a perturbation it does draw."""
    old = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    for perturb in (0.0, 0.5) if init == "copy,copy" else (0.0,):
        ws = spec(init=init, preserve="rms", perturb=perturb)
        plan = plan_axis("ffn", 4, 8, ws, torch.Generator().manual_seed(0))
        gen = torch.Generator().manual_seed(5)
        before = gen.get_state()
        grow_tensor(old, {1: ("ffn", "in")}, {"ffn": plan}, ws, gen, 0.02)
        assert torch.equal(gen.get_state(), before) == (perturb == 0.0), perturb


def test_the_perturbation_is_the_growth_seeds_draw_centred_within_each_copy_group():
    """Appendix H's +-perturbation of two duplicated halves, from its definition: noise drawn from the growth
    generator (float32, then the tensor's dtype) at perturb x std(W), centred within each copy group, added to
    the split columns. For a pair that is +d on one half and -d on the other, d = (e_i - e_copy) / 2."""
    old = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ws = spec(ffn=8, init="copy,copy", preserve="exact", perturb=0.5)
    plan = plan_axis("ffn", 4, 8, ws, torch.Generator().manual_seed(0))
    t, _, _ = grow_tensor(old, {1: ("ffn", "in")}, {"ffn": plan}, ws, torch.Generator().manual_seed(4), 0.02)
    e = torch.randn((3, 8), generator=torch.Generator().manual_seed(4), dtype=torch.float32).double()
    e = e * (0.5 * float(old.float().std()))
    d = (e[:, :4] - e[:, 4:]) / 2  # source half minus its copy half, halved: e minus the pair's mean
    want = torch.cat([old * 0.5 + d, old * 0.5 - d], dim=1)  # exact split: each half carries W / 2
    torch.testing.assert_close(t, want, atol=0, rtol=1e-12)
    assert float(d.abs().min()) > 1e-4  # every column really perturbed, so the sign is seen


def test_current_sizes_name_every_axis_with_zero_for_an_axis_the_mlp_lacks():
    """`current_sizes`: hidden, ffn and expert_inner always, 0 where the MLP kind has no such axis; the "nothing to
    grow" refusal shows them."""
    from nexus.config import ConfigError, MLPOptions

    dense = _tiny().model
    moe = ModelConfig(
        d_model=32,
        n_layers=1,
        n_heads=2,
        vocab_size=64,
        mlp=MLPOptions.make("moe", n_experts=4, top_k=2, expert_hidden=24),
    )
    assert spec().current_sizes(dense) == {"hidden": 32, "ffn": 48, "expert_inner": 0}
    assert spec().current_sizes(moe) == {"hidden": 32, "ffn": 0, "expert_inner": 24}
    with pytest.raises(ConfigError, match=r"current sizes \{'hidden': 32, 'ffn': 48, 'expert_inner': 0\}"):
        WidthSpec(ffn=48).validate().applies_to(dense)


RMS_KEYS = {"rms_ratio_per_layer", "rms_ratio_max_dev", "probe_loss_before", "probe_loss_after", "loss_jump"}


@pytest.mark.parametrize(
    "tie,ws,expected",
    [
        (
            True,
            dict(hidden=48, ffn=80, init="zero,random", preserve="exact", seed=4, rewarmup="2,5", rewarmup_all=True),
            {
                "grown": "hidden 32->48, ffn 48->80",
                "init (fan-out,fan-in)": "zero,random",
                "preserve": "exact",
                "fan-in factor": f"hidden: {math.sqrt(32 / 48):.4f}, ffn: 1.0000",
                "note": "zero fan-out on SwiGLU zeroes the up side only (gate drawn at random) so new units train",
                "logit_scale": pytest.approx(0.8 * math.sqrt(32 / 48), rel=1e-12),
                "rewarmup": "rho=2.0 tau=5 (all parameters)",
            },
        ),
        (
            False,
            dict(hidden=48, init="zero,random", preserve="exact", rewarmup="2,5"),  # no SwiGLU unit added: no note
            {
                "grown": "hidden 32->48",
                "init (fan-out,fan-in)": "zero,random",
                "preserve": "exact",
                "fan-in factor": f"hidden: {math.sqrt(32 / 48):.4f}",
                "rewarmup": "rho=2.0 tau=5",
            },
        ),
        (
            False,
            dict(ffn=80, init="copy,copy", preserve="none", rewarmup="1.3,250"),
            {
                "grown": "ffn 48->80",
                "init (fan-out,fan-in)": "copy,copy",
                "preserve": "none",
                "fan-in factor": "ffn: 1.0000",
                "rewarmup": "rho=1.3 tau=250",
            },
        ),
        (
            True,
            dict(
                ffn=80, init="copy,copy", preserve="none", rewarmup="1.3,250"
            ),  # tied, hidden not grown: no logit scale
            {
                "grown": "ffn 48->80",
                "init (fan-out,fan-in)": "copy,copy",
                "preserve": "none",
                "fan-in factor": "ffn: 1.0000",
                "rewarmup": "rho=1.3 tau=250",
            },
        ),
    ],
)
def test_the_printed_report_and_the_rewarmup_record_say_what_grew(tie, ws, expected):
    """Every line the grower prints (the SwiGLU note only for a zero fan-out that adds SwiGLU units, \
the logit scale only for a tied head
    whose hidden axis grows, the re-warmup pair and whether it drives every parameter) beside the RMS probe, and
    the re-warmup the record hands to the lr plan."""
    from nexus.growth.width import grow_width

    torch.manual_seed(0)
    cfg = _tiny(tie)
    res = grow_width(build_model(cfg.model), cfg, WidthSpec(**ws).validate())
    assert set(res.report) - set(expected) == RMS_KEYS
    assert {k: v for k, v in res.report.items() if k not in RMS_KEYS} == expected
    rho, tau = ws["rewarmup"].split(",")
    assert (res.record["rewarmup"], res.record["rewarmup_all"]) == (
        {"rho": float(rho), "tau": int(tau)},
        "rewarmup_all" in ws,
    )
    if "hidden" in ws:  # the record keeps the mean fan-in factor to 6 decimals
        assert res.record["fan_in_scale"]["hidden"] == round(math.sqrt(32 / 48), 6)


def test_a_random_split_comes_from_the_growth_seed_alone_and_a_target_at_its_size_is_not_grown():
    """SPARKLING's random split ratios r = 0.1 + 0.4U (Appendix H) are the growth seed's draw: another global
    seed gives the same grown model, another growth seed another. A target equal to the current size (hidden 32
    here) grows nothing: only the FFN axis is recorded and reported."""
    from nexus.growth.width import grow_width

    cfg = _tiny()
    model = build_model(cfg.model)
    ws = dict(hidden=32, ffn=80, init="copy,copy", split="random", seed=4)
    grown = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        grown.append(grow_width(model, cfg, WidthSpec(**ws).validate()))
    other = grow_width(model, cfg, WidthSpec(**{**ws, "seed": 5}).validate())
    a, b, c = (dict(r.model.named_parameters()) for r in (*grown, other))
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert not all(torch.equal(a[n], c[n]) for n in a)
    assert grown[0].record["axes"] == {"ffn": [48, 80]} and grown[0].report["grown"] == "ffn 48->80"
