"""growth/registry.py and growth/methods.py: one registration line gives a family its spec and its grower,
`parse_growth_spec` finds every family, and `register_method` registers each recipe under its own name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nexus.config import ConfigError
from nexus.growth import methods as M
from nexus.growth import registry as R
from nexus.growth import spec as S
from nexus.plugins import Registry


def test_families_are_the_registered_growers_sorted(builtin_growth_families):
    assert {"nexus_rank", "retrofit", "tokenformer", "width"} <= set(R.families())  # the built-ins among them
    assert R.families() == sorted(R.GROWERS.names())


def test_one_registration_line_registers_the_spec_and_the_grower(monkeypatch):
    monkeypatch.setattr(R, "GROWERS", Registry("growth spec family", None, plugins=False))
    monkeypatch.setattr(S, "_SPECS", dict(S._SPECS))

    @dataclass
    class ToySpec(S.GrowthSpec):
        """A toy family."""

    def grow_toy(model, cfg, spec):
        return None

    assert R.register_grower("toy", ToySpec)(grow_toy) is grow_toy
    assert ToySpec.family == "toy" and S.spec_classes()["toy"] is ToySpec
    assert R.GROWERS.get("toy") is grow_toy and R.families() == ["toy"]
    assert R.parse_growth_spec({"family": "toy", "optimizer_state": "drop"}).to_dict() == {
        "family": "toy",
        "optimizer_state": "drop",
    }


def test_parse_growth_spec_names_its_field_and_takes_a_dataclass(builtin_growth_families):
    with pytest.raises(
        ConfigError,
        match=r"^growth spec=\{'family': 'height'\} \(valid: a mapping with family one of "
        r"depth, nexus_rank, retrofit, tokenformer, width",
    ):
        R.parse_growth_spec({"family": "height"})
    with pytest.raises(ConfigError, match=r"^train\.hooks\.spec=3 "):
        R.parse_growth_spec(3, "train.hooks.spec")
    spec = R.parse_growth_spec({"family": "width", "hidden": 8})
    assert R.parse_growth_spec(spec) is spec


def test_growth_result_starts_with_empty_record_and_report():
    a, b = R.GrowthResult(None, None, {}), R.GrowthResult(None, None, {})
    assert a.record == {} and a.report == {} and a.record is not b.record and a.report is not b.report


def test_register_method_registers_each_under_its_own_name(monkeypatch):
    monkeypatch.setattr(M, "PROGRESSIVE_METHODS", Registry("--method", None, plugins=False))
    one = M.Method("one", "width", "baseline-tiny", {"hidden": 8}, "first")
    two = M.Method("two", "retrofit", "baseline-tiny", {"order": 2}, "second", {"model.n_layers": 2}, {"small": 1e-3})
    M.register_method(one, two)
    assert list(M.PROGRESSIVE_METHODS.items()) == [("one", one), ("two", two)]
    assert one.overrides == {} and one.lrs == {} and two.lrs == {"small": 1e-3}
    with pytest.raises(RuntimeError, match="registered twice"):
        M.register_method(one)


def test_the_built_in_methods_are_registered_under_their_names():
    items = list(M.PROGRESSIVE_METHODS.items())
    assert items and all(name == m.name for name, m in items)
    assert "retrofit-ho" in dict(items) and dict(items)["retrofit-ho"].family == "retrofit"
