"""benchmarks/speed/gpu_mfu.py's plumbing, checkable without a GPU: the device-name lookup of the data-sheet
peak, the 124M model it builds, and one tiny CPU run that ends with a RESULT line (nothing is timed or
compared against a speed here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "speed"


@pytest.fixture
def gpu_mfu(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import gpu_mfu

    return gpu_mfu


@pytest.mark.parametrize(
    "name, tflops",
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.4),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("Some Future GPU", None),
    ],
)
def test_data_sheet_peak_by_device_name(gpu_mfu, monkeypatch, name, tflops):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert gpu_mfu.spec_peak_tflops(torch.device("cuda")) == tflops
    assert gpu_mfu.spec_peak_tflops(torch.device("cuda"), torch.float32) is None  # a bf16 peak only holds bf16 runs


def test_default_model_is_the_124m_tied_baseline(gpu_mfu):
    from nexus.models.accounting import build_on_meta

    cfg = gpu_mfu.model_config(gpu_mfu.parse_args([]))  # what the script trains when given no flags
    n = sum(p.numel() for p in build_on_meta(cfg).parameters())
    assert 120e6 < n < 128e6, n  # GPT-2-small scale, the size peers quote MFU at


@pytest.mark.slow  # runs the GPU MFU script end to end on CPU (~14 s); run with -m slow
def test_tiny_cpu_run_emits_a_result():
    sys.path.insert(0, str(BENCH.parent))  # benchmarks/: the shared _result
    from _result import parse

    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "gpu_mfu.py"),
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--no-compile",
            "--d-model",
            "64",
            "--layers",
            "2",
            "--vocab",
            "512",
            "--seq",
            "32",
            "--batch",
            "2",
            "--steps",
            "1",
            "--rounds",
            "2",
            "--peak-n",
            "128",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = parse(proc.stdout)
    assert rec["rounds"] == 2 and rec["unit"] == "fraction" and 0 < rec["value"]
    assert "no data-sheet bf16 peak" in rec["target"]  # a CPU has no tensor-core peak: no MFU claimed
