"""CLI and checkpoints: bad input is one line and exit code 2, nothing half-written; load/generate work."""

import json
import shutil

import pytest
import torch

import nexus
from nexus.cli import main

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.steps",
    "4",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.sample_tokens",
    "4",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", *MICRO, "--train.out_dir", str(out), "--quiet"]) == 0
    return out / "checkpoint"


def one_line_error(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert needle in err, err
    return err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["train", "--preset", "nope"], "'nope'"),
        (["train", "--model.bogus", "1"], "model.bogus"),
        (["train", "--model.d_model", "100", "--model.n_heads", "3"], "model.d_model=100"),
        (["train", "--model.n_layers", "-2"], "model.n_layers=-2"),
        (["train", "--train.lr", "0"], "train.lr=0"),
        (["train", "--train.steps", "ten"], "train.steps='ten'"),
        (["train", "--data.source", "/no/such/file.txt"], "/no/such/file.txt"),
        (["generate", "--checkpoint", "/no/such/dir"], "/no/such/dir"),
        (["generate", "--checkpoint", ".", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["train", "--config", "/no/such.yaml"], "/no/such.yaml"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, tmp_path, argv, needle):
    one_line_error(capsys, argv + ["--train.out_dir", str(tmp_path / "o")] if argv[0] == "train" else argv, needle)
    assert not (tmp_path / "o" / "checkpoint").exists()


def test_empty_data_file(capsys, tmp_path):
    f = tmp_path / "empty.txt"
    f.write_text("")
    one_line_error(capsys, ["train", *MICRO, "--data.source", str(f), "--train.out_dir", str(tmp_path / "o")], "empty")


def test_trained_checkpoint_loads_and_generates(trained, capsys):
    model = nexus.load(trained)
    assert not model.training
    out = model(torch.tensor([[1, 2, 3]]))
    assert out.logits.shape == (1, 3, model.cfg.vocab_size)
    assert main(["generate", "--checkpoint", str(trained), "--prompt", "The", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("The")
    assert main(["eval", "--checkpoint", str(trained), "--batches", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["val_loss"] > 0


def test_corrupted_and_truncated_checkpoints(trained, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(trained, bad)
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    one_line_error(capsys, ["generate", "--checkpoint", str(bad)], "corrupted")
    shutil.rmtree(bad)
    shutil.copytree(trained, bad)
    (bad / "trainer_state.pt").unlink()
    one_line_error(capsys, ["generate", "--checkpoint", str(bad)], "missing trainer_state.pt")
    shutil.rmtree(bad)
    shutil.copytree(trained, bad)
    (bad / "config.json").write_text("{not json")
    one_line_error(capsys, ["eval", "--checkpoint", str(bad)], "config.json")


def test_config_that_does_not_match_weights(trained, tmp_path, capsys):
    from nexus.checkpoint import CheckpointError, _sha256

    bad = tmp_path / "mismatch"
    shutil.copytree(trained, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["model"]["d_model"] = 48
    (bad / "config.json").write_text(json.dumps(cfg))
    meta = json.loads((bad / "meta.json").read_text())
    meta["sha256"]["config.json"] = _sha256(bad / "config.json")  # a consistent but wrong config
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="does not match its config.json"):
        nexus.load(bad)
    one_line_error(capsys, ["generate", "--checkpoint", str(bad)], "does not match")


def test_checkpoint_write_is_atomic(trained, tmp_path, monkeypatch):
    from nexus import checkpoint as ck

    model = nexus.load(trained)
    cfg = ck.read_config(trained)
    target = tmp_path / "ckpt"
    ck.save_checkpoint(target, model, cfg)
    before = (target / "model.safetensors").read_bytes()

    # the interrupted save writes different weights, so the test can tell which version survived
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    ck.save_checkpoint(tmp_path / "changed", model, cfg)
    assert (tmp_path / "changed" / "model.safetensors").read_bytes() != before
    shutil.rmtree(tmp_path / "changed")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ck.torch, "save", boom)
    with pytest.raises(OSError):
        ck.save_checkpoint(target, model, cfg, trainer_state={"step": 1})
    assert (target / "model.safetensors").read_bytes() == before  # the previous checkpoint survives intact
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary left behind


def test_presets_lists_param_counts(capsys):
    assert main(["presets", "--filter", "baseline"]) == 0
    out = capsys.readouterr().out
    assert "baseline-tiny" in out and "M" in out


def test_a_bad_flag_is_refused_before_torch_is_imported(tmp_path):
    """Issue 40 item 11: `nexus train --bogus` imported torch (5-12 s on a loaded machine) before refusing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; from nexus.cli import main; rc = main(['train', '--bogus', '--train.steps', '1']); "
        "print(rc, 'torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(nexus.__file__).resolve().parents[1]), "NEXUS_DISABLE_PLUGINS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.stdout.split() == ["2", "False"], (proc.stdout, proc.stderr)
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "'--bogus'" in err[0]
    assert not any(tmp_path.iterdir())


def test_the_early_flag_check_knows_every_growth_flag(capsys):
    """growth_flags() (read without torch) is the set the registered growth families' specs generate, less the
    dotted ones built at run time (the early check lets every dotted name through)."""
    import argparse

    from nexus.cli.common import growth_flags
    from nexus.cli.grow import add_growth_flags

    p = argparse.ArgumentParser(add_help=False)
    add_growth_flags(p)
    generated = {o for a in p._actions for o in a.option_strings}
    assert growth_flags() <= generated
    assert all("." in o for o in generated - growth_flags()), sorted(generated - growth_flags())
    assert {"--rewarmup", "--add-tokens", "--lossless", "--width.hidden"} <= growth_flags()  # built-ins among them
    # a growth flag (and an abbreviation of one) still reaches the full parser
    for flag in ("--rewarmup", "--rewarm"):
        assert main(["train", flag, "1.3,2", "--train.steps", "0"]) == 2
        err = capsys.readouterr().err
        assert "unrecognized argument" not in err and "--rewarm" in err, err  # the full parser's own verdict
