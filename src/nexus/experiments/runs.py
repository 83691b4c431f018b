"""Resumable training runs for experiments.

A run directory is finished when it holds `done.json` (the trainer's result, written atomically
after `fit()`); a finished run is never retrained. An unfinished one resumes from its newest
`step_*` checkpoint (metrics.jsonl is cut back to that step first, so no point is counted twice),
or starts over when it has none. `plan.json` holds the config the directory was started for: a
finished or resumed run is reused only for that config (a study whose tuning picked another lr once
got the old lr's result under the new lr's name); another config is refused in one line.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from ..atomic import guard_output, write_text_atomic
from ..config import ConfigError, RunConfig
from ..outdir import EXPERIMENT, TRAIN_RUN, claim_directory, read_manifest, record
from ..outdir.manifest import entry_unchanged
from ..train.run_dir import remove_entries, trim_metrics

DONE = "done.json"
PLAN = "plan.json"  # the config the run directory was started for (out_dir and device left out)


def _plan_fields(cfg_dict: dict) -> dict:
    """The config's fields in today's parsed form (a field added since takes its default on both sides), without
    where the run writes and what it runs on, flattened to dotted names."""
    from ..config_migration import saved_run_config

    d = saved_run_config(json.loads(json.dumps(cfg_dict, default=str))).to_dict()
    d.get("train", {}).pop("out_dir", None)
    d.get("train", {}).pop("device", None)
    flat = {}

    def walk(x, prefix):
        if isinstance(x, dict) and x:
            for k, v in x.items():
                walk(v, f"{prefix}.{k}" if prefix else k)
        else:
            flat[prefix] = json.dumps(x, sort_keys=True, default=str)

    walk(d, "")
    return flat


def check_plan(run_dir: Path, cfg: RunConfig) -> None:
    """Refuse a run directory started for another config (its plan.json); one without a plan.json predates it."""
    path = Path(run_dir) / PLAN
    if not path.is_file():
        return
    try:
        old = _plan_fields(json.loads(path.read_text()))
    except (ValueError, ConfigError) as e:
        raise ConfigError(
            f"run directory {str(run_dir)!r}: {PLAN} is unreadable ({e}) (valid: the file this run "
            f"wrote; delete the directory to train the run again)"
        ) from None
    new = _plan_fields(cfg.to_dict())
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if changed:
        shown = ", ".join(f"{k}: {old.get(k, '(absent)')} -> {new.get(k, '(absent)')}" for k in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise ConfigError(
            f"run directory {str(run_dir)!r} holds a run of another config ({shown}{more}) (valid: the "
            f"config it was started with, another directory, or delete it to train this config)"
        )


def finished_outputs(run_dir: Path) -> dict:
    """{name: sha256} of a finished run's done.json and metrics.jsonl, each as the run directory's manifest
    recorded it; a file missing, or changed since nexus wrote it (an edited val_loss, another run's done.json
    copied in, a truncated log), is refused in one line: its result is not this run's."""
    run_dir = Path(run_dir)
    files = (read_manifest(run_dir) or {"files": {}})["files"]
    out = {}
    for name in (DONE, "metrics.jsonl"):
        entry = files.get(name)
        if not (isinstance(entry, dict) and entry_unchanged(run_dir / name, entry)):
            raise ConfigError(
                f"run directory {str(run_dir)!r}: {name!r} is not the file nexus wrote there ("
                f"{'not in its manifest' if entry is None else 'changed since'}), so its result cannot "
                f"be trusted (valid: restore it, or delete the directory to train the run again)"
            )
        out[name] = entry["sha256"]
    return out


def is_done(run_dir: Path) -> bool:
    return (Path(run_dir) / DONE).is_file()


def read_done(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / DONE).read_text())


def write_json_atomic(path: Path, obj, enter: bool = False) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=str), enter=enter)


@contextmanager
def experiment_dir(out: Path):
    """Hold an experiment directory while it is written: an earlier experiment there resumes, anything
    else is refused (nexus.atomic.guard_output), one writer at a time; it gets its manifest at once."""
    with guard_output(out, EXPERIMENT, resume=True):
        claim_directory(out, EXPERIMENT, resume=True)
        refuse_edited_files(Path(out))
        yield Path(out)


