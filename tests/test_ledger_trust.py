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

import nexus.lifeline as lifeline
from nexus.config import ConfigError
from nexus.config_migration import saved_run_config
from nexus.experiments import ledger as L
from nexus.experiments.runs import run_resumable
from nexus.train.trainer import TrainingInterrupted

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


@pytest.mark.parametrize("stop", ["runs", "before"])
def test_a_stopped_study_says_in_one_line_where_it_stopped_and_the_command_that_continues_it(
    tmp_path, capsys, monkeypatch, stop
):
    """regime_study.main, in-process: a stop inside the runner (StudyInterrupted, the runs in flight saved) or before
    any run (KeyboardInterrupt) ends in one stderr line with the study's own command, exit 128 + the signal; the
    SIGTERM handler it installs for the stop before any run is taken down again."""
    study = load_benchmark("studies/regime_study.py")

    def stopped(argv):
        if stop == "runs":
            raise L.StudyInterrupted(signal.SIGTERM, 3, ["seed0/small"])
        raise KeyboardInterrupt

    monkeypatch.setattr(study, "_main", stopped)
    handler = signal.getsignal(signal.SIGTERM)
    args = ["--study", "sparkling-credible", "--parts", "eval", "--workers", "2"]
    rc = study.main(args)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1 and signal.getsignal(signal.SIGTERM) is handler, err
    assert lines[0].endswith(f"continue with: {sys.executable} {study.__file__} {' '.join(args)}"), lines[0]
    assert "nexus train --resume" not in lines[0]
    if stop == "runs":
        assert rc == 128 + signal.SIGTERM
        assert lines[0].startswith("study stopped by SIGTERM at a run boundary: 3 run(s) finished this time")
        assert "(seed0/small saved mid-run, resumed from there)" in lines[0]
    else:
        assert rc == 130 and lines[0].startswith("study stopped before any run was in flight; nothing was lost")


# the whole path in a child: ~45 s on the shared CPU; the runner's SIGTERM handling with two workers is in the default
# suite in-process (test_sigterm_to_the_runner_starts_no_run_after_it_and_the_runs_in_flight_stop[2]), main's line
# above, and orphans after a kill -9 in test_kill_9_of_the_study_runner_takes_its_workers_with_it
@pytest.mark.slow
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


# ----------------------------------------------------------------------------- the runner's parts, in-process
# The signal plumbing without training: the stop request a signal leaves, the exception that carries it out of a run,
# what a worker sets up, how the pool's workers are told to stop, what a job returns when stopped. The signal tests
# above run the study in a child, which mutmut's per-function test selection does not reach (mutation map of
# nexus/experiments/ledger.py). Well under a second in all.
@pytest.fixture
def stop(monkeypatch):
    """This process's stop request, fresh for each test (the module keeps one per process)."""
    state = {"signum": None, "in_job": False}
    monkeypatch.setattr(L, "_STOP", state)
    return state


def test_a_signal_outside_a_run_is_only_recorded_and_the_first_one_wins(stop):
    assert L._on_signal(signal.SIGTERM, None) is None
    assert stop == {"signum": signal.SIGTERM, "in_job": False}
    L._on_signal(signal.SIGINT, None)
    assert stop["signum"] == signal.SIGTERM


def test_the_first_signal_inside_a_run_stops_it_and_a_second_does_not_raise_again(stop):
    stop["in_job"] = True
    with pytest.raises(L._Stop) as e:
        L._on_signal(signal.SIGINT, None)
    assert e.value.signum == signal.SIGINT and e.value.args == (signal.SIGINT,)
    assert not isinstance(e.value, Exception)  # no `except Exception` in a run swallows it
    assert stop["signum"] == signal.SIGINT
    L._on_signal(signal.SIGTERM, None)  # already stopping: recorded once, no second exception mid-cleanup
    assert stop == {"signum": signal.SIGINT, "in_job": True}


def test_a_run_is_not_cut_short_by_a_signal_after_a_stop_was_recorded(stop):
    """A stop asked while no run was in progress (in_job False) is recorded; the first signal seen in a run is the
    one that raises, and only when no earlier one was recorded."""
    stop["signum"] = signal.SIGTERM
    stop["in_job"] = True
    L._on_signal(signal.SIGINT, None)  # not the first: the runner stops at the boundary, the run is not cut short
    assert stop["signum"] == signal.SIGTERM


def test_study_interrupted_names_the_signal_and_counts_the_runs():
    e = L.StudyInterrupted(signal.SIGTERM, 3, ["seed0/small", "seed1/small"])
    assert isinstance(e, KeyboardInterrupt)
    assert (e.signum, e.finished, e.saved, e.signal_name) == (
        signal.SIGTERM,
        3,
        ["seed0/small", "seed1/small"],
        "SIGTERM",
    )
    assert str(e) == "stopped by SIGTERM: 3 run(s) finished and in the ledger, 2 in flight saved to resume"
    assert str(L.StudyInterrupted(signal.SIGINT, 0, [])).startswith("stopped by SIGINT: 0 run(s)")


