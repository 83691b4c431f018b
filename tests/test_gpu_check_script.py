"""tools/gpu_check.py's plumbing, checkable without a GPU: the stages it runs on the GPU fit the
8-minute budget and select the CUDA tests, the package hiding of its dry run really hides a package,
and pytest's closing line is read back into counts. (The whole dry run takes minutes on the shared
CPU: `python tools/gpu_check.py --out DIR --dry-run`, recorded in benchmarks/README.md.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _value(cmd: list[str], flag: str) -> str:
    """The value after the last `flag` of a command (python's own -m comes first)."""
    return cmd[len(cmd) - 1 - cmd[::-1].index(flag) + 1]


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    monkeypatch.syspath_prepend(str(BENCH / "studies"))  # gpu_check adds it at its first import only
    import gpu_check

    return gpu_check


def test_gpu_stages_select_the_cuda_tests_and_fit_eight_minutes(gpu_check, tmp_path):
    stages = gpu_check.stage_plan(dry=False, out=tmp_path)
    assert sum(s["timeout"] for s in stages) < 8 * 60
    tests, mfu, train, big, growth = stages
    assert _value(tests["cmd"], "-m") == "cuda" and tests["cmd"][-1].endswith("tests/test_cuda.py")
    assert mfu["cmd"][1].endswith("gpu_mfu.py") and "--vs-hf" in mfu["cmd"]  # the 124M step beside HF's
    assert int(_value(mfu["cmd"], "--vs-chunked")) > 0  # and beside the chunked loss's
    assert _value(big["cmd"], "--preset") == gpu_check.PRESET_450M
    from nexus.presets import get_preset

    assert ("--untied" in big["cmd"]) == (
        not get_preset(gpu_check.PRESET_450M).model.tie_embeddings
    )  # as the preset is
    assert tuple(growth["workers"]) == (1, 4, 12)
    # the growth sample's windows (and the time to stop them) fit the stage's budget
    assert len(growth["workers"]) * growth["window"] < growth["timeout"]
    dry = gpu_check.stage_plan(dry=True, out=tmp_path)
    assert _value(dry[0]["cmd"], "-m") == "not slow and not cuda"  # the CPU variants of the same tests
    assert _value(dry[1]["cmd"], "--device") == _value(dry[2]["cmd"], "--train.device") == "cpu"
    assert [s["kind"] for s in dry] == [s["kind"] for s in stages]  # the dry run walks the same stages


def test_the_trainer_stage_trains_the_bare_steps_shape(gpu_check, tmp_path, monkeypatch):
    """The Trainer's tokens/s compares with gpu_mfu's bare step only on the same model, batch and settings:
    the stage's overrides are checked against gpu_mfu.py's own defaults, and the vocabulary is the one the
    stage's tokenizer file really has."""
    monkeypatch.syspath_prepend(str(BENCH / "speed"))
    import gpu_mfu

    bare = gpu_mfu.parse_args([])
    cmd = gpu_check.trainer_command(tmp_path, dry=False)
    assert (
        _value(cmd, "--preset") == bare.preset and _value(cmd, "--model.tie_embeddings") == str(not bare.untied).lower()
    )
    assert int(_value(cmd, "--data.seq_len")) == bare.seq and int(_value(cmd, "--train.batch_size")) == bare.batch
    assert _value(cmd, "--train.dtype") == bare.dtype and _value(cmd, "--train.compile") == "true"
    assert _value(cmd, "--train.device") == bare.device
    gpu_check.write_token_data(tmp_path / "trainer-data", gpu_check.SHAPE["vocab"], 1000)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(_value(cmd, "--data.tokenizer"))
    assert tok.get_vocab_size() == gpu_check.SHAPE["vocab"] == gpu_mfu.model_config(bare).vocab_size
    import numpy as np

    ids = np.fromfile(_value(cmd, "--data.source"), dtype=np.uint16)
    assert ids.size == 1000 and int(ids.max()) < gpu_check.SHAPE["vocab"]


def test_the_trainer_figures_leave_out_the_compiling_window(gpu_check, tmp_path):
    run = tmp_path / "trainer-run"
    run.mkdir()
    rows = [
        {"step": 10, "loss": 9.0, "processed_tokens_per_s": 5_000.0},
        {"step": 20, "loss": 8.0, "processed_tokens_per_s": 400_000.0},
        {"step": 30, "loss": 7.5, "processed_tokens_per_s": 500_000.0},
        {"step": 30, "val_loss": 7.6, "final": True},
    ]
    (run / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    figs = gpu_check.trainer_figures(tmp_path, flops_per_token=1e9, spec_tflops=1000.0)
    assert figs["tokens_per_s"] == [400_000, 500_000] and figs["median_tokens_per_s"] == 450_000
    assert figs["mfu"] == 0.45  # 450k tokens/s x 1 GFLOP / 1000 TFLOP/s


def test_growth_rates_are_steady_state_steps_per_second(gpu_check, tmp_path):
    for name, rows in {"a": [(10, 3.0), (20, 4.0), (40, 6.0)], "b": [(10, 9.0)]}.items():  # b: one log, no rate
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 1.0, "elapsed_s": e}) + "\n" for s, e in rows)
            + json.dumps({"step": 40, "val_loss": 1.0, "elapsed_s": 99.0})
            + "\n"
        )
    assert gpu_check.run_rates(tmp_path) == [10.0]  # (40 - 10) steps in (6 - 3) s; evaluation rows ignored


