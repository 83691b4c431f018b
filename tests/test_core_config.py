"""Config: YAML round-trip, dotted overrides, validation that reports every error at once."""

import pytest

from nexus.config import ConfigError
from nexus.config_migration import load_config_file
from nexus.config_overrides import parse_overrides
from nexus.presets import get_preset, names


def test_yaml_round_trip(tmp_path):
    cfg = get_preset("baseline-tiny")
    parse_overrides(
        cfg,
        [
            "--model.n_layers",
            "3",
            "--train.optimizer.betas",
            "[0.8, 0.9]",
            "--model.projection.kind",
            "nexus_rank",
            "--model.projection.targets",
            "q,k",
        ],
    )
    path = tmp_path / "c.yaml"
    cfg.save_yaml(path)
    again = load_config_file(path)
    assert again.to_dict() == cfg.to_dict()
    assert (
        again.model.n_layers == 3
        and again.train.optimizer.betas == [0.8, 0.9]
        and again.model.projection.targets == ["q", "k"]
    )


def test_overrides_coerce_types():
    cfg = get_preset("baseline-tiny")
    parse_overrides(cfg, ["--train.lr=1e-4", "--model.qk_norm", "true", "--data.source", "123"])
    assert cfg.train.lr == 1e-4 and cfg.model.qk_norm is True and cfg.data.source == "123"


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model.nope", "1"], "model.nope"),
        (["--model.n_layers", "abc"], "model.n_layers='abc'"),
        (["--train.qk_norm", "1"], "train.qk_norm"),
        (["--model.qk_norm", "maybe"], "model.qk_norm"),
        (["--model", "1"], "unrecognized"),
    ],
)
def test_bad_overrides_name_the_field(args, needle):
    with pytest.raises(ConfigError, match=None) as e:
        parse_overrides(get_preset("baseline-tiny"), args)
    assert needle in str(e.value)


def test_validation_reports_every_error_at_once():
    cfg = get_preset("baseline-tiny")
    parse_overrides(
        cfg, ["--model.d_model", "130", "--train.lr", "-1", "--model.n_layers", "0", "--train.schedule", "zigzag"]
    )
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    msg = str(e.value)
    for field in ("model.d_model=130", "train.lr=-1", "model.n_layers=0", "train.schedule='zigzag'"):
        assert field in msg, msg
    assert "\n" not in msg


def test_every_preset_validates():
    for name in names():
        get_preset(name).validate()


def test_unknown_preset_suggests():
    with pytest.raises(ConfigError, match="baseline-tiny"):
        get_preset("baseline-tiyn")