def test_a_worker_dies_with_its_runner_and_stops_on_sigint_and_sigterm(monkeypatch, stop):
    watched, handlers = [], []
    monkeypatch.setattr(lifeline, "die_with", watched.append)
    monkeypatch.setattr(signal, "signal", lambda s, h: handlers.append((s, h)))
    assert L._worker_init(4242) is None
    assert watched == [4242]
    assert handlers == [(signal.SIGINT, L._on_signal), (signal.SIGTERM, L._on_signal)]


class _Pool:
    def __init__(self, pids):
        self._processes = pids


def test_the_pools_workers_are_each_sent_the_signal_and_a_gone_one_is_skipped(monkeypatch, stop):
    sent = []

    def kill(pid, signum):
        sent.append((pid, signum))
        if pid == 12:
            raise ProcessLookupError(pid)

    monkeypatch.setattr(L.os, "kill", kill)
    L._signal_workers(_Pool({11: object(), 12: object(), 13: object()}), signal.SIGTERM)
    assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM), (13, signal.SIGTERM)]
    assert stop["signum"] == signal.SIGTERM  # SIGTERM to the workers is a stop of the study too


def test_signalling_the_workers_keeps_an_earlier_stop_and_sigint_records_none(monkeypatch, stop):
    sent = []
    monkeypatch.setattr(L.os, "kill", lambda pid, s: sent.append((pid, s)))
    stop["signum"] = signal.SIGINT
    L._signal_workers(_Pool({7: None}), signal.SIGTERM)
    assert stop["signum"] == signal.SIGINT and sent == [(7, signal.SIGTERM)]
    stop["signum"] = None
    L._signal_workers(_Pool({8: None}), signal.SIGINT)
    assert stop["signum"] is None and sent[-1] == (8, signal.SIGINT)
    L._signal_workers(_Pool(None), signal.SIGTERM)  # a pool that never started a worker
    L._signal_workers(object(), signal.SIGTERM)  # or has no such attribute at all
    assert len(sent) == 2


@pytest.fixture
def job(monkeypatch):
    """run_job with the training replaced: `calls` receives what it was asked, `outcome["do"]` decides how it ends."""
    import torch

    import nexus.config_migration as migration
    import nexus.experiments.runs as runs

    calls = {"threads": [], "runs": [], "in_job": []}
    monkeypatch.setattr(migration, "saved_run_config", lambda cfg: ("parsed", cfg))
    monkeypatch.setattr(torch, "set_num_threads", calls["threads"].append)
    outcome = {"do": lambda: {"val_loss": 1.5}}

    def run_resumable(cfg, run_dir, quiet=None, say=None, start_from=None):
        calls["runs"].append((cfg, run_dir, quiet, start_from, say("ignored")))
        calls["in_job"].append(L._STOP["in_job"])
        return outcome["do"]()

    monkeypatch.setattr(runs, "run_resumable", run_resumable)
    return calls, outcome


def test_a_job_trains_its_config_into_its_directory_and_branches_from_its_start(job, stop):
    calls, _ = job
    cfg = {"train": {"steps": 3}}
    assert L.run_job(cfg, "runs/a", None, 2) == {"val_loss": 1.5}
    assert L.run_job(cfg, "runs/b", "runs/a/checkpoint", 1) == {"val_loss": 1.5}
    assert calls["threads"] == [2, 1] and calls["in_job"] == [True, True] and stop["in_job"] is False
    (c1, d1, q1, s1, said1), (_, d2, _, s2, _) = calls["runs"]
    assert c1 == ("parsed", cfg) and c1[1] is not cfg  # parsed from a copy: the plan's dict is never changed
    assert (d1, d2) == (Path("runs/a"), Path("runs/b")) and isinstance(d1, Path)
    assert q1 is True and said1 is None  # quiet, and its lines go nowhere (the runner prints one per run)
    assert s1 is None and s2 == Path("runs/a/checkpoint") and isinstance(s2, Path)


def test_a_job_asked_to_stop_before_it_starts_trains_nothing(job, stop):
    calls, _ = job
    stop["signum"] = signal.SIGTERM
    assert L.run_job({}, "runs/a", None, 1) == {"interrupted": signal.SIGTERM}
    assert calls["runs"] == [] and calls["threads"] == []


def test_a_job_stopped_by_the_trainer_or_by_the_runners_handler_returns_the_signal(job, stop):
    calls, outcome = job

    def trainer_stops():
        raise TrainingInterrupted(signal.SIGTERM, 5, Path("runs/a/step_0000005"))

    outcome["do"] = trainer_stops
    assert L.run_job({}, "runs/a", None, 1) == {"interrupted": signal.SIGTERM}
    assert stop == {"signum": signal.SIGTERM, "in_job": False}  # the trainer's stop is the study's stop

    stop["signum"] = None

    def signalled_then_trainer_stops():  # SIGINT reached the runner's handler first, then the trainer stopped
        L._STOP["signum"] = signal.SIGINT
        raise TrainingInterrupted(signal.SIGTERM, 5, Path("runs/a/step_0000005"))

    outcome["do"] = signalled_then_trainer_stops
    assert L.run_job({}, "runs/a", None, 1) == {"interrupted": signal.SIGTERM}
    assert stop["signum"] == signal.SIGINT  # the first request stands

    stop["signum"] = None

    def handler_stops():
        raise L._Stop(signal.SIGINT)

    outcome["do"] = handler_stops
    assert L.run_job({}, "runs/a", None, 1) == {"interrupted": signal.SIGINT}
    assert stop["in_job"] is False and calls["in_job"] == [True, True, True]


