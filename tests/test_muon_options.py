"""Muon's options are the muon optimizer kind's own section (issue 49): `--train.optimizer muon
--train.optimizer.momentum 0.9`, each named as the Muon param-group key it sets, with the defaults the flat
`train.muon_*` fields had. The old keys still load from a config file, a saved config (checkpoint, ledger) and the
command line, each move named in one line on stderr; both spellings with different values, an unknown option and
a bad value are refused in one line (exit 2 from the CLI). An adamw config's default train.muon_* (every saved config
held them) drop silently, so a ledger's config keys do not change."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch.nn as nn
from test_output_safety import MICRO, one_line_exit_2

from nexus.config import ConfigError, RunConfig, TrainConfig
from nexus.config_help import field_reasons
from nexus.config_migration import load_config_file, saved_run_config
from nexus.config_overrides import merge_config_file, parse_overrides
from nexus.experiments.ledger import config_key
from nexus.optim.optimizers import Muon
from nexus.optim.param_groups import build_optimizer
from nexus.presets import get_preset

OLD_DEFAULTS = {"muon_lr": 0.02, "muon_wd": 0.0, "muon_momentum": 0.95, "muon_ns": "newton_schulz", "muon_ns_steps": 5}
NEW = {"lr": 0.03, "momentum": 0.9, "weight_decay": 0.01, "ns_method": "polar_express", "ns_steps": 4}
AS_OLD = {
    "lr": "muon_lr",
    "momentum": "muon_momentum",
    "weight_decay": "muon_wd",
    "ns_method": "muon_ns",
    "ns_steps": "muon_ns_steps",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 4)  # the hidden matrix Muon takes


def muon_group(tcfg: TrainConfig) -> dict:
    opt = build_optimizer(Net(), tcfg).optimizers["muon"]
    assert isinstance(opt, Muon)
    (group,) = opt.param_groups
    return group


def micro_muon() -> RunConfig:
    return parse_overrides(get_preset("baseline-micro"), ["--train.optimizer", "muon"])


def test_the_defaults_are_the_flat_fields_defaults_and_each_option_has_its_reason():
    o = TrainConfig(optimizer="muon").optimizer
    assert {AS_OLD[k]: getattr(o, k) for k in NEW} == OLD_DEFAULTS
    assert "muon_lr" not in {f.name for f in dataclasses.fields(TrainConfig)}
    reasons = field_reasons(type(o))
    assert all(reasons[k] for k in NEW), reasons  # what `nexus config` prints beside each


def test_each_command_line_option_reaches_the_muon_param_group(capsys):
    cfg = micro_muon()
    parse_overrides(cfg, [x for k, v in NEW.items() for x in (f"--train.optimizer.{k}", str(v))]).validate()
    group = muon_group(cfg.train)
    assert {k: group[k] for k in NEW} == NEW and group["base_lr"] == NEW["lr"]
    assert capsys.readouterr().err == ""  # the new spelling: nothing to report


def test_an_old_command_line_key_on_a_muon_run_moves_with_one_printed_line(capsys):
    cfg = parse_overrides(micro_muon(), ["--train.muon_momentum", "0.9", "--train.muon_ns=polar_express"]).validate()
    group = muon_group(cfg.train)
    assert (group["momentum"], group["ns_method"]) == (0.9, "polar_express")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "config: train.muon_momentum is now train.optimizer.momentum (the muon kind's own option, issue 49): "
        "train.optimizer.momentum=0.9",
        "config: train.muon_ns is now train.optimizer.ns_method (the muon kind's own option, issue 49): "
        "train.optimizer.ns_method='polar_express'",
    ]


def test_an_old_command_line_key_beside_another_kind_is_one_line_exit_2(capsys, tmp_path):
    err = one_line_exit_2(capsys, ["train", *MICRO, "--train.muon_lr", "0.01", "--out", tmp_path / "r"])
    assert err.endswith(
        "train.muon_lr=0.01 moved into train.optimizer.lr, an option of optimizer kind muon, not of 'adamw' "
        "(valid: --train.optimizer muon, then --train.optimizer.lr 0.01)"
    )
    assert not (tmp_path / "r").exists()


def test_both_spellings_on_one_command_line_are_one_line_unless_they_agree(capsys, tmp_path):
    both = ["--train.optimizer", "muon", "--train.optimizer.lr", "0.03", "--train.muon_lr", "0.01"]
    one_line_exit_2(
        capsys,
        ["train", *MICRO, *both, "--out", tmp_path / "r"],
        "train.muon_lr=0.01 and train.optimizer.lr=0.03 given together (train.muon_lr is the old name of "
        "train.optimizer.lr; valid: --train.optimizer.lr alone)",
    )
    same = parse_overrides(micro_muon(), ["--train.optimizer.lr", "0.03", "--train.muon_lr", "3e-2"])
    assert same.train.optimizer.lr == 0.03


@pytest.mark.parametrize(
    "option,value,shown,valid",
    [
        ("lr", "-1", "-1.0", "a finite number > 0"),
        ("momentum", "1.0", "1.0", "a number in [0, 1)"),
        ("weight_decay", "-0.1", "-0.1", "a number >= 0"),
        ("ns_steps", "0", "0", "an integer > 0"),
        ("ns_method", "svd", "'svd'", "newton_schulz|polar_express"),
        ("ns_steps", "2.5", "2.5", "an integer"),
    ],
)
def test_a_bad_muon_value_is_one_line_exit_2(capsys, tmp_path, option, value, shown, valid):
    one_line_exit_2(
        capsys,
        ["train", *MICRO, "--train.optimizer", "muon", f"--train.optimizer.{option}", value, "--out", tmp_path / "r"],
        f"train.optimizer.{option}={shown} (valid: {valid})",
    )


def test_an_unknown_muon_option_is_one_line_exit_2(capsys, tmp_path):
    err = one_line_exit_2(
        capsys,
        ["train", *MICRO, "--train.optimizer", "muon", "--train.optimizer.nesterov", "false", "--out", tmp_path / "r"],
        "unknown field 'train.optimizer.nesterov' (valid at train.optimizer: betas, eps, kind, lr, momentum, "
        "ns_method, ns_steps, weight_decay)",
    )
    assert "muon_" not in err
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  optimizer: {kind: muon, nesterov: false}\n")
    with pytest.raises(ConfigError, match=r"^unknown field 'train.optimizer.nesterov' \(valid: "):
        load_config_file(f)


def test_an_old_config_file_loads_into_the_muon_section_with_one_printed_line(capsys, tmp_path):
    f = tmp_path / "old.yaml"
    f.write_text("train:\n  optimizer: muon\n" + "".join(f"  {AS_OLD[k]}: {v}\n" for k, v in NEW.items()))
    for cfg in (load_config_file(f), merge_config_file(get_preset("baseline-micro"), f)):
        assert cfg.train.optimizer.kind == "muon" and {k: getattr(cfg.train.optimizer, k) for k in NEW} == NEW
        assert {k: muon_group(cfg.train)[k] for k in NEW} == NEW
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], lines  # one line per read
    assert lines[0] == (
        "config: moved an old config's train.muon_lr=0.03, muon_wd=0.01, muon_momentum=0.9, "
        "muon_ns='polar_express', muon_ns_steps=4 into train.optimizer as lr, weight_decay, momentum, ns_method, "
        "ns_steps (the muon kind's own options, issue 49)"
    )


def test_a_partial_old_file_takes_the_kind_it_is_merged_onto(capsys, tmp_path):
    f = tmp_path / "partial.yaml"
    f.write_text("train:\n  muon_lr: 0.01\n  muon_wd: 0.0\n")
    onto_muon = merge_config_file(get_preset("exo-dynamic-e-tiny"), f)  # a muon preset (lr 0.01, wd 0.1)
    assert (onto_muon.train.optimizer.lr, onto_muon.train.optimizer.weight_decay) == (0.01, 0.0)
    assert capsys.readouterr().err.count("config: train.muon_") == 2
    onto_adamw = merge_config_file(get_preset("baseline-micro"), f)  # read by nothing there before either
    assert onto_adamw.train.optimizer == get_preset("baseline-micro").train.optimizer
    assert capsys.readouterr().err.splitlines() == [
        "config: dropped train.muon_lr=0.01 from an old config (train.optimizer is 'adamw', not muon; it had no effect)"
    ]  # the default muon_wd had no effect either: not named


def test_a_saved_config_with_both_spellings_disagreeing_is_refused_in_one_line():
    d = micro_muon().to_dict()
    d["train"]["optimizer"]["lr"] = 0.03
    d["train"].update(OLD_DEFAULTS)
    with pytest.raises(ConfigError) as e:
        saved_run_config(d)
    assert str(e.value) == (
        "train.muon_lr=0.02 and train.optimizer.lr=0.03 given together (train.muon_lr is the old name of "
        "train.optimizer.lr; valid: train.optimizer.lr alone)"
    )


def test_an_old_saved_adamw_config_keeps_its_ledger_key_silently(capsys):
    """Every config saved before (checkpoints, ledgers, plans) holds train.muon_* at their defaults beside adamw:
    they had no effect, drop without a word, and the config keys the ledgers hold do not change."""
    new = get_preset("baseline-micro").to_dict()
    old = copy.deepcopy(new)  # as nexus wrote it before each kind owned its options (issue 49)
    old["train"].pop("optimizer")
    old["train"].update({"optimizer": "adamw", "betas": [0.9, 0.95], "eps": 1e-8, **OLD_DEFAULTS})
    assert saved_run_config(old) == saved_run_config(new) and config_key(old) == config_key(new)
    assert capsys.readouterr().err == ""


def test_an_old_muon_checkpoint_config_is_the_same_run(capsys):
    new = micro_muon()
    new.train.optimizer.lr = 0.01
    old = new.to_dict()
    opt = old["train"].pop("optimizer")
    old["train"].update({"optimizer": "muon", "betas": opt["betas"], "eps": opt["eps"], **OLD_DEFAULTS})
    old["train"]["muon_lr"] = 0.01
    assert saved_run_config(old) == new and config_key(old) == config_key(new.to_dict())
    assert capsys.readouterr().err.count("\n") == 2  # one line each read


def test_growing_a_muon_checkpoint_reports_its_muon_lr_override(tmp_path):
    """grow_checkpoint's train overrides edit the train.optimizer section in place: the config before them is a
    copy of its own (a shallow one would share the section and lose the note)."""
    from test_core_train import micro_cfg

    from nexus.checkpoint import read_config
    from nexus.growth import grow_checkpoint
    from nexus.train.trainer import Trainer

    run = tmp_path / "muon"
    Trainer(micro_cfg(run, "--train.steps", "2", "--train.optimizer", "muon"), quiet=True).fit()
    report = grow_checkpoint(
        run / "checkpoint",
        tmp_path / "grown",
        {"family": "width", "hidden": 64, "init": "copy,copy"},
        probe_verify=False,
        train_overrides=["--train.optimizer.lr", "0.01"],
    )
    assert report["notes"] == "train.optimizer.lr 0.02 -> 0.01 from step 2 on (resumed optimizer state kept)"
    assert read_config(tmp_path / "grown").train.optimizer.lr == 0.01
