"""benchmarks/gpu_check.py's plumbing, checkable without a GPU: the stages it runs on the GPU fit the
8-minute budget and select the CUDA tests, the package hiding of its dry run really hides a package,
and pytest's closing line is read back into counts. (The whole dry run takes minutes on the shared
CPU: `python benchmarks/gpu_check.py --out DIR --dry-run`, recorded in benchmarks/README.md.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _value(cmd: list[str], flag: str) -> str:
    """The value after the last `flag` of a command (python's own -m comes first)."""
    return cmd[len(cmd) - 1 - cmd[::-1].index(flag) + 1]


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import gpu_check

    return gpu_check


def test_gpu_stages_select_the_cuda_tests_and_fit_eight_minutes(gpu_check, tmp_path):
    stages = gpu_check.stage_plan(dry=False, out=tmp_path)
    assert sum(s["timeout"] for s in stages) < 8 * 60
    tests, mfu, main = (s["cmd"] for s in stages)
    assert _value(tests, "-m") == "cuda" and tests[-1].endswith("tests/test_cuda.py")
    assert mfu[-1].endswith("gpu_mfu.py")  # the script's own defaults: 124M tied, bf16, compiled
    assert _value(main, "--train.device") == "cuda"
    tests, mfu, main = (s["cmd"] for s in gpu_check.stage_plan(dry=True, out=tmp_path))
    assert _value(tests, "-m") == "not slow and not cuda"  # the CPU variants of the same tests
    assert _value(mfu, "--device") == _value(main, "--train.device") == "cpu"


def test_dry_run_hides_the_packages_the_gpu_image_lacks(gpu_check, tmp_path):
    where = gpu_check.hide_packages(("json",), tmp_path / "hide")
    env = {"PYTHONPATH": where, "PATH": "/usr/bin:/bin"}
    hidden = subprocess.run([sys.executable, "-c", "import json"], env=env, capture_output=True, text=True)
    assert hidden.returncode != 0 and "hidden by gpu_check" in hidden.stderr
    assert subprocess.run([sys.executable, "-c", "import csv"], env=env).returncode == 0  # only what was named


def test_pytest_closing_line_is_read_into_counts(gpu_check):
    text = "....s\n===== 24 passed, 3 skipped, 1 failed, 27 deselected in 150.61s (0:02:30) =====\n"
    assert gpu_check.pytest_counts(text) == {"passed": 24, "skipped": 3, "failed": 1, "deselected": 27}
