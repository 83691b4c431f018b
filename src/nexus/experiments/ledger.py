"""A study's ledger: what outlives a session (issue 38 item 1).

A study writes one JSON file per finished run under its ledger directory (benchmarks/results/<study>/runs/),
atomically (temporary name, then rename), as soon as the run finishes: the run's config, its final metrics, and
its validation curve downsampled to at most MAX_POINTS points, enough to redraw every figure and recompute every
table without the run directory (checkpoints and metrics.jsonl stay out of the repository). A rerun of the same
command on any machine skips what the ledger holds and runs the rest.

A record is trusted only as nexus wrote it: it carries a digest of its own contents and the sha256 of the run
directory's done.json and metrics.jsonl as that directory's manifest recorded them; a record whose shape or digest
does not check out is refused in one line naming the file (an edited val_loss would otherwise flip a tuning choice),
and a run directory whose outputs changed since nexus wrote them is refused before it is recorded.

A run is identified by its name (e.g. "seed0/sparkling") and its config without the paths it writes to and the
device it runs on, and by the corpus it read (a hash of its training and validation tokens: a name such as
"embedded" stays while its contents change): a ledger file whose config or corpus differs from today's is a
different experiment, refused with one line rather than reused or overwritten.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import math
import os
import platform
import time
from pathlib import Path

from ..config import ConfigError
from .curves import read_metrics, val_curve
from .runs import write_json_atomic

RUNS = "runs"
DIGEST = "digest"  # sha256 of the record's other fields (canonical JSON): a hand edit is refused, not believed
REQUIRED = {"name": str, "config": dict, "final": dict, "val_curve": list, "data_key": str}
MAX_POINTS = 200  # a regime run evaluates ~20 times; a longer one is thinned to this many points, ends kept


def config_key(cfg: dict) -> str:
    """The config's identity: everything but where it writes (out_dir) and what it runs on (device: the same
    experiment on a GPU is the same run; its ledger file records the device), hashed, in the form today's code
    parses it to: a field added since the run was recorded takes its default on both sides, so a ledger outlives
    schema additions (a default that changes what a run computes is a code change no key can see)."""
    from ..config_migration import saved_run_config
    from ..errors import ConfigError as _Bad

    try:
        c = saved_run_config(copy.deepcopy(cfg)).to_dict()
    except (_Bad, TypeError, AttributeError, KeyError):  # unreadable today: its raw form (it then matches nothing)
        c = copy.deepcopy(cfg)
    c.get("train", {}).pop("out_dir", None)
    c.get("train", {}).pop("device", None)
    return hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest()[:16]


def downsample(points: list[dict], n: int = MAX_POINTS) -> list[dict]:
    """At most n points, evenly spaced by index, first and last kept."""
    if len(points) <= n:
        return list(points)
    idx = sorted({round(i * (len(points) - 1) / (n - 1)) for i in range(n)})
    return [points[i] for i in idx]


def record_digest(rec: dict) -> str:
    """The digest a record carries: its fields other than the digest, as canonical JSON."""
    body = {k: v for k, v in rec.items() if k != DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def seal(rec: dict) -> dict:
    """The record as it will read back from its file (JSON round trip), with its digest."""
    rec = json.loads(json.dumps({k: v for k, v in rec.items() if k != DIGEST}, default=str))
    rec[DIGEST] = record_digest(rec)
    return rec


def record_problem(rec) -> str | None:
    """Why a ledger record cannot be trusted (None: it can): its shape, its final loss, its curve, its digest."""
    if not isinstance(rec, dict):
        return f"it holds a {type(rec).__name__}, not a record"
    for key, kind in REQUIRED.items():
        if not isinstance(rec.get(key), kind):
            return f"its field {key!r} is {rec.get(key)!r} (valid: a {kind.__name__})"
    loss = rec["final"].get("val_loss")
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not math.isfinite(loss):
        return f"its final val_loss is {loss!r} (valid: a finite number)"
    if not rec["val_curve"]:
        return "its validation curve has no point"
    if DIGEST not in rec:
        return (
            "it carries no digest (valid: a record this ledger wrote; tools/ledger_seal.py seals records written "
            "before digests)"
        )
    if rec[DIGEST] != record_digest(rec):
        return "its contents do not match its digest: it was edited after nexus wrote it"
    return None


GROWTH_DIAGNOSTICS = ("symmetry_lock_mean", "symmetry_lock_min", "rms_ratio_max_dev")


def last_growth_diagnostics(rows: list[dict]) -> dict:
    """The last logged value of each post-growth diagnostic (growth/diagnostics.py): whether copied channels are
    still locked to their twins at the end (cosine 1.0) and how far the activation RMS drifted; empty for a run
    that did not grow by copying."""
    out = {}
    for r in rows:
        out.update({f"final_{k}": r[k] for k in GROWTH_DIAGNOSTICS if isinstance(r.get(k), (int, float))})
    return out


def device_line() -> dict:
    import torch

    d = {
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    if torch.cuda.is_available():
        d["cuda_device"] = torch.cuda.get_device_name(0)
    return d


def data_key(cfg: dict) -> str:
    """The corpus a run reads, hashed: its training and validation tokens as the data module loads them."""
    import numpy as np

    from ..config_migration import saved_run_config
    from ..data.loader import DataModule

    dm = DataModule(saved_run_config(copy.deepcopy(cfg)).data, seed=0, quiet=True)
    h = hashlib.sha256()
    for split in (dm.train, dm.val):  # TokenStreams: every source a study can name is read as token ids
        h.update(np.ascontiguousarray(split.tokens).tobytes())
    return h.hexdigest()[:16]


class Ledger:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._data_keys: dict[str, str] = {}  # data section (JSON) -> data_key: one corpus load per ledger

    def data_key(self, cfg: dict) -> str:
        k = json.dumps(cfg.get("data", {}), sort_keys=True, default=str)
        if k not in self._data_keys:
            self._data_keys[k] = data_key(cfg)
        return self._data_keys[k]

    def path(self, name: str) -> Path:
        if not name or name.startswith("/") or ".." in Path(name).parts:
            raise ConfigError(f"ledger run name {name!r} (valid: a relative name such as seed0/sparkling)")
        return self.root / RUNS / f"{name}.json"

    def read(self, name: str) -> dict | None:
        p = self.path(name)
        if not p.is_file():
            return None
        try:
            rec = json.loads(p.read_text())
        except ValueError as e:  # written atomically, so this is a hand-edited or foreign file
            raise ConfigError(
                f"ledger file {str(p)!r} is not valid JSON ({e}) (valid: a file the ledger wrote; "
                f"delete it to rerun that run)"
            ) from None
        problem = record_problem(rec)
        if problem is None and rec["name"] != name:
            problem = f"it records run {rec['name']!r}, not {name!r}"
        if problem:
            raise ConfigError(
                f"ledger file {str(p)!r} is refused: {problem} (valid: the record nexus wrote; delete "
                f"the file to rerun that run)"
            )
        return rec

    def holds(self, name: str, cfg: dict) -> bool:
        """True when the ledger holds this run with this config; a different config there is refused."""
        rec = self.read(name)
        if rec is None:
            return False
        if config_key(rec.get("config") or {}) != config_key(cfg):
            raise ConfigError(
                f"ledger {str(self.path(name))!r} holds run {name!r} with another config "
                f"(key {config_key(rec.get('config') or {})} vs today's {config_key(cfg)}) (valid: the same study "
                f"settings, another --study, or delete that file to rerun it)"
            )
        if rec.get("data_key") != self.data_key(cfg):
            raise ConfigError(
                f"ledger {str(self.path(name))!r} holds run {name!r} trained on another corpus under the "
                f"name data.source={cfg['data'].get('source')!r} (corpus key {rec.get('data_key')} vs "
                f"today's {self.data_key(cfg)}) (valid: that corpus, another --study, or delete the "
                f"file to rerun it)"
            )
        return True

    def record(self, name: str, cfg: dict, result: dict, run_dir: Path, tokens_per_step: int) -> dict:
        """Write the finished run's ledger file (atomically) from its result and its metrics.jsonl, once both are
        proven to be what nexus wrote (the run directory's manifest holds their sha256) and the curve reaches the
        run's last step."""
        from .runs import finished_outputs

        run_dir = Path(run_dir)
        outputs = finished_outputs(run_dir)  # refuses a done.json or metrics.jsonl changed since nexus wrote it
        curve = val_curve(read_metrics(run_dir / "metrics.jsonl"), tokens_per_step)
        last = int(cfg["train"]["steps"])
        if not curve or curve[-1]["step"] != last:
            raise ConfigError(
                f"run directory {str(run_dir)!r}: metrics.jsonl's validation curve ends at step "
                f"{curve[-1]['step'] if curve else None}, not at the run's last step {last} (valid: a "
                f"complete run; delete the directory to train the run again)"
            )
        final = {k: v for k, v in result.items() if isinstance(v, (int, float, str, type(None)))}
        final.update(last_growth_diagnostics(read_metrics(run_dir / "metrics.jsonl")))
        return self.write(name, cfg, final, curve, outputs)

    def write(self, name: str, cfg: dict, final: dict, curve: list[dict], outputs: dict | None = None) -> dict:
        """Write one sealed record (atomically): the run's final metrics and its validation curve (downsampled);
        outputs: the sha256 of the run directory's done.json and metrics.jsonl it was read from."""
        rec = seal(
            {
                "name": name,
                "config_key": config_key(cfg),
                "data_key": self.data_key(cfg),
                "config": cfg,
                "final": final,
                "val_curve": downsample(curve),
                "curve_points_total": len(curve),
                "run_outputs": outputs,
                "device": device_line(),
                "finished_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            }
        )
        problem = record_problem(rec)
        if problem:
            raise ConfigError(f"ledger run {name!r} cannot be recorded: {problem} (valid: a finished run's metrics)")
        p = self.path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(p, rec)
        return rec

    def final_val_loss(self, name: str) -> float:
        rec = self.read(name)
        if rec is None:
            raise ConfigError(
                f"the ledger {str(self.root)!r} holds no run {name!r} yet (valid: run the study "
                f"until it finishes; --estimate says what remains)"
            )
        return float(rec["final"]["val_loss"])

    def curve(self, name: str) -> list[dict]:
        rec = self.read(name)
        return [] if rec is None else rec["val_curve"]

    def names(self) -> list[str]:
        base = self.root / RUNS
        return (
            sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.rglob("*.json"))
            if base.is_dir()
            else []
        )


# ----------------------------------------------------------------------------- the runner
class StudyInterrupted(KeyboardInterrupt):
    """SIGINT / SIGTERM stopped a study at a run boundary: every run in flight saved a checkpoint (or had not
    started), every finished run is in the ledger; running the same command again continues it."""

    def __init__(self, signum: int, finished: int, saved: list[str]):
        import signal

        self.signum, self.finished, self.saved = signum, finished, saved
        self.signal_name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {self.signal_name}: {finished} run(s) finished and in the ledger, "
            f"{len(saved)} in flight saved to resume"
        )


