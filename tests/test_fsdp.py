"""FSDP2 on CPU (gloo, world size 2): the same per-step losses as one process with the same global
batch (activation checkpointing on), sharded checkpoints resumable at another world size (2 -> 1 and
1 -> 2), consolidation into the single-process safetensors format, growth mid-training under FSDP2,
and a failing rank ending every rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from test_distributed import _env  # the same launcher environment as the DDP tests
from tolerance_guard import atol_for

from nexus.cli import main
from nexus.config_overrides import parse_overrides
from nexus.presets import get_preset
from nexus.train.trainer import Trainer

RUN = [
    "--train.steps",
    "4",
    "--train.log_every",
    "1",
    "--train.eval_every",
    "2",
    "--train.eval_batches",
    "2",
    "--train.grad_accum",
    "2",
    "--train.sample_tokens",
    "4",
    "--train.warmup_steps",
    "2",
    "--model.d_model",
    "32",
    "--model.n_layers",
    "2",
    "--data.seq_len",
    "32",
    "--train.save_every",
    "2",
]
PER_RANK_BATCH = 2
GROW = [
    "--train.hooks",
    "[{kind: growth, at: 2, spec: {family: width, hidden: 48, init: [copy, copy], preserve: rms}}]",
]


def _torchrun(tmp_path, args, timeout=300):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "nexus",
        "train",
        "--quiet",
        "--train.parallel",
        "fsdp2",
        *args,
    ]
    proc = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _single(tmp_path, out, extra=(), resume=None):
    os.environ["NEXUS_CACHE"] = str(tmp_path / "cache")
    cfg = parse_overrides(
        get_preset("baseline-micro"),
        RUN + ["--train.batch_size", str(2 * PER_RANK_BATCH), "--train.out_dir", str(out), *extra],
    )
    return Trainer(cfg.validate(), resume=resume, quiet=True).fit()


def _losses(run_dir):
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return ({r["step"]: r["loss"] for r in rows if "loss" in r}, [r["val_loss"] for r in rows if "val_loss" in r])


def _close(a: dict, b: dict, steps):
    assert sorted(a) == sorted(b) == list(steps), (sorted(a), sorted(b))
    for s in steps:
        assert abs(a[s] - b[s]) < 1e-5, (s, a[s], b[s])


def test_fsdp2_matches_one_process_and_resumes_and_consolidates_at_world_size_one(tmp_path, capsys, monkeypatch):
    fsdp, ref = tmp_path / "fsdp", tmp_path / "ref"
    _torchrun(
        tmp_path,
        [
            "--preset",
            "baseline-micro",
            *RUN,
            "--train.batch_size",
            str(PER_RANK_BATCH),
            "--train.activation_checkpointing",
            "true",
            "--train.out_dir",
            str(fsdp),
        ],
    )
    _single(tmp_path, ref)
    (lf, vf), (lr, vr) = _losses(fsdp), _losses(ref)
    _close(lf, lr, range(1, 5))
    assert len(vf) == len(vr) == 2 and max(abs(a - b) for a, b in zip(vf, vr)) < 1e-5
    assert (fsdp / "checkpoint" / "sharded").is_dir() and not (fsdp / "checkpoint" / "model.safetensors").exists()

    # --resume auto finds the newest sharded checkpoint by its step, without reading the shards
    import nexus.checkpoint as C
    from nexus.train import run_dir as R

    with monkeypatch.context() as mp:
        mp.setattr(C, "load_sharded", lambda *a, **k: pytest.fail("a step lookup read the optimizer shards"))
        assert R.latest_checkpoint(fsdp) == fsdp / "checkpoint"

    # 2 -> 1: one process resumes the sharded step-2 checkpoint and continues exactly
    resumed = tmp_path / "resumed"
    _single(tmp_path, resumed, resume=str(fsdp / "step_0000002"))
    _close(_losses(resumed)[0], {s: lr[s] for s in (3, 4)}, (3, 4))

    # consolidation into the single-process format: same weights and optimizer state as the 1-process run
    out = tmp_path / "consolidated"
    assert (
        main(["export", "--checkpoint", str(fsdp / "checkpoint"), "--format", "consolidated", "--out", str(out)]) == 0
    )
    from nexus.checkpoint import load_checkpoint, load_trainer_state

    m_c, _, _ = load_checkpoint(out)
    m_r, _, _ = load_checkpoint(ref / "checkpoint")
    assert (out / "model.safetensors").is_file() and not (out / "sharded").exists()
    for (n, a), b in zip(m_c.state_dict().items(), m_r.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=n)
    st_c, st_r = load_trainer_state(out), load_trainer_state(ref / "checkpoint")
    assert st_c["step"] == st_r["step"] == 4
    for name, st in st_r["optimizer"]["state"].items():
        torch.testing.assert_close(
            st_c["optimizer"]["state"][name]["exp_avg"], st["exp_avg"], atol=atol_for(st["exp_avg"], 1e-3), rtol=1e-4
        )  # moments ~1e-5

    # a damaged shard: one line, exit 2 (the checksums in meta.json cover the shard files)
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(fsdp / "step_0000002", bad)
    shard = next((bad / "sharded").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-16])
    for cmd in (
        ["generate", "--checkpoint", str(bad), "--max-new-tokens", "2"],
        ["export", "--checkpoint", str(bad), "--format", "consolidated", "--out", str(tmp_path / "c2")],
    ):
        capsys.readouterr()
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "corrupted" in err[0], err
    assert not (tmp_path / "c2").exists()


@pytest.mark.slow  # two FSDP2 processes (~20 s); FSDP2 resume 2->1 stays in the default suite; run with -m slow
def test_one_process_checkpoint_resumes_under_fsdp2(tmp_path):
    ref, fsdp = tmp_path / "ref", tmp_path / "fsdp"
    _single(tmp_path, ref)
    _torchrun(
        tmp_path,
        [
            "--resume",
            str(ref / "step_0000002"),
            *RUN,
            "--train.batch_size",
            str(PER_RANK_BATCH),
            "--train.out_dir",
            str(fsdp),
        ],
    )
    _close(_losses(fsdp)[0], {s: _losses(ref)[0][s] for s in (3, 4)}, (3, 4))


@pytest.mark.slow  # two FSDP2 processes (~25 s); growth under DDP stays in the default suite; run with -m slow
def test_growth_mid_training_under_fsdp2_matches_one_process(tmp_path):
    """Width growth at step 2: gather, grow (optimizer-state surgery, per-element steps), reshard."""
    fsdp, ref = tmp_path / "fsdp", tmp_path / "ref"
    _torchrun(
        tmp_path,
        [
            "--preset",
            "baseline-micro",
            *RUN,
            *GROW,
            "--train.batch_size",
            str(PER_RANK_BATCH),
            "--train.out_dir",
            str(fsdp),
        ],
    )
    _single(tmp_path, ref, GROW)
    _close(_losses(fsdp)[0], _losses(ref)[0], range(1, 5))
    cfg = json.loads((fsdp / "checkpoint" / "config.json").read_text())
    assert cfg["model"]["d_model"] == 48 and cfg["growth_history"][0]["step"] == 2


def test_fsdp2_with_muon_is_a_one_line_error(tmp_path, capsys):
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--train.parallel",
            "fsdp2",
            "--train.optimizer",
            "muon",
            "--train.out_dir",
            str(tmp_path / "r"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "train.optimizer='muon'" in err[0] and not (tmp_path / "r").exists()


@pytest.mark.slow  # two FSDP2 processes (~22 s); the DDP failing-rank test stays in the default suite; run with -m slow
def test_a_failing_rank_ends_every_fsdp2_rank(tmp_path):
    """Ranks launched one process each (no torchrun agent to kill the survivors): rank 1 raises at
    step 3; rank 0, blocked in an FSDP2 all-gather, must fail by the collective timeout (60 s here)."""
    from test_distributed import run_two_ranks_where_rank1_fails

    out = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "baseline-micro",
        "--quiet",
        *RUN,
        "--train.batch_size",
        "2",
        "--train.parallel",
        "fsdp2",
        "--train.save_every",
        "0",
        "--train.out_dir",
        str(out),
    ]
    codes, errs = run_two_ranks_where_rank1_fails(tmp_path, args, timeout=180)
    assert "injected failure on rank 1" in errs[1]
    assert codes[0] != 0 and codes[1] != 0, (codes, errs[0][-2000:])
    assert not (out / "checkpoint").exists()


def test_damaged_sharded_checkpoint_is_a_one_line_error(tmp_path, capsys):
    ref = tmp_path / "ref"
    _single(tmp_path, ref)
    rc = main(
        ["export", "--checkpoint", str(ref / "checkpoint"), "--format", "consolidated", "--out", str(tmp_path / "c")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not a sharded" in err[0] and not (tmp_path / "c").exists()


NAN_AT_STEP_2 = """
import sys
from nexus.models import lm_loss as loss_module
from nexus.train import trainer

