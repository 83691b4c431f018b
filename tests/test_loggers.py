"""train.log_to: TensorBoard event files and an offline W&B run carry the same scalars as metrics.jsonl;
a sink whose package is missing is a one-line config error before anything is written."""

from __future__ import annotations

import json

import pytest

from nexus.cli import main
from nexus.config import ConfigError
from nexus.config_overrides import parse_overrides
from nexus.presets import get_preset
from nexus.train.trainer import Trainer

RUN = [
    "--train.steps",
    "4",
    "--train.log_every",
    "2",
    "--train.eval_every",
    "0",
    "--train.eval_batches",
    "1",
    "--train.sample_tokens",
    "2",
    "--model.d_model",
    "32",
    "--model.n_layers",
    "1",
    "--data.seq_len",
    "16",
    "--train.batch_size",
    "2",
    "--train.warmup_steps",
    "1",
]


def _cfg(tmp_path, *extra):
    return parse_overrides(
        get_preset("baseline-micro"), RUN + ["--train.out_dir", str(tmp_path / "run"), *extra]
    ).validate()


def _train_losses(run):
    return {
        r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r
    }


def test_tensorboard_gets_the_jsonl_scalars(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    Trainer(_cfg(tmp_path, "--train.log_to", "jsonl,tensorboard"), quiet=True).fit()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tb = {e.step: e.value for e in acc.Scalars("loss")}
    jl = _train_losses(tmp_path / "run")
    assert sorted(tb) == sorted(jl) == [2, 4]
    for s in jl:
        assert tb[s] == pytest.approx(jl[s], rel=1e-6)
    assert "val_loss" in acc.Tags()["scalars"]


def test_wandb_offline_run_logs_the_same_scalars(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged = []
    import wandb

    real_init = wandb.init

    def spy_init(*a, **kw):
        run = real_init(*a, **kw)
        real_log = run.log
        run.log = lambda data, step=None, **k: (logged.append((step, dict(data))), real_log(data, step=step, **k))[1]
        return run

    monkeypatch.setattr(wandb, "init", spy_init)
    Trainer(_cfg(tmp_path, "--train.log_to", "wandb", "--train.wandb_project", "nexus-test"), quiet=True).fit()
    jl = _train_losses(tmp_path / "run")
    got = {s: d["loss"] for s, d in logged if "loss" in d}
    assert got == pytest.approx(jl)
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")), "no offline run directory in the run dir"
    assert (tmp_path / "run" / "metrics.jsonl").is_file()  # jsonl is always written


def test_wandb_is_not_imported_unless_chosen(tmp_path, monkeypatch):
    import subprocess
    import sys

    code = (
        "import sys, os; from nexus.config_overrides import parse_overrides; from nexus.presets import get_preset; "
        "from nexus.train.trainer import Trainer; "
        f"cfg = parse_overrides(get_preset('baseline-micro'), {RUN!r} + ['--train.out_dir', {str(tmp_path / 'r')!r}]); "
        "Trainer(cfg.validate(), quiet=True).fit(); "
        "assert 'wandb' not in sys.modules and 'tensorboard' not in sys.modules"
    )
    env = dict(__import__("os").environ, NEXUS_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_missing_package_or_unknown_sink_fails_before_writing(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    out = tmp_path / "run"
    rc = main(
        ["train", "--preset", "baseline-micro", "--quiet", "--train.log_to", "jsonl,wandb", "--train.out_dir", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "train.log_to" in err[0] and "pip install wandb" in err[0]
    assert not out.exists()
    with pytest.raises(ConfigError, match="train.log_to"):
        parse_overrides(get_preset("baseline-micro"), ["--train.log_to", "jsonl,mlflow"]).validate()


@pytest.mark.parametrize("mode", [None, "onlien"])
def test_wandb_without_an_api_key_or_with_a_bad_mode_fails_before_writing(tmp_path, mode):
    """Online W&B with no key anywhere (a new user's first try), or a WANDB_MODE wandb rejects: one line naming
    train.log_to and the ways out, exit 2, no run directory -- not wandb's traceback after config.yaml is written."""
    import os
    import subprocess
    import sys

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "NETRC", "WANDB_IDENTITY_TOKEN_FILE")
    }
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), NEXUS_CACHE=str(tmp_path / "cache"))
    if mode:
        env["WANDB_MODE"] = mode
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nexus",
            "train",
            "--preset",
            "baseline-micro",
            "--quiet",
            *RUN,
            "--train.log_to",
            "jsonl,wandb",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr[-3000:]
    assert "train.log_to" in err[0] and "WANDB_MODE=offline" in err[0] and (mode is None or mode in err[0])
    assert not out.exists()
