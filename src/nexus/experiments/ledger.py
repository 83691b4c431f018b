"""A study's ledger: what outlives a session (issue 38 item 1).

A study writes one JSON file per finished run under its ledger directory (benchmarks/results/<study>/runs/),
atomically (temporary name, then rename), as soon as the run finishes: the run's config, its final metrics, and
its validation curve downsampled to at most MAX_POINTS points, enough to redraw every figure and recompute every
table without the run directory (checkpoints and metrics.jsonl stay out of the repository). A rerun of the same
command on any machine skips what the ledger holds and runs the rest.

A run is identified by its name (e.g. "seed0/sparkling") and its config without the paths it writes to: a ledger
file whose config differs from today's plan is a different experiment, refused with one line rather than reused or
overwritten.
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import json
import platform
from pathlib import Path

from ..config import ConfigError
from .curves import read_metrics, val_curve
from .runs import write_json_atomic

RUNS = "runs"
MAX_POINTS = 200  # a regime run evaluates ~20 times; a longer one is thinned to this many points, ends kept


def config_key(cfg: dict) -> str:
    """The config's identity: everything but where it writes (out_dir), hashed."""
    c = copy.deepcopy(cfg)
    c.get("train", {}).pop("out_dir", None)
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


class Ledger:
    def __init__(self, root: Path):
        self.root = Path(root)

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
        if rec.get("config_key") != config_key(cfg):
            raise ConfigError(f"ledger {str(self.path(name))!r} holds run {name!r} with another config "
                              f"(key {rec.get('config_key')} vs today's {config_key(cfg)}) (valid: the same study "
                              f"settings, another --study, or delete that file to rerun it)")
        return True

    def record(self, name: str, cfg: dict, result: dict, run_dir: Path, tokens_per_step: int) -> dict:
        """Write the finished run's ledger file (atomically) from its result and its metrics.jsonl."""
        curve = val_curve(read_metrics(Path(run_dir) / "metrics.jsonl"), tokens_per_step)
        final = {k: v for k, v in result.items() if isinstance(v, (int, float, str, type(None)))}
        rec = {"name": name, "config_key": config_key(cfg), "config": cfg, "final": final,
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
