"""Issue 46: a study's ledger is trusted only as nexus wrote it, and the study runner stops cleanly.

- a run directory's done.json is believed only as its manifest recorded it (an edited val_loss, another lr's
  done.json copied in: refused in one line, never recorded under the wrong run);
- a ledger record carries its own digest and a well-formed shape: `[]`, a val_loss "n/a", no `final`, an edited
  val_loss: each refused in one line naming the file;
- a run whose metrics.jsonl was cut short is refused, not recorded with a short curve;
- SIGTERM to the study runner (two workers) ends in one line with the command that continues it, leaves no worker
  behind, and the continued study ends with the results of one never stopped; kill -9 of the runner takes its
  workers with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchmark_module import BENCHMARKS, load_benchmark

from nexus.config import ConfigError
from nexus.config_migration import saved_run_config
from nexus.experiments import ledger as L
from nexus.experiments.runs import run_resumable

STUDY = BENCHMARKS / "studies" / "regime_study.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("studies/progressive_regime.py")


@pytest.fixture(scope="module")
def two_runs(bench, tmp_path_factory):
    """Two finished lr-grid runs of the small model (smoke scale) and their ledger records."""
    out = tmp_path_factory.mktemp("grid")
    plan = bench.plan_sweep(["sparkling"], "smoke", "embedded", out / "runs", [0.016, 0.032])
    runs = {k: r for k, r in plan["runs"].items() if r["shape"] == "small"}
    ledger = L.Ledger(out / "ledger")
    L.execute(runs, 1, 1, lambda s: None, ledger, plan["tokens_per_step"])
    return runs, ledger, plan["tokens_per_step"]


def _dir(run) -> Path:
    return Path(run["cfg"]["train"]["out_dir"])


def _rerun(run):
    return run_resumable(saved_run_config(json.loads(json.dumps(run["cfg"]))), _dir(run), say=lambda *_: None)


def _one_line_refusal(fn, *needles):
    with pytest.raises(ConfigError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    return msg


def test_an_edited_or_copied_done_json_is_refused_not_recorded(two_runs, tmp_path):
    runs, ledger, tps = two_runs
    (a, ra), (b, rb) = sorted(runs.items())
    assert _rerun(ra)["val_loss"] == ledger.final_val_loss(a)  # untouched: the finished run is reused
    done_b = (_dir(rb) / "done.json").read_text()
    try:
        edited = json.loads(done_b)
        edited["val_loss"] = 0.5
        (_dir(rb) / "done.json").write_text(json.dumps(edited))
        _one_line_refusal(lambda: _rerun(rb), "done.json", "changed since")
        (_dir(rb) / "done.json").write_text((_dir(ra) / "done.json").read_text())  # another lr's result copied in
        _one_line_refusal(lambda: _rerun(rb), "done.json", str(_dir(rb)))
        fresh = L.Ledger(tmp_path / "ledger")
        _one_line_refusal(lambda: fresh.record(b, rb["cfg"], json.loads(done_b), _dir(rb), tps), "done.json")
        assert fresh.names() == []  # nothing recorded under the wrong run
    finally:
        (_dir(rb) / "done.json").write_text(done_b)
    assert _rerun(rb)["val_loss"] == ledger.final_val_loss(b)  # restored: trusted again


def test_a_truncated_metrics_log_is_refused_not_recorded_with_a_short_curve(two_runs, tmp_path):
    runs, ledger, tps = two_runs
    name, run = sorted(runs.items())[0]
    log = _dir(run) / "metrics.jsonl"
    text = log.read_text()
    try:
        log.write_text("\n".join(text.splitlines()[:1]) + "\n")
        fresh = L.Ledger(tmp_path / "ledger")
        _one_line_refusal(lambda: fresh.record(name, run["cfg"], {"val_loss": 1.0}, _dir(run), tps), "metrics.jsonl")
        assert fresh.names() == []
    finally:
        log.write_text(text)


def test_each_record_carries_its_digest_and_the_run_outputs_hashes(two_runs):
    runs, ledger, _ = two_runs
    for name in runs:
        rec = json.loads(ledger.path(name).read_text())
        assert rec[L.DIGEST] == L.record_digest(rec)
        assert set(rec["run_outputs"]) == {"done.json", "metrics.jsonl"}
        assert rec["val_curve"][-1]["step"] == rec["config"]["train"]["steps"]


@pytest.mark.parametrize(
    "forge, needle",
    [
        (lambda r: [], "list"),
        (lambda r: {**r, "final": {**r["final"], "val_loss": "n/a"}}, "'n/a'"),
        (lambda r: {k: v for k, v in r.items() if k != "final"}, "'final'"),
        (lambda r: {**r, "final": {**r["final"], "val_loss": 0.5}}, "digest"),  # the tuning-flipping edit
        (lambda r: {**r, "val_curve": []}, "no point"),
        (lambda r: {k: v for k, v in r.items() if k != L.DIGEST}, "no digest"),
        (lambda r: L.seal({**r, "name": "seed9/other"}), "not"),  # a sealed record of another run copied in
    ],
)
def test_a_record_that_fails_its_check_is_refused_in_one_line_naming_the_file(two_runs, tmp_path, forge, needle):
    runs, ledger, _ = two_runs
    name, run = sorted(runs.items())[0]
    other = L.Ledger(tmp_path / "l")
    p = other.path(name)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(forge(ledger.read(name))))
    msg = _one_line_refusal(lambda: other.holds(name, run["cfg"]), str(p), needle)
    assert "refused" in msg
    _one_line_refusal(lambda: other.final_val_loss(name), str(p))


def test_the_committed_ledgers_records_all_check_out():
    """Every committed record is sealed and well formed (tools/ledger_seal.py sealed those from before digests)."""
    for root in (BENCHMARKS / "results").iterdir():
        if (root / L.RUNS).is_dir():
            ledger = L.Ledger(root)
            for name in ledger.names():
                assert ledger.read(name)["name"] == name


# ----------------------------------------------------------------------------- signals and workers
def _children(pid: int) -> set[int]:
    """Every live descendant of `pid`."""
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids |= {int(d.name)} | _children(int(d.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _study(tmp_path: Path, *extra) -> list[str]:
    return [
        sys.executable,
        str(STUDY),
        "--scale",
        "smoke",
        "--parts",
        "tune",
        "--lrs",
        "0.016,0.032,0.008",
        "--results",
        str(tmp_path / "res"),
        "--out",
        str(tmp_path / "runs"),
        *extra,
    ]


def _wait_for_records(tmp_path: Path, n: int, p: subprocess.Popen, limit: float = 240) -> None:
    t0 = time.time()
    while len(list((tmp_path / "res").rglob("seed*.json"))) < n:
        assert p.poll() is None, p.communicate()
        assert time.time() - t0 < limit, "no run finished in time"
        time.sleep(0.2)


def _sigterm_a_two_worker_study(tmp_path: Path) -> int:
    """SIGTERM once the first run is in the ledger: one stderr line naming the command that continues the study,
    exit 143, no worker left. Returns how many runs the ledger holds."""
    p = subprocess.Popen(
        _study(tmp_path, "--workers", "2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    _wait_for_records(tmp_path, 1, p)
    workers = _children(p.pid)
    assert workers, "the study runs its runs in worker processes"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, (out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert "continue with:" in lines[0] and str(STUDY) in lines[0] and "nexus train --resume" not in lines[0]
    time.sleep(0.5)
    assert not [w for w in workers if _alive(w)], "a worker outlived the study"
    return len(list((tmp_path / "res").rglob("seed*.json")))


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc for the runner's workers")
def test_sigterm_stops_a_two_worker_study_in_one_line_without_orphans(tmp_path):
    held = _sigterm_a_two_worker_study(tmp_path)
    ledger = L.Ledger(tmp_path / "res" / "progressive-regime")
    assert len(ledger.names()) == held >= 1 and all(ledger.read(n)["name"] == n for n in ledger.names())
    # what it left continues: the same command's estimate counts the held runs as done
    est = subprocess.run(
        [*_study(tmp_path), "--estimate", "--timing-steps", "1"], capture_output=True, text=True, cwd=tmp_path
    )
    row = next(line.split() for line in est.stdout.splitlines() if line.startswith("tune "))
    assert est.returncode == 0 and row[1:4] == ["12", str(held), str(12 - held)], est.stdout


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc for the runner's workers")
def test_a_study_stopped_by_sigterm_continues_to_the_results_of_one_never_stopped(tmp_path):
    held = _sigterm_a_two_worker_study(tmp_path)
    cont = subprocess.run(_study(tmp_path, "--workers", "2"), capture_output=True, text=True, cwd=tmp_path)
    assert cont.returncode == 0, cont.stderr
    assert f"{held} of 12 runs already there" in cont.stdout
    recs = {
        q.relative_to(tmp_path / "res").as_posix(): json.loads(q.read_text())["final"]["val_loss"]
        for q in (tmp_path / "res").rglob("seed*.json")
    }
    assert len(recs) == 12
    # the same study never stopped, alone in one process: the same losses to the last bit
    ref = tmp_path / "ref"
    ref.mkdir()
    subprocess.run(_study(ref), capture_output=True, text=True, cwd=ref, check=True)
    assert recs == {
        q.relative_to(ref / "res").as_posix(): json.loads(q.read_text())["final"]["val_loss"]
        for q in (ref / "res").rglob("seed*.json")
    }


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc for the runner's workers")
def test_kill_9_of_the_study_runner_takes_its_workers_with_it(tmp_path):
    p = subprocess.Popen(
        _study(tmp_path, "--workers", "2"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path
    )
    _wait_for_records(tmp_path, 1, p)
    workers = _children(p.pid)
    assert workers
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    t0 = time.time()
    while [w for w in workers if _alive(w)] and time.time() - t0 < 20:
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left, "workers outlived a kill -9 of their study"


def test_a_grown_runs_record_keeps_its_last_symmetry_lock():
    rows = [
        {"step": 5, "loss": 2.0},
        {"step": 5, "symmetry_lock_mean": 1.0, "symmetry_lock_min": 1.0},
        {"step": 9, "symmetry_lock_mean": 0.97, "symmetry_lock_min": 0.9, "rms_ratio_max_dev": 0.02},
    ]
    assert L.last_growth_diagnostics(rows) == {
        "final_symmetry_lock_mean": 0.97,
        "final_symmetry_lock_min": 0.9,
        "final_rms_ratio_max_dev": 0.02,
    }
    assert L.last_growth_diagnostics([{"step": 1, "loss": 3.0}]) == {}


def test_the_live_rate_is_steps_each_run_trained_over_its_wall_time(tmp_path):
    """Issue 47 item 6: the estimate says the rate runs really got under load (a branch counts its own steps)."""
    study = load_benchmark("studies/regime_study.py")
    ledger = L.Ledger(tmp_path / "ledger")
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, study=study.C.STUDY)
    assert study.live_rate(parts, ledger) is None
    runs = parts["tune"]["runs"]
    (a, ra), (b, rb) = list(runs.items())[:2]
    for name, run, wall in ((a, ra, 2.0), (b, rb, 6.0)):
        ledger.write(name, run["cfg"], {"val_loss": 3.0, "wall_s": wall}, [{"step": 1, "tokens": 64, "val_loss": 3.0}])
    live = study.live_rate(parts, ledger)
    steps = ra["cfg"]["train"]["steps"] + rb["cfg"]["train"]["steps"]
    assert live["runs"] == 2 and live["steps_per_s"] == pytest.approx(steps / 8.0)
