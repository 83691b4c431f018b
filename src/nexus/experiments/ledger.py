"""A study's ledger: what outlives a session (issue 38 item 1).

A study writes one JSON file per finished run under its ledger directory (benchmarks/results/<study>/runs/),
atomically (temporary name, then rename), as soon as the run finishes: the run's config, its final metrics, and
its validation curve downsampled to at most MAX_POINTS points, enough to redraw every figure and recompute every
table without the run directory (checkpoints and metrics.jsonl stay out of the repository). A rerun of the same
command on any machine skips what the ledger holds and runs the rest.

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
import platform
import time
from pathlib import Path

from ..config import ConfigError
from .curves import read_metrics, val_curve
from .runs import write_json_atomic

RUNS = "runs"
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


def device_line() -> dict:
    import torch

    d = {"torch": torch.__version__, "machine": platform.machine(),
         "cpu_capability": torch.backends.cpu.get_cpu_capability()}
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
    for split in (dm.train, dm.val):
        tokens = getattr(split, "tokens", None)
        h.update(np.ascontiguousarray(tokens).tobytes() if tokens is not None else repr(len(split)).encode())
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
            return json.loads(p.read_text())
        except ValueError as e:  # written atomically, so this is a hand-edited or foreign file
            raise ConfigError(f"ledger file {str(p)!r} is not valid JSON ({e}) (valid: a file the ledger wrote; "
                              f"delete it to rerun that run)") from None

    def holds(self, name: str, cfg: dict) -> bool:
        """True when the ledger holds this run with this config; a different config there is refused."""
        rec = self.read(name)
        if rec is None:
            return False
        if config_key(rec.get("config") or {}) != config_key(cfg):
            raise ConfigError(f"ledger {str(self.path(name))!r} holds run {name!r} with another config "
                              f"(key {config_key(rec.get('config') or {})} vs today's {config_key(cfg)}) (valid: the same study "
                              f"settings, another --study, or delete that file to rerun it)")
        if rec.get("data_key") != self.data_key(cfg):
            raise ConfigError(f"ledger {str(self.path(name))!r} holds run {name!r} trained on another corpus under the "
                              f"name data.source={cfg['data'].get('source')!r} (corpus key {rec.get('data_key')} vs "
                              f"today's {self.data_key(cfg)}) (valid: that corpus, another --study, or delete the "
                              f"file to rerun it)")
        return True

    def record(self, name: str, cfg: dict, result: dict, run_dir: Path, tokens_per_step: int) -> dict:
        """Write the finished run's ledger file (atomically) from its result and its metrics.jsonl."""
        curve = val_curve(read_metrics(Path(run_dir) / "metrics.jsonl"), tokens_per_step)
        final = {k: v for k, v in result.items() if isinstance(v, (int, float, str, type(None)))}
        rec = {"name": name, "config_key": config_key(cfg), "data_key": self.data_key(cfg), "config": cfg, "final": final,
               "val_curve": downsample(curve), "curve_points_total": len(curve), "device": device_line(),
               "finished_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        p = self.path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(p, rec)
        return rec

    def final_val_loss(self, name: str) -> float:
        rec = self.read(name)
        if rec is None:
            raise ConfigError(f"the ledger {str(self.root)!r} holds no run {name!r} yet (valid: run the study "
                              f"until it finishes; --estimate says what remains)")
        return float(rec["final"]["val_loss"])

    def curve(self, name: str) -> list[dict]:
        rec = self.read(name)
        return [] if rec is None else rec["val_curve"]

    def names(self) -> list[str]:
        base = self.root / RUNS
        return sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.rglob("*.json")) if base.is_dir() else []


# ----------------------------------------------------------------------------- the runner
def run_job(cfg: dict, run_dir: str, start_from: str | None, threads: int) -> dict:
    """One run in this process (a worker's whole job): the result is a function of the config alone, so a run in a
    parallel worker equals the same run alone (tests/test_ledger.py checks it bitwise on the CPU)."""
    import torch

    from nexus.config_migration import saved_run_config
    from nexus.experiments.runs import run_resumable

    torch.set_num_threads(threads)
    return run_resumable(saved_run_config(copy.deepcopy(cfg)), Path(run_dir), quiet=True, say=lambda *_: None,
                         start_from=None if start_from is None else Path(start_from))


def needed_runs(runs: dict, ledger) -> list[str]:
    """The runs to train now: those the ledger does not hold, and the prefix of any of them whose checkpoint is not
    on this machine (a prefix trained in another session is trained again: the same config on the same device gives
    the same checkpoint; its ledger file is kept as it is)."""
    todo = [n for n in runs if ledger is None or not ledger.holds(n, runs[n]["cfg"])]
    for n in list(todo):
        after = runs[n]["after"]
        if after and after not in todo and not (Path(runs[after]["cfg"]["train"]["out_dir"]) / "checkpoint").is_dir():
            todo.append(after)
    return todo


def execute(runs: dict, workers: int, threads: int, say, ledger=None, tokens_per_step: int = 0) -> dict:
    """Run every job the ledger does not hold, each once its dependency has finished, `workers` at a time (separate
    processes when > 1; a worker trains exactly what a lone process would: each run seeds itself from its config).
    Each finished run goes into the ledger at once (one file, written atomically)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    import multiprocessing

    todo = needed_runs(runs, ledger)
    skipped = len(runs) - len(todo)
    if ledger is not None and skipped:
        say(f"ledger {ledger.root}: {skipped} of {len(runs)} runs already there, skipped; {len(todo)} to run")
    rank = {"prefix": 0, "scratch": 1, "grown": 2, "small": 3}
    order = sorted(todo, key=lambda k: rank[runs[k]["kind"]])
    results, t0 = {}, time.perf_counter()

    def args(name):
        r = runs[name]
        start = None if r["after"] is None else str(Path(runs[r["after"]]["cfg"]["train"]["out_dir"]) / "checkpoint")
        return r["cfg"], r["cfg"]["train"]["out_dir"], start, threads

    def ready(name):
        after = runs[name]["after"]
        return after is None or after in results or after not in todo

    def finished(name, res):
        results[name] = res
        if ledger is not None and not ledger.holds(name, runs[name]["cfg"]):
            ledger.record(name, runs[name]["cfg"], res, Path(runs[name]["cfg"]["train"]["out_dir"]), tokens_per_step)
        say(f"  {time.perf_counter() - t0:7.0f} s  {name:34s} val {res['val_loss']:.4f}  ({res['wall_s']:.0f} s)")

    if workers <= 1:
        for name in order:
            finished(name, run_job(*args(name)))
        return results
    pending, running = list(order), {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        while pending or running:
            for name in [n for n in pending if ready(n)]:
                if len(running) >= workers:
                    break
                pending.remove(name)
                running[ex.submit(run_job, *args(name))] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                finished(running.pop(fut), fut.result())
    return results
