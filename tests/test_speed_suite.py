"""benchmarks/speed/speed_suite.py's plumbing: it gathers each benchmark's RESULT line into one table, refuses
bad input with exit 2, and writes its --out directory whole or not at all. The benchmarks themselves
are never timed here (speed is measured in benchmarks/, not in tests): a stand-in script emits a result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"  # the shared _result lives here
SPEED = BENCH / "speed"  # the suite and its scripts


@pytest.fixture
def suite(monkeypatch):
    monkeypatch.syspath_prepend(str(SPEED))
    import speed_suite

    return speed_suite


def test_result_line_round_trips(capsys, suite):
    import _result

    rec = _result.emit("x vs y", [1.2, 1.0, 1.6], ">= 1.1", met=True, raw=[1, 2])
    parsed = _result.parse("noise\n" + capsys.readouterr().out + "more noise\n")
    assert parsed == [rec]
    assert rec["value"] == 1.2 and rec["range"] == [1.0, 1.6] and rec["rounds"] == 3


def test_every_suite_script_exists_and_ends_with_a_result(suite):
    for name, (script, _, _) in suite.BENCHMARKS.items():
        text = (SPEED / script).read_text()
        assert "emit(" in text, f"{script} ({name}) prints no RESULT line for the suite to read"


def _stand_in(tmp_path, monkeypatch, suite, body: str):
    script = tmp_path / "fake_bench.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(BENCH)!r})\nfrom _result import emit\n{body}\n")
    monkeypatch.setattr(suite, "HERE", tmp_path)
    monkeypatch.setattr(suite, "BENCHMARKS", {"fake": ("fake_bench.py", ["--a"], ["--q"])})


def test_table_and_out_dir(tmp_path, monkeypatch, capsys, suite):
    _stand_in(
        tmp_path, monkeypatch, suite, "emit('fake ratio', [2.0, 3.0, 2.5], '>= 1.5', met=True, argv=sys.argv[1:])"
    )
    out = tmp_path / "results"
    monkeypatch.setattr(sys, "argv", ["speed_suite.py", "--out", str(out)])
    assert suite.main() == 0
    text = capsys.readouterr().out
    assert (
        "| fake ratio | 2.50x [2.00, 3.00] (3 rounds) | >= 1.5 | yes | `python benchmarks/speed/fake_bench.py --a` |"
        in text
    )
    saved = json.loads((out / "suite.json").read_text())
    assert saved["results"][0]["argv"] == ["--a"] and saved["failed"] == []
    assert sorted(p.name for p in out.iterdir()) == ["fake.log", "suite.json", "suite.md"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".results")] == []  # no temporary left


def test_a_benchmark_without_result_fails_the_suite(tmp_path, monkeypatch, capsys, suite):
    _stand_in(tmp_path, monkeypatch, suite, "print('crashed before its result'); sys.exit(3)")
    monkeypatch.setattr(sys, "argv", ["speed_suite.py", "--quick"])
    assert suite.main() == 1
    assert "failed (no RESULT line or nonzero exit): fake" in capsys.readouterr().out


@pytest.mark.parametrize("argv, field", [(["--only", "ternary,nope"], "--only="), (["--out", "EXISTING"], "--out=")])
def test_bad_input_is_one_line_exit_2(tmp_path, argv, field):
    argv = [str(tmp_path) if a == "EXISTING" else a for a in argv]
    proc = subprocess.run([sys.executable, str(SPEED / "speed_suite.py"), *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and field in proc.stderr and "valid:" in proc.stderr
    assert proc.stdout == ""


def test_quick_run_claims_no_verdict(tmp_path, monkeypatch, capsys, suite):
    _stand_in(tmp_path, monkeypatch, suite, "emit('fake ratio', [0.5], '>= 1.5', met=False)")
    monkeypatch.setattr(sys, "argv", ["speed_suite.py", "--quick"])
    assert suite.main() == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| fake ratio"))
    assert "n/a (--quick)" in row and "**no**" not in row  # shorter runs are not the target's settings


def test_out_dir_appearing_during_the_run_is_not_replaced_and_results_are_kept(tmp_path, monkeypatch, capsys, suite):
    out = tmp_path / "results"
    _stand_in(
        tmp_path,
        monkeypatch,
        suite,
        f"import os\nos.makedirs({str(out)!r})\nemit('fake ratio', [2.0], '>= 1.5', met=True)",
    )
    monkeypatch.setattr(sys, "argv", ["speed_suite.py", "--out", str(out)])
    assert suite.main() == 2
    assert list(out.iterdir()) == []  # the directory that appeared is left alone
    err = capsys.readouterr().err
    kept = Path(err.strip().rsplit(" ", 1)[-1])
    assert kept.parent == tmp_path and (kept / "suite.md").is_file() and (kept / "fake.log").is_file()