def test_a_job_that_fails_is_no_longer_in_a_job(job, stop):
    _, outcome = job

    def fails():
        raise RuntimeError("boom")

    outcome["do"] = fails
    with pytest.raises(RuntimeError, match="boom"):
        L.run_job({}, "runs/a", None, 1)
    assert stop["in_job"] is False


# ----------------------------------------------------------------------------- the runner's schedule, without training
class _FakeLedger:
    """A ledger holding the runs in `held`; what the runner asks lands in `.asked`, what it records in `.recorded`."""

    def __init__(self, root: Path, held=()):
        self.root, self.held, self.asked, self.recorded = root, set(held), [], []

    def holds(self, name, cfg):
        self.asked.append((name, cfg))
        return name in self.held

    def record(self, name, cfg, res, run_dir, tokens_per_step):
        self.recorded.append((name, cfg, res, run_dir, tokens_per_step))
        self.held.add(name)


def _job(tmp_path: Path, name: str, kind: str, after=None, grow_step=None, **cfg) -> dict:
    """A planned run as the runner reads it; `cfg` also carries what tests/ledger_jobs.py's quick_job does."""
    cfg.setdefault("val_loss", 1.25)
    cfg.setdefault("wall_s", 2.0)
    out = tmp_path / "runs" / name.replace("/", "-")
    out.mkdir(parents=True)
    run = {"kind": kind, "after": after, "cfg": {"train": {"out_dir": str(out), "steps": 10}, **cfg}}
    if grow_step is not None:
        run["grow_step"] = grow_step
    return run


@pytest.fixture
def quick_jobs(monkeypatch, tmp_path):
    """run_job replaced by tests/ledger_jobs.py's quick_job; returns a reader of what each job was asked."""
    import ledger_jobs

    log = tmp_path / "jobs.log"
    monkeypatch.setenv("NEXUS_TEST_JOBS_LOG", str(log))
    monkeypatch.setenv("NEXUS_TEST_STUDY_PID", str(os.getpid()))
    monkeypatch.setattr(L, "run_job", ledger_jobs.quick_job)
    monkeypatch.setattr(ledger_jobs, "INHERITED", "from the runner's memory")

    def jobs() -> dict:
        lines = log.read_text().splitlines() if log.is_file() else []
        return {Path(r["run_dir"]).name.replace("-", "/"): r for r in map(json.loads, lines)}

    return jobs


def _line(name: str, loss: float, wall: float, steps: int) -> str:
    """The runner's line for a finished run, its elapsed seconds a group of the pattern."""
    import re

    rate = f"{steps / max(wall, 1e-9):.1f}"
    return rf"  +(\d+) s  {re.escape(f'{name:34s}')} val {loss:.4f}  \({wall:.0f} s, {rate} steps/s live\)"