class _Stop(BaseException):
    """Raised by a study's signal handler inside a run but outside the trainer's own signal handling."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_STOP: dict = {"signum": None, "in_job": False}  # this process's stop request, and whether a run is in progress


def _on_signal(signum, frame):
    first = _STOP["signum"] is None
    _STOP["signum"] = _STOP["signum"] or signum
    if first and _STOP["in_job"]:
        raise _Stop(signum)


def _worker_init(parent_pid: int) -> None:
    """A study worker: ends with its runner however that ends (kill -9 included), and stops at a run boundary on
    SIGINT / SIGTERM (the trainer's own handler saves a checkpoint when the signal comes during training)."""
    import signal

    from ..lifeline import die_with

    die_with(parent_pid)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _on_signal)


def run_job(cfg: dict, run_dir: str, start_from: str | None, threads: int) -> dict:
    """One run in this process (a worker's whole job): the result is a function of the config alone, so a run in a
    parallel worker equals the same run alone (tests/test_ledger.py checks it bitwise on the CPU). A stop request
    returns {"interrupted": signal name} instead of a result (the run's newest checkpoint is where it resumes)."""
    import torch

    from nexus.config_migration import saved_run_config
    from nexus.experiments.runs import run_resumable
    from nexus.train.trainer import TrainingInterrupted

    if _STOP["signum"] is not None:
        return {"interrupted": _STOP["signum"]}
    torch.set_num_threads(threads)
    _STOP["in_job"] = True
    try:
        return run_resumable(
            saved_run_config(copy.deepcopy(cfg)),
            Path(run_dir),
            quiet=True,
            say=lambda *_: None,
            start_from=None if start_from is None else Path(start_from),
        )
    except TrainingInterrupted as e:
        _STOP["signum"] = _STOP["signum"] or e.signum
        return {"interrupted": e.signum}
    except _Stop as e:
        return {"interrupted": e.signum}
    finally:
        _STOP["in_job"] = False