def test_a_window_stops_the_whole_process_group(gpu_check, tmp_path):
    """The growth sample's processes start worker processes of their own: stopping the window stops them too."""
    pid_file = tmp_path / "grandchild.pid"
    cmd = ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"]
    wall = gpu_check.run_window(cmd, dict(os.environ), 1.0, tmp_path / "w.log")
    assert 1.0 <= wall < 30
    status = Path(f"/proc/{int(pid_file.read_text())}/status")
    time.sleep(0.2)
    # gone, or a zombie waiting for its reaper (a dead process whose parent was stopped with it)
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_plan_runs_nothing_and_sizes_the_regime_at_five_seeds(gpu_check, tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "o"), "--plan"]) == 0
    text = capsys.readouterr().out
    assert not (tmp_path / "o").exists()
    assert "stage timeouts add up to" in text and "--seeds 0,1,2,3,4" in text
    sample = {
        "1": {"steps_per_s_per_process": 50.0},
        "12": {"steps_per_s_per_process": 20.0},
        "4": {"steps_per_s_per_process": None},
    }
    plan = gpu_check.regime_gpu_plan(sample)
    assert 120_000 < plan["training_steps"] < 130_000  # the "about 124k training steps"
    # projected from the most processes measured, at their own rate
    assert plan["projected_minutes"] == round(plan["training_steps"] / (12 * 20.0) / 60, 1)
    assert "projected_minutes" not in gpu_check.regime_gpu_plan({"4": {"steps_per_s_per_process": None}})


def test_dry_run_hides_the_packages_the_gpu_image_lacks(gpu_check, tmp_path):
    where = gpu_check.hide_packages(("json",), tmp_path / "hide")
    env = {"PYTHONPATH": where, "PATH": "/usr/bin:/bin"}
    hidden = subprocess.run([sys.executable, "-c", "import json"], env=env, capture_output=True, text=True)
    assert hidden.returncode != 0 and "hidden by gpu_check" in hidden.stderr
    assert subprocess.run([sys.executable, "-c", "import csv"], env=env).returncode == 0  # only what was named


def test_pytest_closing_line_is_read_into_counts(gpu_check):
    text = "....s\n===== 24 passed, 3 skipped, 1 failed, 27 deselected in 150.61s (0:02:30) =====\n"
    assert gpu_check.pytest_counts(text) == {"passed": 24, "skipped": 3, "failed": 1, "deselected": 27}


def test_the_trainers_overhead_is_its_tokens_per_s_over_the_bare_steps(gpu_check):
    stages = [
        {"name": "cuda tests", "counts": {"passed": 3}},
        {
            "name": "gpu_mfu",
            "results": [
                {"name": "vs HF", "value": 1.2},
                {"name": "training MFU", "tokens_per_s": [400.0, 500.0, 480.0]},
            ],
        },
        {"name": "Trainer on the bare step's shape", "figures": {"median_tokens_per_s": 456}},
    ]
    gpu_check.trainer_vs_bare(stages)
    assert stages[2]["figures"]["vs_bare_step"] == 0.95  # 456 / the bare step's median 480
