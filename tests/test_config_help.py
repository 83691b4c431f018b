"""`nexus config` lists every config field with its default and its one-line reason."""

from __future__ import annotations

import dataclasses

from nexus.cli import main
from nexus.config import RunConfig
from nexus.config_help import rows


def _leaf_names(obj, prefix=""):
    """Every user setting: model.growth_state is written by growth only and not listed."""
    out = []
    for f in dataclasses.fields(obj):
        if f.metadata.get("set_by_growth"):
            continue
        v = getattr(obj, f.name)
        out += _leaf_names(v, f"{prefix}{f.name}.") if dataclasses.is_dataclass(v) else [prefix + f.name]
    return out


def test_every_field_has_a_reason():
    listed = rows(RunConfig())
    assert [n for n, _, _ in listed] == _leaf_names(RunConfig())
    missing = [n for n, _, why in listed if len(why) < 5]
    assert missing == [], f"config fields without a one-line reason: {missing}"
    # growth pins are not listed (set by growth only) but each kind explains the ones it declares
    pins = {
        (k, name): why
        for section in RunConfig().model.kind_sections()
        for k, c in type(section).kinds().items()
        for name, why in c.growth_pins.items()
    }
    assert pins and all(isinstance(why, str) and len(why) >= 5 for why in pins.values()), pins
    assert not any(n.startswith("model.growth_state") for n, _, _ in listed)


def test_nexus_config_prints_defaults_and_reasons(capsys):
    assert main(["config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(_leaf_names(RunConfig()))
    line = next(l for l in out if l.startswith("train.lr "))
    assert f"= {RunConfig().train.lr!r}" in line and "# peak AdamW learning rate" in line


def test_nexus_config_shows_a_presets_values_and_filters(capsys):
    assert main(["config", "--preset", "baseline-small", "--section", "model.d_model"]) == 0
    assert capsys.readouterr().out.strip().startswith("model.d_model = 512")


def test_nexus_config_bad_section_is_one_line_exit_2(capsys):
    assert main(["config", "--section", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--section='nope'" in err[0]


def test_train_help_points_to_the_field_list(capsys):
    assert main(["train", "--help"]) == 0
    assert "nexus config" in capsys.readouterr().out


def test_train_help_shows_every_fields_default_and_each_options(capsys):
    """Issue 40 item 11: only `nexus config` showed the fields' defaults."""
    from nexus.config_help import rows
    from nexus.presets import get_preset

    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    tiny = get_preset("baseline-tiny")
    assert f"model.d_model = {tiny.model.d_model!r}" in out and f"train.lr = {tiny.train.lr!r}" in out
    listed = [line.split(" = ", 1)[0].strip() for line in out.splitlines() if " = " in line and "#" in line]
    assert listed == [name for name, _, _ in rows(tiny)]  # every field, in `nexus config`'s order
    assert "no progress output (default: off)" in " ".join(out.split())


def test_each_kind_line_lists_the_registered_kinds_of_its_section(capsys):
    """A kind added in its own file shows in `nexus config` as a valid value of its section's kind, as a
    choice setting lists its declared values (tests/test_extension_by_new_files.py adds one in a copy)."""
    assert main(["config", "--section", "model"]) == 0
    lines = {l.split(" = ", 1)[0]: l for l in capsys.readouterr().out.splitlines()}
    sections = RunConfig().model.kind_sections()
    assert len(sections) >= 4
    for section in sections:
        line = lines[f"model.{section.section}.kind"]
        assert line.endswith(f"(valid: {'|'.join(type(section).kinds())})"), line


def test_every_config_field_has_its_reason_also_where_the_formatter_wrapped_it():
    """`ruff format` moved eight fields' reason comments off the field's first line; their reasons went empty in
    `nexus config` and --help until the reader took the first comment anywhere in the field's statement."""
    import dataclasses

    import nexus.config as C
    from nexus.config_help import field_reasons

    sections = {"RunConfig": {"model", "data", "train"}, "ModelConfig": {"mixing"}}  # sections: their fields explain
    for name in dir(C):
        cls = getattr(C, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == "nexus.config":
            empty = {k for k, v in field_reasons(cls).items() if not v}
            assert empty <= sections.get(name, set()), (name, empty)
    assert field_reasons(C.TrainConfig)["dist_init_timeout_s"].startswith("torchrun, through set-up")
    # a reason continued on comment lines inside the field's parentheses is one reason
    assert field_reasons(C.ModelConfig)["logit_scale"].endswith("sets it to the tied head's fan-in factor")