def own_start(run: dict) -> int:
    """The step a planned run starts training itself from: its `start_step` where the plan gives one (a segment of a
    branched chain), else the growth step for a branch of a prefix, else 0."""
    if "start_step" in run:
        return int(run["start_step"])
    return int(run.get("grow_step", 0)) if run["kind"] in ("small", "grown") else 0


def trained_steps(run: dict, result: dict) -> int:
    """The steps a planned run trained in the call that finished it, the ones its `wall_s` times: from its own start,
    or from the step checkpoint it resumed (a run stopped and continued times only its last part)."""
    start = own_start(run)
    resumed = str(result.get("resumed_from") or "")
    if resumed.startswith("step_") and resumed[5:].isdigit():
        start = max(start, int(resumed[5:]))
    return int(run["cfg"]["train"]["steps"]) - start


def needed_runs(runs: dict, ledger) -> list[str]:
    """The runs to train now: those the ledger does not hold, and the prefix of any of them whose checkpoint is not
    on this machine, and so on up a chain of branches (a prefix trained in another session is trained again: the same
    config on the same device gives the same checkpoint; its ledger file is kept as it is)."""
    todo = [n for n in runs if ledger is None or not ledger.holds(n, runs[n]["cfg"])]
    for n in todo:  # grows as it goes: a chain of branches (a stable phase in segments) is followed to its start
        after = runs[n]["after"]
        if after and after not in todo and not (Path(runs[after]["cfg"]["train"]["out_dir"]) / "checkpoint").is_dir():
            todo.append(after)
    return todo