@pytest.mark.parametrize("workers", [1, 2])
def test_the_runner_runs_each_job_once_after_its_prefix_and_records_and_reports_it(quick_jobs, stop, tmp_path, workers):
    import re

    runs = {}
    runs["seed0/small"] = _job(tmp_path, "seed0/small", "small", grow_step=4, sleep=0.2, val_loss=3.5, wall_s=3.0)
    runs["seed0/grown"] = _job(tmp_path, "seed0/grown", "grown", after="seed0/prefix", grow_step=4, val_loss=2.5)
    runs["seed0/scratch"] = _job(tmp_path, "seed0/scratch", "scratch", sleep=0.1, val_loss=3.0, wall_s=0.5)
    runs["seed0/prefix"] = _job(tmp_path, "seed0/prefix", "prefix", grow_step=4, sleep=2.0, val_loss=4.0, wall_s=1.0)
    runs["seed2/small"] = _job(tmp_path, "seed2/small", "small", val_loss=3.25, wall_s=4.0)  # no growth step recorded
    runs["seed1/scratch"] = _job(tmp_path, "seed1/scratch", "scratch", val_loss=9.0)  # in the ledger already
    ledger = _FakeLedger(tmp_path / "ledger", held={"seed1/scratch"})
    stop["signum"] = signal.SIGINT  # left by an earlier study in this process: a new one starts afresh
    lines, before = [], signal.getsignal(signal.SIGTERM)
    t0 = time.perf_counter()
    got = L.execute(runs, workers, 3, lines.append, ledger, tokens_per_step=64)
    took = time.perf_counter() - t0
    assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGINT) is not L._on_signal
    assert stop["signum"] is None
    want = {n: {"val_loss": r["cfg"]["val_loss"], "wall_s": r["cfg"]["wall_s"]} for n, r in runs.items()}
    del want["seed1/scratch"]
    assert got == want
    assert all(cfg is runs[n]["cfg"] for n, cfg in ledger.asked)
    assert lines[0] == f"ledger {tmp_path / 'ledger'}: 1 of 6 runs already there, skipped; 5 to run"
    # the small and grown runs count the steps after the growth step; the prefix trains up to it, from step 0
    steps = {"seed0/small": 6, "seed0/grown": 6, "seed0/scratch": 10, "seed0/prefix": 10, "seed2/small": 10}
    assert len(lines) == 6 and sorted(n for n, *_ in ledger.recorded) == sorted(want)
    for (name, *_), line in zip(ledger.recorded, lines[1:]):
        m = re.fullmatch(_line(name, want[name]["val_loss"], want[name]["wall_s"], steps[name]), line)
        assert m and 0 <= int(m[1]) <= took + 1, line
    for name, cfg, res, run_dir, tps in ledger.recorded:
        assert (cfg, res, run_dir, tps) == (
            runs[name]["cfg"],
            want[name],
            Path(runs[name]["cfg"]["train"]["out_dir"]),
            64,
        )
    jobs = quick_jobs()
    assert sorted(jobs) == sorted(want) and all(j["threads"] == 3 and j["sigterms"] == 0 for j in jobs.values())
    prefix_dir = runs["seed0/prefix"]["cfg"]["train"]["out_dir"]
    assert jobs["seed0/grown"]["start_from"] == str(Path(prefix_dir) / "checkpoint")
    assert [jobs[n]["start_from"] for n in sorted(set(want) - {"seed0/grown"})] == [None] * 4
    assert jobs["seed0/grown"]["t0"] >= jobs["seed0/prefix"]["t1"]  # the grown run branches from the prefix's end
    started = sorted(jobs, key=lambda n: jobs[n]["t0"])
    pids = {j["pid"] for j in jobs.values()}
    if workers == 1:  # one at a time, in this process: a branch after what it branches from, then by kind (prefix,
        # scratch, grown, small), the plan's order within a kind
        assert started == ["seed0/prefix", "seed0/scratch", "seed0/small", "seed2/small", "seed0/grown"]
        assert pids == {os.getpid()} and all(jobs[a]["t1"] <= jobs[b]["t0"] for a, b in zip(started, started[1:]))
    else:  # two at a time in fresh processes; the grown run waits for its prefix while a free worker runs the rest
        assert set(started[:2]) == {"seed0/prefix", "seed0/scratch"}
        assert os.getpid() not in pids and len(pids) <= 2
        assert {j["inherited"] for j in jobs.values()} == {"fresh"}  # spawned, not forked from the runner
        for n, j in jobs.items():
            assert sum(k["t0"] <= j["t0"] < k["t1"] for k in jobs.values()) <= 2, n  # running when it started
        assert not [pid for pid in pids if _alive(pid)], "a worker outlived the runner's return"


def test_a_chain_of_branches_runs_each_after_what_it_branches_from_and_grown_before_small(quick_jobs, stop, tmp_path):
    """The horizon part's chains (prefix -> a stable segment -> its decay): one worker runs a run only after the run
    it branches from, however the plan lists them; among runs at the same depth a grown run before a small one."""
    runs = {}
    runs["s/small"] = _job(tmp_path, "s/small", "small", after="s/prefix", grow_step=4)
    runs["s/decay"] = _job(tmp_path, "s/decay", "grown", after="s/stable", grow_step=4)
    runs["s/stable"] = _job(tmp_path, "s/stable", "grown", after="s/prefix", grow_step=4)
    runs["s/grown"] = _job(tmp_path, "s/grown", "grown", after="s/prefix", grow_step=4)
    runs["s/prefix"] = _job(tmp_path, "s/prefix", "prefix", grow_step=4)
    L.execute(runs, 1, 1, lambda s: None, _FakeLedger(tmp_path / "l"), 64)
    jobs = quick_jobs()
    started = sorted(jobs, key=lambda n: jobs[n]["t0"])
    assert started == ["s/prefix", "s/stable", "s/grown", "s/small", "s/decay"]
    stable_dir = runs["s/stable"]["cfg"]["train"]["out_dir"]
    assert jobs["s/decay"]["start_from"] == str(Path(stable_dir) / "checkpoint")


