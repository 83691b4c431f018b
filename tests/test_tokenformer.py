"""TokenFormer baseline: Pattention vs reference, token growth exact with the frozen sqrt(n) factor and
not without it, live default init, dead all-zero init, bad input."""

import pytest
import torch

from nexus.config import ConfigError, ModelConfig, ProjectionOptions, RunConfig
from nexus.growth import grow
from nexus.growth.verification import verify
from nexus.models import build_model
from nexus.models.pattention import Pattention, pattention_modules
from nexus.models.reference.nexus_rank_ref import pattention_ref


def tf_cfg(freeze=True, act="gelu_l2", targets=("q", "k", "v", "o", "ffn")) -> RunConfig:
    proj = ProjectionOptions.make(
        "pattention",
        targets=list(targets),
        param_tokens=12,
        ffn_param_tokens=20,
        freeze_scale=freeze,
        pattention_act=act,
    )
    cfg = RunConfig(model=ModelConfig(d_model=16, n_layers=1, n_heads=2, max_seq_len=32, projection=proj))
    cfg.data.seq_len = 16
    return cfg


def perturbed(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(
                torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
                * 0.3
                * (p.std() if p.numel() > 1 else 0.1)
            )
    return model


@pytest.mark.parametrize("act", ["gelu_l2", "softmax"])
def test_pattention_matches_reference(act):
    torch.manual_seed(0)
    mod = Pattention(8, 6, 10, act=act).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    ref = pattention_ref(x, mod.key_tokens, mod.value_tokens, act)
    torch.testing.assert_close(mod(x), ref, atol=1e-12, rtol=1e-10)


def test_model_builds_pattention_for_every_target():
    model = build_model(tf_cfg().model)
    mods = pattention_modules(model)
    assert set(mods) == {f"layers.0.attn.{t}_proj" for t in "qkvo"} | {"layers.0.mlp"}
    assert mods["layers.0.mlp"].n_tokens == 20 and mods["layers.0.attn.q_proj"].n_tokens == 12


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_token_growth_exact_with_frozen_scale_and_not_without(dtype, tol):
    x = torch.randint(0, 259, (2, 16))
    diffs = {}
    for freeze in (True, False):
        cfg = tf_cfg(freeze)
        torch.manual_seed(1)
        model = perturbed(build_model(cfg.model)).to(dtype)
        new_model, new_cfg, _, res = grow(model, cfg, {"family": "tokenformer", "add_tokens": 6, "add_ffn_tokens": 4})
        assert pattention_modules(new_model)["layers.0.attn.q_proj"].n_tokens == 18
        with torch.no_grad():
            diffs[freeze] = (model(x).logits - new_model(x).logits).abs().max().item()
        assert res.record["exact"] is freeze
        assert ("frozen" in res.report["scale factor"]) is freeze  # nexus reports which mode was used
        if freeze:
            assert new_cfg.model.growth_state == {"frozen_n": 12, "ffn_frozen_n": 20}
    assert diffs[True] <= tol
    assert diffs[False] > 1e-3


def test_frozen_scale_survives_a_second_growth():
    """Both families (attention and FFN parameter tokens) grow twice: each keeps tau = sqrt(its n before
    the *first* growth), so a rule that froze only one side, or re-froze at the second growth, fails."""
    cfg = tf_cfg(True)
    torch.manual_seed(2)
    model = perturbed(build_model(cfg.model)).double()
    ffn_n = cfg.model.projection.ffn_param_tokens
    spec = {"family": "tokenformer", "add_tokens": 4, "add_ffn_tokens": 3}
    m1, cfg1, _, _ = grow(model, cfg, spec)
    m2, cfg2, _, _ = grow(m1, cfg1, spec)
    gs = cfg2.model.growth_state
    assert gs["frozen_n"] == 12 and cfg2.model.projection.param_tokens == 20
    assert gs["ffn_frozen_n"] == ffn_n and cfg2.model.projection.ffn_param_tokens == ffn_n + 6
    x = torch.randint(0, 259, (1, 16))
    with torch.no_grad():
        assert (model(x).logits - m2(x).logits).abs().max().item() <= 1e-10


def test_softmax_variant_growth_is_reported_inexact():
    cfg = tf_cfg(True, "softmax")
    torch.manual_seed(3)
    model = perturbed(build_model(cfg.model))
    new_model, _, _, res = grow(model, cfg, {"family": "tokenformer", "add_tokens": 6})
    assert res.record["exact"] is False and "softmax" in res.report["note"]
    v = verify(model, new_model, res.param_maps, 259)
    assert v["max_abs_dlogits"] > 1e-4


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_default_token_growth_is_live_and_all_zero_is_dead(optimizer):
    cfg = tf_cfg(True)
    cfg.train.optimizer = optimizer
    torch.manual_seed(4)
    model = perturbed(build_model(cfg.model))
    live, _, _, res = grow(model, cfg, {"family": "tokenformer", "add_tokens": 6, "add_ffn_tokens": 4})
    v = verify(model, live, res.param_maps, 259, train_cfg=cfg.train)
    assert len(v["new_block_grad_norms"]) == 10 and v["dead_blocks"] == []
    dead, _, _, res0 = grow(model, cfg, {"family": "tokenformer", "add_tokens": 6, "add_ffn_tokens": 4, "init": "zero"})
    v0 = verify(model, dead, res0.param_maps, 259, train_cfg=cfg.train, n_steps=3)
    assert v0["max_abs_dlogits"] <= 1e-5
    assert sorted(v0["dead_blocks"]) == sorted(v0["new_block_grad_norms"])
    assert "warning" in res0.report


@pytest.mark.parametrize(
    "spec,match",
    [
        ({"add_tokens": 0}, "--add-tokens"),
        ({"add_ffn_tokens": -1}, "--add-ffn-tokens"),
        ({}, "needs --add-tokens"),
        ({"add_tokens": 2, "init": "copy"}, "--token-init"),
    ],
)
def test_bad_token_growth_specs(spec, match):
    cfg = tf_cfg()
    with pytest.raises(ConfigError, match=match):
        grow(build_model(cfg.model), cfg, {"family": "tokenformer", **spec})


def test_token_growth_needs_pattention():
    proj = ProjectionOptions.make("nexus_rank", rank_m=24, rank_a=32)
    cfg = RunConfig(model=ModelConfig(d_model=16, n_layers=1, n_heads=2, projection=proj))
    with pytest.raises(ConfigError, match="no Pattention"):
        grow(build_model(cfg.model), cfg, {"family": "tokenformer", "add_tokens": 4})
    cfg = tf_cfg(targets=("q", "k", "v", "o"))
    with pytest.raises(ConfigError, match="no FFN Pattention"):
        grow(build_model(cfg.model), cfg, {"family": "tokenformer", "add_ffn_tokens": 4})


def test_cli_token_growth_reports_scale_mode_and_reloads(tmp_path, capsys):
    from nexus.checkpoint import load_checkpoint, save_checkpoint
    from nexus.cli import main
    from nexus.data.tokenizer import ByteTokenizer

    cfg = tf_cfg(True)
    torch.manual_seed(5)
    model = perturbed(build_model(cfg.model))
    save_checkpoint(tmp_path / "src", model, cfg, ByteTokenizer())
    rc = main(["grow", "--checkpoint", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--add-tokens", "4"])
    out = capsys.readouterr().out
    assert rc == 0 and "scale factor: frozen" in out and "max |dlogits|" in out and "dead" not in out
    grown, gcfg, _ = load_checkpoint(tmp_path / "out")
    assert gcfg.model.projection.param_tokens == 16 and gcfg.model.growth_state["frozen_n"] == 12
    x = torch.randint(0, 259, (1, 16))
    with torch.no_grad():
        assert (grown(x).logits - model(x).logits).abs().max().item() <= 1e-5
    rc = main(["grow", "--checkpoint", str(tmp_path / "src"), "--out", str(tmp_path / "o2"), "--add-tokens", "-2"])
    assert rc == 2 and "--add-tokens=-2" in capsys.readouterr().err and not (tmp_path / "o2").exists()


@pytest.mark.parametrize(
    "spec,match",
    [
        ({"add_tokens": 0, "add_ffn_tokens": 2}, "--add-tokens=0"),
        ({"add_tokens": 2, "add_ffn_tokens": -1}, "--add-ffn-tokens=-1"),
    ],
)
def test_each_token_count_is_checked_even_beside_a_valid_one(spec, match):
    from nexus.growth.tokenformer_growth import TokenFormerSpec

    with pytest.raises(ConfigError, match=match):
        TokenFormerSpec(**spec).validate()


def test_token_init_defaults_to_exact_and_keeps_the_given_one():
    from nexus.growth.tokenformer_growth import TokenFormerSpec

    assert TokenFormerSpec(add_tokens=2, init=None).validate().init == "exact"
    assert TokenFormerSpec(add_tokens=2, init="").validate().init == "exact"
    assert TokenFormerSpec(add_tokens=2, init="zero").validate().init == "zero"


def test_each_token_count_needs_pattention_where_it_adds_tokens_and_only_there():
    """--add-tokens needs an attention Pattention, --add-ffn-tokens an FFN one; each alone is accepted where its
    own layers exist, whatever the other kind."""
    from nexus.growth.tokenformer_growth import TokenFormerSpec

    ffn_only, attn_only = tf_cfg(targets=("ffn",)).model, tf_cfg(targets=("q", "k", "v", "o")).model
    with pytest.raises(ConfigError, match="no attention Pattention"):
        TokenFormerSpec(add_tokens=2).validate().applies_to(ffn_only)
    TokenFormerSpec(add_ffn_tokens=2).validate().applies_to(ffn_only)
    TokenFormerSpec(add_tokens=2).validate().applies_to(attn_only)
    TokenFormerSpec(add_tokens=2).validate().applies_to(tf_cfg(targets=("q",)).model)


def _default_token_model(freeze=True, act="gelu_l2"):
    """Token counts left unset: TokenFormer's defaults, n = d_model for q/k/v/o and n = ffn for the FFN."""
    cfg = tf_cfg(freeze, act)
    cfg.model.projection.param_tokens = cfg.model.projection.ffn_param_tokens = (
        0  # 0: the documented "unset" (None is refused)
    )
    torch.manual_seed(5)
    return perturbed(build_model(cfg.model)), cfg


def _token_shapes(model, attn: bool, ffn: bool) -> dict:
    return {
        f"{name}.{t}": [mod.n_tokens, getattr(mod, t).shape[1]]
        for name, mod in pattention_modules(model).items()
        if (ffn if name.endswith("mlp") else attn)
        for t in ("key_tokens", "value_tokens")
    }


FROZEN = "frozen (tau = sqrt(n before growth))"
FOLLOWS = "follows n (tau = sqrt(new n))"


@pytest.mark.parametrize(
    "freeze,act,spec,exact,note,warning",
    [
        (True, "gelu_l2", {"add_tokens": 6}, True, None, None),
        (
            False,
            "gelu_l2",
            {"add_ffn_tokens": 4, "init": "zero"},
            False,
            "tau follows n (set model.projection.freeze_scale=true for exact growth)",
            "all-zero key and value tokens: every new token's gradient is zero forever (use --token-init exact)",
        ),
        (
            True,
            "softmax",
            {"add_tokens": 2, "add_ffn_tokens": 3},
            False,
            "softmax Pattention gives zero scores softmax mass",
            None,
        ),
        (True, "gelu_l2", {"add_tokens": 2, "init": "noise"}, False, "noise init", None),
        (
            True,
            "gelu_l2",
            {"add_tokens": 2, "init": "zero"},
            True,
            None,  # TokenFormer's own zero init: exact, dead
            "all-zero key and value tokens: every new token's gradient is zero forever (use --token-init exact)",
        ),
    ],
)
def test_token_growth_records_and_reports_what_grew(freeze, act, spec, exact, note, warning):
    """The growth_history record and the printed report, field by field: the old counts are TokenFormer's
    defaults (d_model tokens, ffn tokens), a side without added tokens keeps its count, exactness needs
    GELU-L2 with the frozen scale and a zero key init, and each inexact growth names its own reason."""
    from nexus.growth.tokenformer_growth import TokenFormerSpec, grow_tokenformer

    model, cfg = _default_token_model(freeze, act)
    d, ffn = cfg.model.d_model, cfg.model.ffn
    add, add_ffn = spec.get("add_tokens", 0), spec.get("add_ffn_tokens", 0)
    init = spec.get("init", "exact")
    res = grow_tokenformer(model, cfg, TokenFormerSpec(**spec).validate())
    assert res.record == {
        "old_tokens": d,
        "new_tokens": d + add,
        "old_ffn_tokens": ffn,
        "new_ffn_tokens": ffn + add_ffn,
        "init": init,
        "scale": "frozen" if freeze else "free",
        "exact": exact,
        "old_shapes": _token_shapes(model, bool(add), bool(add_ffn)),
    }
    expected = {
        "pattention layers": 5,
        "tokens": f"{d} -> {d + add}" if add else "unchanged",
        "ffn tokens": f"{ffn} -> {ffn + add_ffn}" if add_ffn else "unchanged",
        "init": init,
        "scale factor": FROZEN if freeze else FOLLOWS,
        "function preserved by construction": exact,
    }
    if note:
        expected["note"] = f"growth is not function-preserving: {note}"
    if warning:
        expected["warning"] = warning
    assert res.report == expected
    counts = {n: m.n_tokens for n, m in pattention_modules(res.model).items()}
    assert counts == {n: (ffn + add_ffn if n.endswith("mlp") else d + add) for n in counts}
    assert (cfg.model.projection.param_tokens, cfg.model.projection.ffn_param_tokens) == (
        0,
        0,
    )  # caller's config untouched


@pytest.mark.parametrize("init,key_scale,value_scale", [("exact", 0.0, 1.0), ("noise", 0.5, 0.5), ("zero", 0.0, 0.0)])
def test_new_tokens_are_drawn_at_the_trained_scale_from_the_growth_seed_alone(init, key_scale, value_scale):
    """New key/value tokens: zero (TokenFormer's zero init of new parameter tokens; nexus's exact init keeps the
    keys at zero) or N(0, (s * std of the trained tokens of the same matrix)^2) with s = 1 for exact's values
    and s = noise_frac for noise. The draw comes from --growth-seed alone: the global RNG does not change it."""
    from nexus.growth.tokenformer_growth import TokenFormerSpec, grow_tokenformer

    model, cfg = _default_token_model()
    spec = dict(add_tokens=200, init=init, noise_frac=0.5, seed=7)
    grown = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        grown.append(grow_tokenformer(model, cfg, TokenFormerSpec(**spec).validate()).model)
    other = grow_tokenformer(model, cfg, TokenFormerSpec(**{**spec, "seed": 8}).validate()).model
    old, new, new2, new3 = (dict(m.named_parameters()) for m in (model, *grown, other))
    for name in ("layers.0.attn.q_proj.key_tokens", "layers.0.attn.o_proj.value_tokens"):
        n_old = old[name].shape[0]
        fresh = new[name][n_old:].detach()
        scale = key_scale if name.endswith("key_tokens") else value_scale
        if scale == 0.0:
            assert torch.count_nonzero(fresh) == 0
            continue
        assert fresh.std().item() == pytest.approx(scale * old[name].std().item(), rel=0.1)
        assert torch.equal(fresh, new2[name][n_old:])  # same growth seed, another global seed
        assert not torch.equal(fresh, new3[name][n_old:])  # another growth seed