def execute(runs: dict, workers: int, threads: int, say, ledger=None, tokens_per_step: int = 0) -> dict:
    """Run every job the ledger does not hold, each once its dependency has finished, `workers` at a time (separate
    processes when > 1; a worker trains exactly what a lone process would: each run seeds itself from its config).
    Each finished run goes into the ledger at once (one file, written atomically).

    SIGINT / SIGTERM stop the study at a run boundary: no run starts after it, every run in flight saves a checkpoint
    and stops, then StudyInterrupted is raised (the same call continues where it stopped). Workers end with this
    process however it ends (a kill -9 included): none is left behind."""
    import multiprocessing
    import signal
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    todo = needed_runs(runs, ledger)
    skipped = len(runs) - len(todo)
    if ledger is not None and skipped:
        say(f"ledger {ledger.root}: {skipped} of {len(runs)} runs already there, skipped; {len(todo)} to run")
    rank = {"prefix": 0, "scratch": 1, "grown": 2, "small": 3}

    def depth(name: str) -> int:  # branches after what they branch from (a chain's segments in order)
        after = runs[name]["after"]
        return 0 if after is None else 1 + depth(after)

    order = sorted(todo, key=lambda k: (depth(k), rank[runs[k]["kind"]]))
    results, saved, t0 = {}, [], time.perf_counter()

    def args(name):
        r = runs[name]
        start = None if r["after"] is None else str(Path(runs[r["after"]]["cfg"]["train"]["out_dir"]) / "checkpoint")
        return r["cfg"], r["cfg"]["train"]["out_dir"], start, threads

    def ready(name):
        after = runs[name]["after"]
        return after is None or after in results or after not in todo

    def finished(name, res):
        if "interrupted" in res:
            saved.append(name)
            return
        results[name] = res
        if ledger is not None and not ledger.holds(name, runs[name]["cfg"]):
            ledger.record(name, runs[name]["cfg"], res, Path(runs[name]["cfg"]["train"]["out_dir"]), tokens_per_step)
        run = runs[name]
        steps = trained_steps(run, res)
        say(
            f"  {time.perf_counter() - t0:7.0f} s  {name:34s} val {res['val_loss']:.4f}  ({res['wall_s']:.0f} s, "
            f"{steps / max(res['wall_s'], 1e-9):.1f} steps/s live)"
        )

    def stopped():
        if _STOP["signum"] is not None:
            raise StudyInterrupted(_STOP["signum"], len(results), saved)

    _STOP["signum"] = None
    before = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if workers <= 1:
            for name in order:
                if _STOP["signum"] is not None:
                    break
                finished(name, run_job(*args(name)))
            stopped()
            return results
        pending, forwarded = list(order), False
        running: dict = {}
        ex = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init, initargs=(os.getpid(),)
        )
        try:
            while (pending and _STOP["signum"] is None) or running:
                for name in [n for n in pending if ready(n)]:
                    if len(running) >= workers or _STOP["signum"] is not None:
                        break
                    pending.remove(name)
                    running[ex.submit(run_job, *args(name))] = name
                if not running:
                    break
                done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                if _STOP["signum"] is not None and not forwarded:
                    _signal_workers(ex, signal.SIGTERM)  # each saves a checkpoint and stops
                    forwarded = True
                for fut in done:
                    finished(running.pop(fut), fut.result())
        except BaseException:
            _signal_workers(ex, signal.SIGTERM)  # the runs in flight save a checkpoint and stop, not run on
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        stopped()
        return results
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _signal_workers(ex, signum: int) -> None:
    import signal

    for pid in list(getattr(ex, "_processes", None) or {}):  # the pool's own workers (a documented-stable dict)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    if signum == signal.SIGTERM:
        _STOP["signum"] = _STOP["signum"] or signum