def test_the_runners_pool_holds_as_many_workers_as_asked_whatever_the_cpu_count(
    quick_jobs, stop, tmp_path, monkeypatch
):
    """`--workers 2` on a machine with more cores starts a pool of 2 processes, not one per core."""
    import concurrent.futures

    sizes = []

    class Pool(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sizes.append(self._max_workers)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    runs = {"seed0/scratch": _job(tmp_path, "seed0/scratch", "scratch")}
    assert L.execute(runs, 2, 1, lambda s: None, _FakeLedger(tmp_path / "l"), 64) == {
        "seed0/scratch": {"val_loss": 1.25, "wall_s": 2.0}
    }
    assert sizes == [2]


def test_a_runner_whose_ledger_holds_every_run_says_so_and_runs_nothing(quick_jobs, stop, tmp_path):
    runs = {"seed0/scratch": _job(tmp_path, "seed0/scratch", "scratch")}
    lines = []
    assert L.execute(runs, 2, 1, lines.append, _FakeLedger(tmp_path / "l", held=set(runs)), 64) == {}
    assert lines == [f"ledger {tmp_path / 'l'}: 1 of 1 runs already there, skipped; 0 to run"] and quick_jobs() == {}
    lines.clear()
    assert L.execute({}, 1, 1, lines.append) == {} and lines == []  # no ledger, nothing planned: not a word
    ledger = _FakeLedger(tmp_path / "l2")  # a ledger holding none of them: no line either, and the default
    assert L.execute(runs, 1, 1, lines.append, ledger) == {"seed0/scratch": {"val_loss": 1.25, "wall_s": 2.0}}
    assert len(lines) == 1 and "seed0/scratch" in lines[0] and ledger.recorded[0][4] == 0  # tokens_per_step 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_prefix_that_stopped_by_itself_leaves_its_grown_run_unstarted_in_parallel(
    quick_jobs, stop, tmp_path, workers
):
    """A prefix whose job returns as stopped (its worker was signalled directly, not the runner) is saved, not a
    result; with workers its grown run never starts (it has nothing to branch from) and the runner returns what
    finished without raising (no stop was asked of it)."""
    runs = {"p": _job(tmp_path, "p", "prefix", interrupt=True), "g": _job(tmp_path, "g", "grown", after="p")}
    lines = []
    got = L.execute(runs, workers, 1, lines.append, None, 64)
    if workers == 1:  # one process runs the plan in order
        assert got == {"g": {"val_loss": 1.25, "wall_s": 2.0}} and len(lines) == 1
    else:
        assert got == {} and lines == [] and sorted(quick_jobs()) == ["p"]


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_to_the_runner_starts_no_run_after_it_and_the_runs_in_flight_stop(quick_jobs, stop, tmp_path, workers):
    """The signal comes from inside the first job (as a user's SIGTERM would while it runs), which then works on: the
    runner starts nothing after it, forwards SIGTERM once to its workers within its 1 s poll (the job in flight sees
    its stop request and returns as stopped), and raises StudyInterrupted counting the finished runs and naming the
    stopped one."""
    runs = {
        "a": _job(tmp_path, "a", "prefix", sleep=0.2, stop_study=True, after_stop=3.0 if workers > 1 else 0.3),
        "b": _job(tmp_path, "b", "scratch", sleep=2.5, honour_stop=True),
        "c": _job(tmp_path, "c", "small"),
        "d": _job(tmp_path, "d", "small"),
    }
    lines, before = [], signal.getsignal(signal.SIGTERM)
    with pytest.raises(L.StudyInterrupted) as e:
        L.execute(runs, workers, 1, lines.append, None, 64)
    assert signal.getsignal(signal.SIGTERM) is before
    jobs = quick_jobs()
    if workers == 1:  # the first job finished before the runner looked again: nothing else started
        assert (e.value.signum, e.value.finished, e.value.saved) == (signal.SIGTERM, 1, []) and list(jobs) == ["a"]
    else:  # b ran beside a, was told to stop (once) while a still worked, and returned as stopped
        assert (e.value.signum, e.value.finished, e.value.saved) == (signal.SIGTERM, 1, ["b"])
        assert sorted(jobs) == ["a", "b"] and jobs["b"]["stop_seen"] == signal.SIGTERM
        assert jobs["b"]["sigterms"] == 1  # forwarded once, while a still worked (a outlasts b by design)
    assert len(lines) == 1 and lines[0].split()[2] == "a" and stop["signum"] == signal.SIGTERM


def test_a_job_that_fails_in_a_worker_stops_the_others_and_its_error_comes_through(quick_jobs, stop, tmp_path):
    runs = {
        "a": _job(tmp_path, "a", "prefix", sleep=0.3, fail=True),
        "b": _job(tmp_path, "b", "scratch", sleep=2.5, honour_stop=True),
        "c": _job(tmp_path, "c", "small"),
    }
    with pytest.raises(RuntimeError, match="failed"):
        L.execute(runs, 2, 1, lambda s: None, None, 64)
    jobs = quick_jobs()
    assert list(jobs) == ["b"] and jobs["b"]["stop_seen"] == signal.SIGTERM  # told to stop, not run on
    assert stop["signum"] == signal.SIGTERM


def test_the_runs_to_train_are_those_the_ledger_lacks_and_a_prefix_whose_checkpoint_is_elsewhere(tmp_path):
    runs = {
        "p": _job(tmp_path, "p", "prefix"),
        "g": _job(tmp_path, "g", "grown", after="p"),
        "s": _job(tmp_path, "s", "scratch"),
    }
    ledger = _FakeLedger(tmp_path / "l", held={"p", "s"})
    assert L.needed_runs(runs, ledger) == ["g", "p"]  # p is in the ledger, but g branches from its checkpoint
    assert all(cfg is runs[n]["cfg"] for n, cfg in ledger.asked)
    ckpt = Path(runs["p"]["cfg"]["train"]["out_dir"]) / "checkpoint"
    ckpt.write_text("not a checkpoint folder")
    assert L.needed_runs(runs, ledger) == ["g", "p"]
    ckpt.unlink()
    ckpt.mkdir()
    assert L.needed_runs(runs, ledger) == ["g"]  # on this machine: g starts from it
    assert L.needed_runs(runs, None) == ["p", "g", "s"]  # no ledger: every run, each once
    assert L.needed_runs(runs, _FakeLedger(tmp_path / "l", held=set())) == ["p", "g", "s"]
    assert L.needed_runs(runs, _FakeLedger(tmp_path / "l", held={"p", "g", "s"})) == []


