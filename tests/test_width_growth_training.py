"""Width growth inside training (--grow-at) and on checkpoints (`nexus grow`): diagnostics logged,
grown checkpoints reload and keep training with falling loss, bad input leaves the source untouched."""

import hashlib
import json
from pathlib import Path

import pytest

from nexus.checkpoint import load_checkpoint, read_config
from nexus.cli import main
from nexus.presets import get_preset
from nexus.train.resume import resume_config
from nexus.train.trainer import Trainer


def _micro(out_dir, steps=12, **train):
    cfg = get_preset("baseline-micro")
    cfg.model.n_layers = 1
    cfg.train.steps, cfg.train.eval_every, cfg.train.log_every, cfg.train.out_dir = steps, 0, 1, str(out_dir)
    cfg.train.eval_batches, cfg.train.batch_size, cfg.data.seq_len = 1, 4, 32
    for k, v in train.items():
        setattr(cfg.train, k, v)
    return cfg


def _metrics(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def _digest(d: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(d.iterdir()) if p.is_file())).hexdigest()


@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory):
    run = tmp_path_factory.mktemp("small")
    Trainer(_micro(run, steps=10), quiet=True).fit()
    return run / "checkpoint"


def test_grow_at_inside_training_logs_diagnostics_and_resumes(tmp_path):
    growth = {"family": "width", "hidden": 96, "ffn": 256, "init": "copy,copy", "rewarmup": [1.3, 4]}
    trainer = Trainer(
        _micro(tmp_path / "run", steps=16, hooks=[{"kind": "growth", "at": 8, "spec": growth}], lr=1e-2), quiet=True
    )
    trainer.fit()
    rows = _metrics(tmp_path / "run")
    event = next(r for r in rows if r.get("event") == "growth")
    assert event["step"] == 8 and len(event["rms_ratio_per_layer"]) == 2 and "loss_jump" in event
    assert any("symmetry_lock_mean" in r for r in rows if r["step"] > 8)
    rms_rows = [r for r in rows if "rms_ratio_per_layer" in r and r.get("event") is None]
    assert (
        rms_rows and all(r["step"] > 8 for r in rms_rows) and all(len(r["rms_ratio_per_layer"]) == 2 for r in rms_rows)
    )
    assert trainer.model.cfg.d_model == 96 and trainer.lr_rule is not None and trainer.lr_rule.t_e == 8
    cfg = read_config(tmp_path / "run" / "checkpoint")
    assert cfg.growth_history[-1]["step"] == 8 and cfg.growth_history[-1]["axes"]["hidden"] == [64, 96]
    # resume the grown checkpoint: shapes from config.json, re-warmup restored, loss keeps falling
    more, _ = resume_config(tmp_path / "run" / "checkpoint", ["--train.steps", "28"], out_dir=tmp_path / "more")
    resumed = Trainer(more, resume=str(tmp_path / "run" / "checkpoint"), quiet=True)
    assert resumed.lr_rule is not None and resumed.lr_rule.t_e == 8
    resumed.fit()
    losses = [r["loss"] for r in _metrics(tmp_path / "more") if "loss" in r]
    after_growth = [r["loss"] for r in rows if "loss" in r and 8 < r["step"] <= 11]
    assert sum(losses[-3:]) / 3 < sum(after_growth) / len(after_growth)


def test_cli_grow_checkpoint_then_train_continues(small_ckpt, tmp_path, capsys):
    out = tmp_path / "grown"
    rc = main(
        [
            "grow",
            "--checkpoint",
            str(small_ckpt),
            "--out",
            str(out),
            "--width.hidden",
            "128",
            "--width.ffn",
            "256",
            "--init",
            "copy,copy",
            "--preserve",
            "rms",
            "--rewarmup",
            "1.3,5",
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0 and "hidden 64->128" in printed and "rms_ratio_per_layer" in printed
    model, cfg, _ = load_checkpoint(out)
    assert model.cfg.d_model == 128 and cfg.growth_history[-1]["rewarmup"] == {"rho": 1.3, "tau": 5}
    cont, _ = resume_config(out, ["--train.steps", "22"], out_dir=tmp_path / "cont")
    t = Trainer(cont, resume=str(out), quiet=True)
    assert t.lr_rule is not None and (t.lr_rule.rho, t.lr_rule.tau) == (1.3, 5)
    first = t.evaluate(1)
    t.fit()
    assert t.evaluate(1) < first


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--width.hidden", "32"], "width.hidden=32"),
        (["--width.expert_inner", "64"], "has no expert_inner axis"),
        (["--width.ffn", "256", "--init", "random,random", "--preserve", "exact"], "--preserve exact"),
        (["--width.ffn", "256", "--optimizer-state", "mirror"], "--optimizer-state"),
    ],
)
def test_cli_bad_input_exit_2_source_untouched(small_ckpt, tmp_path, capsys, argv, needle):
    before = _digest(small_ckpt)
    out = tmp_path / "never"
    rc = main(["grow", "--checkpoint", str(small_ckpt), "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and _digest(small_ckpt) == before


def test_cli_train_grow_at_sugar_rejects_a_bad_spec_before_training(tmp_path, capsys):
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--grow-at",
            "5",
            "--growth",
            "{family: width, hiden: 96}",
            "--train.out_dir",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 2 and "hiden" in capsys.readouterr().err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_post_growth_monitor_logs_rms_ratio_against_the_pre_growth_model():
    """The ratio is RMS(model now) / RMS(model before growth) of each residual stream on the same probe,
    computed here directly from the hidden states; the symmetry lock only appears for copied channels."""
    import torch

    from nexus.growth import grow
    from nexus.growth.diagnostics import PostGrowthMonitor, residual_rms
    from nexus.models import build_model

    torch.manual_seed(0)
    cfg = _micro(Path("unused"), steps=10)
    old = build_model(cfg.model)
    ids = torch.randint(0, cfg.model.vocab_size, (2, 17))
    base = residual_rms(old, ids)
    new, _, _, res = grow(old, cfg, {"family": "width", "hidden": 96, "init": "copy,copy"}, None, 0)
    with torch.no_grad():
        for p in new.parameters():
            p.mul_(1.1)  # as if training had moved it
    logged = []

    class FakeTrainer:
        model = new

        def log(self, rec):
            logged.append(rec)

    PostGrowthMonitor(res.param_maps, ids, base)(FakeTrainer(), 5, {})
    with torch.no_grad():
        hs_old = old(ids[:, :-1], return_hidden=True).hidden_states
        hs_new = new(ids[:, :-1], return_hidden=True).hidden_states
    want = [float(b.pow(2).mean().sqrt() / a.pow(2).mean().sqrt()) for a, b in zip(hs_old, hs_new)]
    assert logged[0]["step"] == 5 and logged[0]["rms_ratio_per_layer"] == pytest.approx(want, abs=1e-4)
    assert "symmetry_lock_mean" in logged[0]
    logged.clear()
    new2, _, _, res2 = grow(old, cfg, {"family": "width", "hidden": 96, "init": "random,random"}, None, 0)
    FakeTrainer.model = new2
    PostGrowthMonitor(res2.param_maps, ids, base)(FakeTrainer(), 6, {})
    assert "symmetry_lock_mean" not in logged[0] and len(logged[0]["rms_ratio_per_layer"]) == len(want)
