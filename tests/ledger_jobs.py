"""A stand-in for the study runner's job (nexus.experiments.ledger.run_job) in tests/test_ledger_trust.py: a
module-level function, so the runner's spawned workers import it by name (tests/ is on their sys.path, as on the
test's). It trains nothing: it sleeps `cfg["sleep"]` seconds, may ask the study to stop, and appends what it was asked
and when to the file named by NEXUS_TEST_JOBS_LOG (set by the test, inherited by the workers)."""

from __future__ import annotations

import json
import os
import signal
import time

# Set by the test in its own process before the runner starts: a worker forked from it would inherit the value, a
# worker spawned fresh (as the runner asks) imports this module anew and reads the default.
INHERITED = "fresh"


def quick_job(cfg: dict, run_dir: str, start_from: str | None, threads: int) -> dict:
    from nexus.experiments import ledger as L

    t0 = time.time()
    sigterms = []
    previous = signal.getsignal(signal.SIGTERM)

    def count(signum, frame):  # every SIGTERM this job receives, passed on to the handler it replaces
        sigterms.append(signum)
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, count)
    try:
        time.sleep(cfg.get("sleep", 0.0))
        if cfg.get("stop_study"):  # SIGTERM to the study runner, as a user would send it, then more work
            os.kill(int(os.environ["NEXUS_TEST_STUDY_PID"]), signal.SIGTERM)
            time.sleep(cfg.get("after_stop", 0.3))
    finally:
        signal.signal(signal.SIGTERM, previous)
    if cfg.get("fail"):
        raise RuntimeError(f"job {run_dir} failed")
    stop_seen = L._STOP["signum"]  # this process's stop request: a worker's is set by the runner's SIGTERM
    record = {
        "run_dir": run_dir,
        "start_from": start_from,
        "threads": threads,
        "pid": os.getpid(),
        "t0": t0,
        "t1": time.time(),
        "stop_seen": stop_seen,
        "sigterms": len(sigterms),
        "inherited": INHERITED,
    }
    with open(os.environ["NEXUS_TEST_JOBS_LOG"], "a") as f:
        f.write(json.dumps(record) + "\n")
    if cfg.get("interrupt") or (cfg.get("honour_stop") and stop_seen is not None):
        return {"interrupted": stop_seen or signal.SIGTERM}  # what run_job returns for a run that saved and stopped
    return {"val_loss": cfg["val_loss"], "wall_s": cfg["wall_s"]}