# ----------------------------------------------------------------------------- records, without training
def _finished_run(tmp_path: Path, steps: int = 4, logged: int | None = None) -> Path:
    """A run directory as a finished run leaves it (done.json, metrics.jsonl with a validation point per step up to
    `logged`, the last with post-growth diagnostics), each file recorded in its manifest as nexus records them."""
    from nexus.outdir import TRAIN_RUN, record

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "loss": 5.0 - s / 2, "val_loss": 4.0 - s / 8} for s in range(1, (logged or steps) + 1)]
    rows[-1].update(symmetry_lock_mean=0.75, rms_ratio_max_dev=0.125, symmetry_lock_min="n/a")
    rows.append({"step": 1, "event": "growth"})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "done.json").write_text(json.dumps({"val_loss": 3.5}))
    record(run, TRAIN_RUN, files=["done.json"], grows=["metrics.jsonl"])
    return run


def _ledger_without_corpus(root: Path, cfg: dict) -> L.Ledger:
    """A ledger whose corpus key for `cfg` is already known (no corpus loaded: `data_key` is held elsewhere)."""
    ledger = L.Ledger(root)
    ledger._data_keys[json.dumps(cfg.get("data", {}), sort_keys=True, default=str)] = "0123456789abcdef"
    return ledger


def test_a_finished_runs_record_holds_its_result_curve_diagnostics_and_outputs_hashes(tmp_path):
    import hashlib
    import re

    run = _finished_run(tmp_path)
    cfg = {"train": {"steps": 4, "out_dir": str(run)}, "data": {"source": "somewhere"}}
    ledger = _ledger_without_corpus(tmp_path / "ledger", cfg)
    result = {"val_loss": 3.5, "wall_s": 2.0, "name": "x", "none": None, "curve": [1, 2], "cfg": {"a": 1}}
    rec = ledger.record("seed0/small", cfg, result, run, 16)
    assert rec == json.loads(ledger.path("seed0/small").read_text()) == ledger.read("seed0/small")
    assert set(rec) == {
        *("name", "config_key", "data_key", "config", "final", "val_curve", "curve_points_total", "run_outputs"),
        *("device", "finished_at", L.DIGEST),
    }
    assert (rec["name"], rec["config"], rec["data_key"]) == ("seed0/small", cfg, "0123456789abcdef")
    assert rec["config_key"] == L.config_key(cfg) and rec[L.DIGEST] == L.record_digest(rec)
    assert rec["final"] == {
        **{"val_loss": 3.5, "wall_s": 2.0, "name": "x", "none": None},  # the result's plain values only
        **{"final_symmetry_lock_mean": 0.75, "final_rms_ratio_max_dev": 0.125},  # numbers from the last logged row
    }
    assert rec["val_curve"] == [{"step": s, "tokens": 16 * s, "val_loss": 4.0 - s / 8} for s in range(1, 5)]
    assert rec["curve_points_total"] == 4
    sha = {n: hashlib.sha256((run / n).read_bytes()).hexdigest() for n in ("done.json", "metrics.jsonl")}
    assert rec["run_outputs"] == sha
    assert rec["device"] == L.device_line()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", rec["finished_at"]), rec["finished_at"]


def test_a_record_is_stamped_in_utc_whatever_the_local_zone(tmp_path, monkeypatch):
    import datetime
    import time as _time

    cfg = {"train": {"steps": 1}, "data": {}}
    ledger = _ledger_without_corpus(tmp_path / "ledger", cfg)
    monkeypatch.setenv("TZ", "Etc/GMT-5")  # five hours east of UTC
    _time.tzset()
    try:
        rec = ledger.write("r", cfg, {"val_loss": 1.0}, [{"step": 1, "tokens": 1, "val_loss": 1.0}])
    finally:
        monkeypatch.undo()
        _time.tzset()
    stamped = datetime.datetime.strptime(rec["finished_at"], "%Y-%m-%d %H:%M UTC").replace(tzinfo=datetime.timezone.utc)
    assert abs(datetime.datetime.now(datetime.timezone.utc) - stamped) < datetime.timedelta(minutes=2)


def test_a_record_that_would_not_check_out_is_refused_and_nothing_is_written(tmp_path):
    cfg = {"train": {"steps": 1}, "data": {}}
    ledger = _ledger_without_corpus(tmp_path / "ledger", cfg)
    point = [{"step": 1, "tokens": 1, "val_loss": 1.0}]
    _one_line_refusal(lambda: ledger.write("r", cfg, {"val_loss": float("nan")}, point), "'r'", "val_loss")
    _one_line_refusal(lambda: ledger.write("r", cfg, {"val_loss": 1.0}, []), "no point")
    assert ledger.names() == [] and not (tmp_path / "ledger").exists()


