"""The scales a growth pins (model.growth_state) are declared by the kinds that own them (issue 37 item 1):
config.py names none of them, each registered kind explains its own, a name no selected kind declares is
refused in one line, and a grown checkpoint written in an older form loads and computes the same logits."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch

import nexus.config as C
from nexus.checkpoint import load_checkpoint, save_checkpoint
from nexus.config import ConfigError, ModelConfig
from nexus.config_migration import LEGACY_GROWTH_STATE, saved_run_config
from nexus.config_overrides import parse_overrides
from nexus.data.tokenizer import ByteTokenizer
from nexus.growth import grow
from nexus.models import build_model
from nexus.presets import get_preset


def kinds_with_pins() -> list[tuple[str, str, type]]:
    """(section, kind, options class) of every registered kind that declares growth pins."""
    return [
        (s.section, k, c) for s in ModelConfig().kind_sections() for k, c in type(s).kinds().items() if c.growth_pins
    ]


def selecting(section: str, kind: str) -> ModelConfig:
    m = ModelConfig()
    setattr(m, section, type(getattr(m, section)).make(kind))
    return m


def growth_errors(m: ModelConfig) -> list[str]:
    errors: list[str] = []
    m.validate(errors)
    return [e for e in errors if e.startswith("model.growth_state")]


def test_config_py_names_no_kinds_growth_pin():
    code = re.sub(r'"""(?:.|\n)*?"""|#[^\n]*', "", Path(C.__file__).read_text())
    pins = {name for _, _, c in kinds_with_pins() for name in c.growth_pins}
    assert pins, "no registered kind declares a growth pin"
    assert sorted(p for p in pins if re.search(rf"\b{re.escape(p)}\b", code)) == []


def test_every_declared_pin_is_explained_and_owned_by_one_section():
    owner: dict[str, str] = {}
    for section, kind, cls in kinds_with_pins():
        for name, why in cls.growth_pins.items():
            assert isinstance(name, str) and name.isidentifier() and isinstance(why, str) and len(why) >= 5, (
                kind,
                name,
            )
            assert owner.setdefault(name, section) == section, f"{name} declared by {owner[name]} and {section} kinds"


def test_a_second_section_declaring_a_taken_pin_is_refused_at_its_definition():
    section, _, cls = kinds_with_pins()[0]
    name = next(iter(cls.growth_pins))
    other = next(s for s in ModelConfig().kind_sections() if s.section != section)
    with pytest.raises(RuntimeError, match=f"growth pin {name!r}"):
        type("Clash", (type(other),), {"growth_pins": {name: "the same name in another section"}})


@pytest.mark.parametrize("section,kind,cls", kinds_with_pins())
def test_a_kinds_pins_validate_only_where_it_is_selected(section, kind, cls):
    m = selecting(section, kind)
    m.growth_state = {name: 7 for name in cls.growth_pins}
    assert growth_errors(m) == []
    assert all(m.pinned(name) == 7 for name in cls.growth_pins)
    m.growth_state = {name: 0 for name in cls.growth_pins}  # 0 = not pinned
    assert growth_errors(m) == []
    name = next(iter(cls.growth_pins))
    for bad in (-1, True, "7", 2.5):
        m.growth_state = {name: bad}
        assert growth_errors(m) == [f"model.growth_state.{name}={bad!r} (valid: an integer >= 0 (0 = not pinned))"]
    baseline = ModelConfig()  # the same pin where no selected kind declares it: refused, naming what is declared
    baseline.growth_state = {name: 7}
    declared = ", ".join(baseline.growth_pins()) or "none"
    assert growth_errors(baseline) == [
        f"model.growth_state.{name}=7 (valid: a scale the selected kinds pin: {declared})"
    ]
    with pytest.raises(RuntimeError, match=f"growth pin {name!r} is not declared"):
        baseline.pinned(name)  # a misspelt or foreign name in code never reads as 'not pinned'
    with pytest.raises(RuntimeError, match=f"growth pin {name!r} is not declared"):
        baseline.pin(name, 3)


def test_an_undeclared_name_is_one_line_naming_field_value_and_the_declared_names():
    cfg = get_preset("tokenformer-micro")
    cfg.model.growth_state = {"frozen_x": 4}
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    declared = ", ".join(cfg.model.growth_pins())
    assert (
        str(e.value)
        == f"invalid config: model.growth_state.frozen_x=4 (valid: a scale the selected kinds pin: {declared})"
    )
    assert "\n" not in str(e.value) and declared


@pytest.mark.parametrize(
    "override", [["--model.growth_state.frozen_n", "5"], ["--model.growth_state", "{frozen_n: 5}"]]
)
def test_overrides_of_growth_state_are_refused(override):
    with pytest.raises(ConfigError, match="model.growth_state.* is set by growth only"):
        parse_overrides(get_preset("tokenformer-micro"), override)


def test_a_validated_config_edited_in_place_is_checked_again():
    """`validated()` compares against a snapshot: it once held the config's own lists (and would hold its
    growth_state mapping), so an in-place edit after validate() went unchecked."""
    cfg = get_preset("baseline-micro").validate()
    cfg.train.optimizer.betas[0] = 2.0
    with pytest.raises(ConfigError, match=r"train.optimizer.betas"):
        cfg.validated()
    cfg = get_preset("baseline-micro").validate()
    cfg.model.growth_state["frozen_x"] = 1
    with pytest.raises(ConfigError, match=r"model.growth_state.frozen_x=1"):
        cfg.validated()


def test_migration_drops_unset_and_unread_legacy_pins(capsys):
    old = get_preset("tokenformer-micro").to_dict()
    old["model"]["growth_state"] = {"frozen_n": 16, "ffn_frozen_n": 0, "frozen_m": 0, "frozen_a": 0}
    assert saved_run_config(old).model.growth_state == {"frozen_n": 16}
    assert capsys.readouterr().err == ""  # zeros were 'not pinned': nothing dropped that did anything
    old["model"]["growth_state"]["frozen_m"] = 9  # no selected kind reads it: dropped, named
    assert saved_run_config(old).model.growth_state == {"frozen_n": 16}
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "config: dropped model.growth_state.frozen_m=9 from an old config (no selected kind reads it; it had no effect)"
    ]
    old["model"]["growth_state"] = {"frozen_q": 3}  # not a name any form had: refused, not dropped
    with pytest.raises(ConfigError, match="model.growth_state.frozen_q=3"):
        saved_run_config(old).validate()


# ----------------------------------------------------------------------------- old checkpoints, same logits
GROWN = {
    "tokenformer": (
        [
            "--model.projection.kind",
            "pattention",
            "--model.projection.param_tokens",
            "16",
            "--model.projection.targets",
            "q,k,v,o,ffn",
        ],
        {"family": "tokenformer", "add_tokens": 8, "add_ffn_tokens": 4},
    ),
    "nexus_rank": (
        [
            "--model.projection.kind",
            "nexus_rank",
            "--model.projection.rank_m",
            "48",
            "--model.projection.rank_a",
            "64",
            "--model.projection.form",
            "l2norm_width",
        ],
        {"family": "nexus_rank", "delta_m": 8, "delta_a": 8},
    ),
}


def _old_form(config: dict, form: str) -> dict:
    """A config.json as nexus wrote it before the kinds declared their pins: main's model.growth_state of
    all four names (0 = not pinned), or the earlier model.projection.frozen_*."""
    state = config["model"].pop("growth_state")
    old = {name: state.get(name, 0) for name in LEGACY_GROWTH_STATE}
    if form == "growth_state":
        config["model"]["growth_state"] = old
    else:
        config["model"]["projection"].update(old)
    return config


def _rewrite_config(ckpt: Path, config: dict) -> None:
    (ckpt / "config.json").write_text(json.dumps(config, indent=2))
    meta = json.loads((ckpt / "meta.json").read_text())  # the old writer's digest of its own config.json
    meta["sha256"]["config.json"] = hashlib.sha256((ckpt / "config.json").read_bytes()).hexdigest()
    (ckpt / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("form", ["growth_state", "projection"])
@pytest.mark.parametrize("family", sorted(GROWN))
def test_a_grown_checkpoint_in_an_old_form_loads_with_the_same_logits(tmp_path, family, form):
    overrides, spec = GROWN[family]
    micro = ["--model.d_model", "32", "--data.seq_len", "32"]
    cfg = parse_overrides(get_preset("baseline-micro"), micro + overrides).validate()
    torch.manual_seed(0)
    model = build_model(cfg.model)
    with torch.no_grad():  # off the init, as a trained model is
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3 * (p.std() if p.numel() > 1 else 0.1))
    grown, gcfg, _, _ = grow(model, cfg, spec)
    assert gcfg.model.growth_state and set(gcfg.model.growth_state) <= set(gcfg.model.growth_pins())
    ckpt = save_checkpoint(tmp_path / "ck", grown, gcfg, ByteTokenizer())
    saved = json.loads((ckpt / "config.json").read_text())
    assert saved["model"]["growth_state"] == gcfg.model.growth_state  # the new form: only what growth pinned
    _rewrite_config(ckpt, _old_form(saved, form))

    loaded, lcfg, _ = load_checkpoint(ckpt)
    assert lcfg.model.growth_state == gcfg.model.growth_state
    x = torch.randint(0, 259, (2, 24), generator=torch.Generator().manual_seed(1))
    grown.eval(), loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, grown(x).logits)
