"""growth/retrofit.py without building a model: the retrofit spec's checks and the attention config it
converts a standard model to (the module docstring's two ways: paper = new separate random inner
weights, no gate; lossless = a zero gate on each refinement, shared weights by default; form self has no
inner weights, so it shares)."""

from __future__ import annotations

import pytest

from nexus.config import ConfigError
from nexus.growth import parse_growth_spec
from nexus.growth.retrofit import RetrofitSpec, retrofit_model_config
from nexus.presets import get_preset


def _model_cfg(**attention):
    cfg = get_preset("baseline-micro")
    for k, v in attention.items():
        setattr(cfg.model.attention, k, v)
    cfg.validate()
    return cfg.model


def _converted(**spec):
    return retrofit_model_config(_model_cfg(), parse_growth_spec({"family": "retrofit", **spec})).attention


@pytest.mark.parametrize(
    "spec,want",
    [
        ({}, dict(order=2, ho_form="projected", ho_shared=False, ho_gate=False, ho_targets="qk")),
        ({"mode": "lossless"}, dict(order=2, ho_form="projected", ho_shared=True, ho_gate=True, ho_targets="qk")),
        ({"form": "self"}, dict(ho_form="self", ho_shared=True, ho_gate=False)),
        (
            {"mode": "lossless", "shared": False, "order": 3, "targets": "qkv"},
            dict(order=3, ho_form="projected", ho_shared=False, ho_gate=True, ho_targets="qkv"),
        ),
        ({"shared": True, "targets": "q"}, dict(ho_shared=True, ho_gate=False, ho_targets="q")),
        ({"shared": 1}, dict(ho_shared=True)),
    ],
)
def test_each_way_converts_to_its_attention_options(spec, want):
    a = _converted(**spec)
    assert a.kind == "higher_order"
    got = {k: getattr(a, k) for k in want}
    assert got == want and all(type(getattr(a, k)) is type(v) for k, v in want.items()), got


def test_the_conversion_keeps_the_shared_attention_options_and_leaves_the_model_config_alone():
    cfg = _model_cfg(gate="headwise")
    new = retrofit_model_config(cfg, RetrofitSpec().validate())
    assert new.attention.gate == "headwise" and new.attention.kind == "higher_order"
    assert cfg.attention.kind == "standard" and new is not cfg and new.d_model == cfg.d_model
    # every other section is the source's value in an object of its own: a later change to the retrofitted
    # config (a growth's pinned state, a mixing option) cannot reach back into the source model's config
    for name in ("arch", "projection", "mixing", "mlp", "growth_state"):
        assert getattr(new, name) == getattr(cfg, name) and getattr(new, name) is not getattr(cfg, name), name


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"targets": "kv"}, "invalid retrofit: model.attention.ho_targets='kv'"),
        (
            {"form": "self", "shared": False},
            "invalid retrofit: model.attention.ho_shared=False (valid: true when ho_form=self",
        ),
    ],
)
def test_an_invalid_conversion_names_the_option(spec, message):
    with pytest.raises(ConfigError) as e:
        _converted(**spec)
    assert str(e.value).startswith(message), str(e.value)
    with pytest.raises(ConfigError) as e:  # applies_to refuses it before any training step
        parse_growth_spec({"family": "retrofit", **spec}).applies_to(_model_cfg())
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"order": 1}, "--order=1 (valid: an integer >= 2"),
        ({"order": True}, "--order=True"),
        ({"order": 2.0}, "--order=2.0"),
        ({"kind": "lowrank"}, "--retrofit='lowrank' (valid: higher-order)"),
        ({"mode": "halfway"}, "retrofit mode='halfway' (valid: paper|lossless)"),
        ({"seed": None}, "--growth-seed=None (valid: an integer >= 0)"),
        ({"seed": -1}, "--growth-seed=-1 (valid: an integer >= 0)"),
        ({"optimizer_state": "keep"}, "--optimizer-state='keep'"),
    ],
)
def test_a_bad_retrofit_field_is_refused_by_name(spec, message):
    with pytest.raises(ConfigError) as e:
        parse_growth_spec({"family": "retrofit", **spec})
    assert str(e.value).startswith(message), str(e.value)


def test_the_spec_accepts_its_bounds():
    s = parse_growth_spec({"family": "retrofit", "order": 2, "seed": 0, "mode": "lossless"})
    assert (s.order, s.seed, s.mode, s.kind) == (2, 0, "lossless", "higher-order")
    assert s.applies_to(_model_cfg()) is None


def test_applies_only_to_a_standard_attention_transformer():
    cfg = get_preset("baseline-micro")
    cfg.model.arch = "recurrent"
    cfg.model.arch.n_sup, cfg.model.arch.t_inner = 1, 1
    cfg.validate()
    with pytest.raises(ConfigError, match=r"^model\.arch\.kind='recurrent' cannot be retrofitted"):
        RetrofitSpec().validate().applies_to(cfg.model)
    higher = retrofit_model_config(_model_cfg(), RetrofitSpec().validate())
    with pytest.raises(ConfigError, match=r"^model\.attention\.kind='higher_order': the model is not standard"):
        RetrofitSpec().validate().applies_to(higher)