def test_a_run_whose_curve_stops_short_of_its_last_step_is_refused_even_as_nexus_wrote_it(tmp_path):
    run = _finished_run(tmp_path, steps=4, logged=3)  # metrics.jsonl recorded as written, ending at step 3
    cfg = {"train": {"steps": 4}, "data": {}}
    ledger = _ledger_without_corpus(tmp_path / "ledger", cfg)
    _one_line_refusal(lambda: ledger.record("r", cfg, {"val_loss": 3.5}, run, 16), "step 3", "last step 4")
    (run / "metrics.jsonl").write_text("")
    from nexus.outdir import TRAIN_RUN, record

    record(run, TRAIN_RUN, grows=["metrics.jsonl"])
    _one_line_refusal(lambda: ledger.record("r", cfg, {"val_loss": 3.5}, run, 16), "ends at step None")
    assert ledger.names() == []


def test_a_run_whose_outputs_changed_is_refused_before_its_curve_is_read(tmp_path):
    run = _finished_run(tmp_path)
    cfg = {"train": {"steps": 4}, "data": {}}
    ledger = _ledger_without_corpus(tmp_path / "ledger", cfg)
    (run / "done.json").write_text(json.dumps({"val_loss": 0.5}))
    _one_line_refusal(lambda: ledger.record("r", cfg, {"val_loss": 0.5}, run, 16), "done.json", "changed since")
    assert ledger.names() == []


def test_a_run_the_ledger_does_not_hold_has_no_curve_and_no_loss(tmp_path):
    ledger = L.Ledger(tmp_path / "ledger")
    assert ledger.curve("seed0/small") == [] and ledger.names() == []
    _one_line_refusal(lambda: ledger.final_val_loss("seed0/small"), "holds no run 'seed0/small'")


def test_seal_reads_back_a_value_json_has_no_type_for_as_its_text():
    rec = L.seal({"name": "r", "where": Path("runs/a"), L.DIGEST: "stale"})
    assert rec == {"name": "r", "where": "runs/a", L.DIGEST: L.record_digest({"name": "r", "where": "runs/a"})}


def test_the_device_line_names_torch_the_machine_and_a_cuda_device_when_there_is_one(monkeypatch):
    import platform

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    d = L.device_line()
    assert d == {
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: asked.append(i) or f"GPU {i}")
    assert L.device_line() == {**d, "cuda_device": "GPU 0"} and asked == [0]


def test_a_config_todays_code_cannot_read_is_keyed_by_its_raw_form_without_paths_or_device():
    """A config `saved_run_config` refuses (a field of a newer or older nexus) still gets a key: its raw form minus
    out_dir and device, the caller's dict untouched; a config without a train section, or one without those two
    fields, is keyed too."""
    import hashlib

    def raw_key(c: dict) -> str:
        return hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest()[:16]

    a = {"train": {"out_dir": "runs/a", "device": "cpu", "from_the_future": 1}}
    b = {"train": {"out_dir": "runs/b", "device": "cuda", "from_the_future": 1}}
    kept = json.loads(json.dumps(a))
    assert L.config_key(a) == L.config_key(b) == raw_key({"train": {"from_the_future": 1}})
    assert a == kept  # the plan's own config is never changed by keying it
    assert L.config_key({"train": {"from_the_future": 2}}) == raw_key({"train": {"from_the_future": 2}})
    assert L.config_key({"from_the_future": 1}) == raw_key({"from_the_future": 1})
    # the same fields in another order, and a value JSON has no type for (kept as its text)
    assert L.config_key({"train": {"b": 1, "a": 2}}) == L.config_key({"train": {"a": 2, "b": 1}})
    assert L.config_key({"train": {"where": Path("x/y")}}) == raw_key({"train": {"where": "x/y"}})


def test_the_corpus_key_hashes_the_tokens_read_quietly_from_a_fresh_cache(tmp_path, monkeypatch, capsys):
    import hashlib

    import numpy as np

    from nexus.config import RunConfig
    from nexus.config_migration import saved_run_config
    from nexus.data.loader import DataModule
    from nexus.data.prepare import Progress

    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"line {i} of a small corpus for the ledger's key\n" for i in range(400)))
    cfg = RunConfig().to_dict()
    cfg["data"].update(source=str(text), tokenizer="byte", cache_dir=str(tmp_path / "cache"), num_proc=1, seq_len=16)
    kept = json.loads(json.dumps(cfg))
    monkeypatch.setattr(Progress, "EVERY_S", 0.0)  # a preparation that is not quiet says so, however short
    key = L.data_key(cfg)
    assert capsys.readouterr().err == "" and cfg == kept
    dm = DataModule(saved_run_config(kept).data, quiet=True)
    h = hashlib.sha256()
    for split in (dm.train, dm.val):
        h.update(np.ascontiguousarray(split.tokens).tobytes())
    assert key == h.hexdigest()[:16]


