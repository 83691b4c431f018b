"""Issue 40 item 5, with real processes: a closed stdout never stops `nexus train` (the run finishes and
saves), and SIGINT / SIGTERM stop it at the next step boundary with a checkpoint and the command that
resumes it (exit 130 / 143)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
MICRO = [
    "--preset",
    "baseline-micro",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "2",
    "--train.eval_every",
    "0",
    "--train.eval_batches",
    "1",
    "--train.sample_tokens",
    "2",
    "--train.log_every",
    "1",
]


def nexus(*args, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "NEXUS_DISABLE_PLUGINS": "1"}
    return subprocess.Popen([sys.executable, "-m", "nexus", *map(str, args)], env=env, text=True, **kw)


def final_step(ckpt: Path) -> int:
    import torch

    return int(torch.load(ckpt / "trainer_state.pt", weights_only=True)["step"])


def test_closed_stdout_does_not_stop_training(tmp_path):
    """`nexus train ... | head -2`: the reader leaves after two lines; the run still trains every step,
    saves its final checkpoint and exits 0 (it ended at the first write after, with only config.yaml)."""
    out = tmp_path / "run"
    p = nexus("train", *MICRO, "--train.steps", "30", "--out", out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = [p.stdout.readline() for _ in range(2)]  # what `head -2` reads, then it goes away
    p.stdout.close()
    _, err = p.communicate(timeout=300)
    assert all(lines), lines
    assert p.returncode == 0, err
    assert final_step(out / "checkpoint") == 30
    steps = [json.loads(line).get("step") for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 30


def _wait_for_steps(out: Path, n: int, p: subprocess.Popen) -> None:
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline:
        assert p.poll() is None, p.communicate()[1]
        if metrics.is_file() and sum(1 for line in metrics.read_text().splitlines() if '"loss"' in line) >= n:
            return
        time.sleep(0.05)
    raise AssertionError("the run did not reach its first steps")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_at_the_next_step_and_prints_the_resume_command(tmp_path, sig, code):
    out = tmp_path / "run"
    p = nexus(
        "train",
        *MICRO,
        "--train.steps",
        "100000",
        "--train.save_every",
        "0",
        "--out",
        out,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _wait_for_steps(out, 2, p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert "resume with: nexus train --resume " in last, err
    ckpt = Path(last.split("--resume ", 1)[1])
    assert ckpt.parent == out and ckpt.name.startswith("step_")
    step = final_step(ckpt)
    assert step >= 2 and ckpt.name == f"step_{step:07d}"
    # the printed command continues that run (two more steps, to keep the test short)
    r = nexus(
        "train", "--resume", ckpt, "--train.steps", step + 2, "--quiet", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    rout, rerr = r.communicate(timeout=300)
    assert r.returncode == 0, rerr
    assert final_step(out / "checkpoint") == step + 2


def test_an_interrupted_experiment_says_to_run_its_command_again(capsys):
    """An experiment's runs resume when its command runs again; `nexus train --resume` is the hint for a run."""
    from nexus.cli import run_guarded
    from nexus.train.trainer import TrainingInterrupted

    def stop():
        raise TrainingInterrupted(signal.SIGTERM, 7, "runs/x/step_0000007")

    assert run_guarded("nexus experiment compare", stop) == 143
    err = capsys.readouterr().err.strip()
    assert err == (
        "nexus experiment compare: stopped by SIGTERM at step 7; checkpoint saved: runs/x/step_0000007; "
        "resume with: run the same command again"
    )
    assert run_guarded("nexus train", stop) == 143
    assert capsys.readouterr().err.strip().endswith("resume with: nexus train --resume runs/x/step_0000007")
