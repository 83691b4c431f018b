"""Schedule, log sink and parallelism are chosen from values their owner modules declare
(issue 37 item 1): config.py lists none of them, every declared value validates, anything else is one
line naming the field and the declared values, and a value declared by new code (a plugin) is valid
without editing config.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from nexus import config_base as C
from nexus.config import ConfigError, RunConfig, TrainConfig


def choice_fields():
    return [f for f in dataclasses.fields(TrainConfig) if "declared_in" in f.metadata]


def test_the_three_settings_are_declared_choices():
    # (train.optimizer is a kind section now: each kind its options and builder, tests/test_optimizer_kinds.py)
    assert {"schedule", "parallel", "log_to"} <= {f.name for f in choice_fields()}


@pytest.mark.parametrize("f", choice_fields(), ids=lambda f: f.name)
def test_every_declared_value_validates_and_others_are_refused(f):
    table = C.declared_choices(f.metadata["setting"], f.metadata["declared_in"])
    assert table, f"nothing declared for {f.metadata['setting']}"
    for value in table:
        cfg = RunConfig()
        setattr(cfg.train, f.name, [value] if f.name == "log_to" else value)
        if table[value].check is None:
            cfg.validate()
    cfg = RunConfig()
    setattr(cfg.train, f.name, ["no-such-value"] if f.name == "log_to" else "no-such-value")
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    assert f"{f.metadata['setting']}=" in str(e.value) and "|".join(table) in str(e.value)


def test_a_value_declared_by_new_code_is_valid_without_editing_config(monkeypatch):
    monkeypatch.setitem(C._DECLARED, "train.log_to", dict(C.declared_choices("train.log_to", "nexus.train.loggers")))
    cfg = RunConfig()
    cfg.train.log_to = ["my_sink"]
    with pytest.raises(ConfigError):
        cfg.validate()
    C.declare_choice("train.log_to", "my_sink", "a sink of new code")
    cfg.validate()  # (a schedule must also bring its shape: tests/test_schedule_kinds.py)


def test_a_declared_check_adds_its_rule():
    cfg = RunConfig()
    cfg.train.parallel, cfg.train.optimizer = "fsdp2", "muon"
    with pytest.raises(
        ConfigError,
        match=r"train.optimizer='muon' \(valid: an elementwise optimizer such as adamw "
        r"with train.parallel=fsdp2",
    ):
        cfg.validate()


def test_config_py_names_no_declared_value():
    src = open(C.__file__).read()
    for f in choice_fields():
        for value in C.declared_choices(f.metadata["setting"], f.metadata["declared_in"]):
            if value == f.default or [value] == (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            ):
                continue  # the default is the field's own
            assert f'"{value}"' not in src, f"config.py names {f.metadata['setting']} value {value!r}"


def test_checking_the_choices_imports_no_torch():
    code = "import sys; from nexus.config import RunConfig; RunConfig().validate(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
