"""Width growth's inner axes come from the MLP kinds' declarations (issue 37 leftover): a kind registered
here, with its own axis, gets its --width.<axis> option, is parsed, checked and grown, with no edit to
growth/width.py. The grown model is held to the function it computed before (net2net: copy,copy with the
copy groups' fan-in split evenly is exact), computed here by the old model itself."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from nexus.config import ConfigError, MLPOptions, option
from nexus.growth import spec as S
from nexus.growth.width import WidthSpec, grow_width
from nexus.models import build_model
from nexus.models.kinds import MLP_KINDS, LayerKind
from nexus.models.layers import SwiGLU
from nexus.presets import get_preset

KIND, AXIS = "test_wide_swiglu", "test_inner"


@pytest.fixture
def wide_kind():
    """An MLP kind declared and registered by this test alone (options, axis, module), removed after it."""
    MLPOptions.kinds()  # the built-ins first, so ours is not the first registration the search sees
    MLP_KINDS.load()

    @dataclass
    class WideOptions(MLPOptions, kind=KIND):
        """A SwiGLU of its own inner size, independent of model.ffn_hidden."""

        inner: int = option(24, "inner size of this test kind's SwiGLU")
        width_axis_reasons: ClassVar[dict[str, str]] = {AXIS: "new inner size of the test kind (0 = unchanged)"}

        def params(self, model, base: int) -> int:
            return 3 * model.d_model * self.inner

        def width_axes(self, model) -> dict[str, int]:
            return {AXIS: self.inner}

        def set_width_axes(self, model, sizes: dict[str, int]) -> None:
            self.inner = sizes[AXIS]

    class WideSwiGLU(SwiGLU):
        def width_roles(self, inner: str = AXIS) -> dict:
            return super().width_roles(AXIS)

    MLP_KINDS.register(KIND)(LayerKind(lambda cfg, **common: WideSwiGLU(cfg.d_model, cfg.mlp.inner)))
    try:
        yield WideOptions
    finally:
        del MLPOptions.registered[KIND]
        del MLP_KINDS._entries[KIND]  # noqa: SLF001 - the registry has no unregister; tests must leave it as found


def _cfg(options_cls):
    cfg = get_preset("baseline-micro")
    cfg.model.mlp = options_cls()
    return cfg


def test_a_registered_kinds_axis_is_a_width_option_flag_and_record_key(wide_kind):
    parser = argparse.ArgumentParser()
    S.add_spec_flags(parser)
    assert f"--width.{AXIS}" in parser.format_help()
    args = parser.parse_args([f"--width.{AXIS}", "48"])
    assert S.spec_from_flags(args) == {"family": "width", AXIS: 48}
    spec = S.spec_from_dict({"family": "width", AXIS: 48})
    assert getattr(spec, AXIS) == 48 and spec.to_dict()[AXIS] == 48
    assert spec == WidthSpec(**{AXIS: 48}).validate() and spec != WidthSpec(**{AXIS: 40}).validate()
    with pytest.raises(ConfigError, match=f"width.{AXIS}=-1"):
        WidthSpec(**{AXIS: -1}).validate()


def test_the_axis_is_refused_on_a_model_whose_mlp_lacks_it_and_a_builtin_axis_on_the_new_kind(wide_kind):
    with pytest.raises(ConfigError, match=f"has no {AXIS} axis"):
        WidthSpec(**{AXIS: 64}).validate().applies_to(get_preset("baseline-micro").model)
    with pytest.raises(ConfigError, match="has no ffn axis"):
        WidthSpec(ffn=512).validate().applies_to(_cfg(wide_kind).model)


def test_the_new_kinds_axis_grows_exactly_without_an_edit_to_width_py(wide_kind):
    torch.manual_seed(0)
    cfg = _cfg(wide_kind)
    model = build_model(cfg.model).eval()
    spec = WidthSpec(**{AXIS: 48}, init="copy,copy", preserve="exact").validate()
    spec.applies_to(cfg.model)
    res = grow_width(model, cfg, spec)
    assert res.model_cfg.mlp.inner == 48 and res.record["axes"] == {AXIS: [24, 48]}
    x = torch.randint(0, cfg.model.vocab_size, (2, 16))
    with torch.no_grad():
        before, after = model(x), res.model.eval()(x)
    before = before["logits"] if isinstance(before, dict) else getattr(before, "logits", before)
    after = after["logits"] if isinstance(after, dict) else getattr(after, "logits", after)
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    assert any(p.shape[0] == 48 for p in res.model.parameters())


def test_every_registered_mlp_kind_declares_each_axis_it_reports():
    """width_axes may only return axes the kind declares in width_axis_reasons (else no flag would set them)."""
    cfg = get_preset("baseline-micro")
    for kind, cls in MLPOptions.kinds().items():
        cfg.model.mlp = cls()
        assert set(cls().width_axes(cfg.model)) <= set(cls.width_axis_reasons), kind