real_loss, real_step, state = loss_module.lm_loss, trainer.Trainer.train_step, {"poison": False}

def lm_loss(out, labels, z_loss):
    out = real_loss(out, labels, z_loss)
    if state["poison"]:
        out.loss = out.loss * float("nan")
    return out

def train_step(self, step):  # every rank's loss is NaN at step 2: the step must be skipped everywhere
    state["poison"] = step == 1
    try:
        return real_step(self, step)
    finally:
        state["poison"] = False

loss_module.lm_loss = lm_loss
trainer.Trainer.train_step = train_step
import nexus.models.transformer as T
T.lm_loss = lm_loss
from nexus.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # two FSDP2 processes (~35 s); the one-process skip is in the default suite; run with -m slow
def test_a_nonfinite_step_is_skipped_on_the_device_under_fsdp2(tmp_path):
    """The skip decision stays a device tensor (fused AdamW's found_inf on DTensor shards): the NaN
    step changes nothing, and every other step matches one process with the same poisoned step."""
    script = tmp_path / "nan_step2.py"
    script.write_text(NAN_AT_STEP_2)
    fsdp, ref = tmp_path / "fsdp", tmp_path / "ref"
    args = ["train", "--preset", "baseline-micro", "--quiet", *RUN, "--train.save_every", "0"]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        *args,
        "--train.batch_size",
        str(PER_RANK_BATCH),
        "--train.parallel",
        "fsdp2",
        "--train.out_dir",
        str(fsdp),
    ]
    proc = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            *args,
            "--train.batch_size",
            str(2 * PER_RANK_BATCH),
            "--train.out_dir",
            str(ref),
        ],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows_f = [json.loads(l) for l in (fsdp / "metrics.jsonl").read_text().splitlines()]
    rows_r = [json.loads(l) for l in (ref / "metrics.jsonl").read_text().splitlines()]
    skipped_f = [r["step"] for r in rows_f if r.get("skipped")]
    assert skipped_f == [r["step"] for r in rows_r if r.get("skipped")] == [2]
    lf = {r["step"]: r["loss"] for r in rows_f if "loss" in r and not r.get("skipped")}
    lr = {r["step"]: r["loss"] for r in rows_r if "loss" in r and not r.get("skipped")}
    _close(lf, lr, (1, 3, 4))


def test_fsdp2_asked_at_world_size_one_says_it_trains_unsharded(tmp_path, monkeypatch):
    """FSDP2 needs ranks to shard across: one process trains plain, and says so instead of silently."""
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    cfg = parse_overrides(get_preset("baseline-micro"), RUN + ["--train.out_dir", str(tmp_path / "o")])
    assert not any("fsdp2" in n for n in Trainer(cfg.validate(), quiet=True).notes)
    cfg = parse_overrides(
        get_preset("baseline-micro"), RUN + ["--train.out_dir", str(tmp_path / "p"), "--train.parallel", "fsdp2"]
    )
    t = Trainer(cfg.validate(), quiet=True)
    assert [n for n in t.notes if "fsdp2" in n] == [
        "train.parallel=fsdp2 at world size 1: training unsharded (FSDP2 shards across ranks; launch with torchrun "
        "--nproc_per_node N to shard)"
    ]