def refuse_edited_files(out: Path) -> None:
    """An experiment run again rewrites its plan, results, report and plots: refuse (one line, before any
    training) when the user edited one of them since nexus wrote it; the edit is theirs."""
    m = read_manifest(out) or {"files": {}}
    for rel, entry in sorted(m["files"].items()):
        p = out / rel
        if isinstance(entry, dict) and not entry.get("dir") and p.exists() and not entry_unchanged(p, entry):
            raise ConfigError(
                f"--out={str(out)!r}: {rel!r} was changed since nexus wrote it, and running the experiment "
                "again would replace it (valid: move or rename it, or another --out)"
            )


def record_outputs(out: Path, files=(), runs=()) -> None:
    """Record the experiment's own files (paths relative to `out`) and its run directories."""
    out = Path(out)

    def rel(f) -> str:  # a name relative to `out`, or a path that starts with `out`
        p = Path(f)
        return p.relative_to(out).as_posix() if p.parts[: len(out.parts)] == out.parts else p.as_posix()

    record(out, EXPERIMENT, files=[rel(f) for f in files], dirs=[rel(r) for r in runs])


def latest_step_checkpoint(run_dir: Path) -> Path | None:
    steps = sorted(p for p in Path(run_dir).glob("step_*") if (p / "meta.json").is_file())
    return steps[-1] if steps else None


def run_resumable(cfg: RunConfig, run_dir: Path, quiet: bool = True, say=print, start_from: Path | None = None) -> dict:
    """Train `cfg` into `run_dir` unless already finished; returns the trainer's result (+ wall_s).
    `start_from`: a checkpoint the run branches from (its model, optimizer state and step) when `run_dir`
    holds no step checkpoint of its own yet, e.g. every grown variant of one small model, or a decay branched from a
    stable-phase run; it must be this run's own state at that step (nexus.experiments.branch, refused otherwise)."""
    from ..train.trainer import Trainer

    run_dir = Path(run_dir)
    check_plan(run_dir, cfg)
    if is_done(run_dir):
        finished_outputs(run_dir)  # a done.json is believed only as nexus wrote it
        say(f"  {run_dir.name}: finished earlier, skipped")
        return read_done(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if read_manifest(run_dir) is None:  # the trainer's own manifest, made first so that plan.json is entered in it
        record(run_dir, TRAIN_RUN)
    cfg.train.out_dir = str(run_dir)
    resume = latest_step_checkpoint(run_dir)
    if resume is None or not (run_dir / PLAN).is_file():
        write_json_atomic(run_dir / PLAN, cfg.to_dict(), enter=True)
    t0 = time.perf_counter()
    if resume is not None:
        step = _ckpt_step(resume)
        trim_metrics(run_dir, step)
        say(f"  {run_dir.name}: resuming from {resume.name}")
        from ..train.resume import resume_config

        resumed, notes = resume_config(resume, out_dir=run_dir)  # the checkpoint's config: a grown model's shape
        trainer = Trainer(resumed, resume=str(resume), quiet=quiet, notes=notes)
    else:
        trim_metrics(run_dir, None)
        branch_notes: list[str] = []
        if start_from is not None:  # the checkpoint must be this run's state at its step (experiments/branch.py)
            from .branch import branch_config

            cfg, branch_notes = branch_config(start_from, cfg)
        trainer = Trainer(cfg, resume=None if start_from is None else str(start_from), quiet=quiet, notes=branch_notes)
    result = trainer.fit()
    result = {k: v for k, v in result.items() if k != "sample"}
    result["wall_s"] = time.perf_counter() - t0
    result["resumed_from"] = resume.name if resume is not None else None
    if start_from is not None:
        result["branched_from"] = str(start_from)
    write_json_atomic(run_dir / DONE, result, enter=True)
    recorded = (read_manifest(run_dir) or {"files": {}})["files"]
    steps = [n for n in recorded if n.startswith("step_")]  # the final checkpoint supersedes the periodic ones
    remove_entries(run_dir, steps)
    return result


def _ckpt_step(ckpt: Path) -> int:
    from ..checkpoint import load_trainer_state

    st = load_trainer_state(ckpt, with_optimizer=False) or {}
    return int(st.get("step", 0))
