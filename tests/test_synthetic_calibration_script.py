"""benchmarks/studies/synthetic_calibration.py runs its default order (1, the standard model the calibration is
for): order 1 once reached the higher-order kind, which takes orders >= 2 only, so the script's default run
stopped with a config error before training. A tiny run of orders 1 and 2 ends with one RESULT line each."""

from __future__ import annotations

import sys

from benchmark_module import BENCHMARKS, load_benchmark


def test_default_order_1_and_order_2_run_and_each_ends_with_a_result(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    script = load_benchmark("studies/synthetic_calibration.py")
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "synthetic_calibration.py",
            "--orders",
            "1",
            "2",
            "--steps",
            "2",
            "--every",
            "1",
            "--d",
            "16",
            "--layers",
            "1",
            "--heads",
            "1",
            "--seq",
            "32",
            "--bs",
            "2",
        ],
    )
    script.main()
    import _harness

    records = _harness.parse(capsys.readouterr().out)
    assert [r["name"].split(": ")[0].rsplit(" ", 1)[-1] for r in records] == ["1", "2"]
    assert all(0.0 <= r["value"] <= 1.0 and len(r["curve"]) == 2 for r in records)