def test_a_ledger_loads_each_corpus_once_whatever_the_order_of_its_fields(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(L, "data_key", lambda cfg: calls.append(cfg) or f"key of {cfg.get('data', {}).get('source')}")
    ledger = L.Ledger(tmp_path / "ledger")
    a = {"data": {"source": "a", "seq_len": 8}, "train": {"steps": 1}}
    assert ledger.data_key(a) == "key of a"
    assert ledger.data_key({"data": {"seq_len": 8, "source": "a"}, "train": {"steps": 2}}) == "key of a"
    assert ledger.data_key({"data": {"source": "b"}}) == "key of b"
    assert ledger.data_key({"data": {"source": Path("c")}}) == "key of c"
    assert len(calls) == 3
    assert ledger.data_key({"train": {}}) == "key of None" == ledger.data_key({"data": {}})  # no section: an empty one
    assert len(calls) == 4


@pytest.mark.parametrize("name", ["", "/abs/run", "seed0/../../elsewhere", ".."])
def test_a_ledger_name_outside_its_folder_is_refused(tmp_path, name):
    _one_line_refusal(lambda: L.Ledger(tmp_path / "l").path(name), repr(name))


def test_a_ledger_name_is_a_file_below_its_runs_folder(tmp_path):
    assert L.Ledger(tmp_path / "l").path("seed0/a..b") == tmp_path / "l" / L.RUNS / "seed0" / "a..b.json"
    assert L.Ledger(tmp_path / "missing").names() == []


def test_each_problem_of_a_record_is_said_in_its_own_words():
    good = L.seal({"name": "r", "config": {}, "final": {"val_loss": 1.0}, "val_curve": [{"step": 1}], "data_key": "k"})
    assert L.record_problem(good) is None
    assert L.record_problem({**good, "name": 5}) == "its field 'name' is 5 (valid: a str)"
    assert L.record_problem({**good, "val_curve": []}) == "its validation curve has no point"
    assert L.record_problem({k: v for k, v in good.items() if k != L.DIGEST}) == (
        "it carries no digest (valid: a record this ledger wrote; tools/ledger_seal.py seals records written "
        "before digests)"
    )
    assert L.record_problem({**good, "data_key": "other"}) == (
        "its contents do not match its digest: it was edited after nexus wrote it"
    )


def test_a_records_digest_covers_a_value_json_has_no_type_for_as_its_text():
    import hashlib

    rec = {"name": "r", "where": Path("runs/a"), L.DIGEST: "ignored"}
    want = hashlib.sha256(json.dumps({"name": "r", "where": "runs/a"}, sort_keys=True).encode()).hexdigest()
    assert L.record_digest(rec) == want


def test_a_planned_runs_own_start_is_its_segment_start_else_its_growth_step_for_a_branch_else_zero():
    """The step a run trains itself from (the live rate's steps and the estimate count from it): a stable segment or
    a decay branch of the horizon's chains gives its own start_step, whatever its kind; a small or grown branch of a
    prefix starts at the growth step; a prefix or scratch run at 0."""
    assert L.own_start({"kind": "grown", "grow_step": 3, "start_step": 7}) == 7
    assert L.own_start({"kind": "scratch", "start_step": "12"}) == 12
    assert L.own_start({"kind": "small", "start_step": 0, "grow_step": 5}) == 0
    assert L.own_start({"kind": "grown", "grow_step": 5}) == 5
    assert L.own_start({"kind": "small", "grow_step": 5}) == 5
    assert L.own_start({"kind": "small"}) == 0
    assert L.own_start({"kind": "prefix", "grow_step": 5}) == 0
    assert L.own_start({"kind": "scratch", "grow_step": 5}) == 0


def test_a_resumed_run_counts_only_the_steps_after_its_checkpoint_in_its_rate(tmp_path, stop, monkeypatch):
    """A run stopped and continued times only its last part (run_resumable's wall_s), so its live rate counts the
    steps after the step checkpoint it resumed: 10 steps, resumed at 6, 2 s -> 2.0 steps/s, not 5.0 (the first
    study restart printed 305 steps/s for a run that trained its last 55 steps in 10 s)."""
    import re

    def resumed_job(cfg, run_dir, start_from, threads):
        return {"val_loss": 1.5, "wall_s": 2.0, "resumed_from": "step_0000006"}

    run = _job(tmp_path, "seed0/scratch", "scratch")
    assert L.trained_steps(run, {"resumed_from": "step_0000006"}) == 4
    assert L.trained_steps(run, {"resumed_from": None}) == 10
    assert L.trained_steps({**run, "start_step": 8}, {"resumed_from": "step_0000006"}) == 2  # its own start is later
    monkeypatch.setattr(L, "run_job", resumed_job)
    lines: list[str] = []
    L.execute({"seed0/scratch": run}, 1, 1, lines.append, _FakeLedger(tmp_path / "l"), 64)
    assert re.search(r"\(2 s, 2\.0 steps/s live\)$", lines[-1]), lines

    study = load_benchmark("studies/regime_study.py")
    ledger = L.Ledger(tmp_path / "ledger")
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, study=study.C.STUDY)
    name, r = next(iter(parts["tune"]["runs"].items()))
    steps = r["cfg"]["train"]["steps"]
    ledger.write(
        name,
        r["cfg"],
        {"val_loss": 3.0, "wall_s": 2.0, "resumed_from": f"step_{steps - 4:07d}"},
        [{"step": 1, "tokens": 64, "val_loss": 3.0}],
    )
    assert study.live_rate(parts, ledger)["steps_per_s"] == pytest.approx(4 / 2.0)
