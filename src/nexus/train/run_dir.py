"""A training run's directory: where a resumed run writes, its newest checkpoint, and the start-up
clean-up (metrics past the resumed step, the manifest of what the run wrote), pruning, the run's lock.

A checkpoint named `checkpoint` or `step_NNNNNNN` inside a run directory belongs to that run, and a
resumed run continues there. Any other checkpoint (a `nexus grow` / `nexus import` output) is its own
directory, and a run resumed from it writes metrics.jsonl, step_*/ and checkpoint/ inside it, next
to the untouched files it started from. Never into the run recorded in the checkpoint's config: a
copied or grown checkpoint must not write into the run it came from.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..atomic import recover_recorded, remove_recorded, retry_leftovers, write_text_atomic
from ..config import ConfigError
from ..outdir import TRAIN_RUN, acquire_output_lock, forget, held_lock, read_manifest, record
from ..outdir.crash import crash_point
from ..outdir.guard import check_usable, recorded_temporaries
from ..outdir.lock import is_rank0
from ..outdir.manifest import (
    entry_unchanged,
    is_library,
    library_file_owned,
    library_problems,
    remove_dead_manifest_temporaries,
    through_symlink,
)

_CKPT_NAME = re.compile(r"^(checkpoint|step_\d+)$")
# What `nexus train` itself writes into a run directory (besides checkpoints and logger folders)
RUN_FILES = ("metrics.jsonl", "config.yaml", "done.json", "loss_curve.png", "loss_curve.csv")
LOGGER_DIRS = ("tensorboard", "wandb")  # written by the logging libraries a run starts (train.log_to)
_LOGGER_DIRS_STARTED: set[Path] = set()  # logger folders this process's sinks write (resolved): the only ones recorded


def owning_run(ckpt) -> Path | None:
    """The run directory `ckpt` is part of (its manifest lists it), or None for a stand-alone checkpoint."""
    ckpt = Path(ckpt)
    m = read_manifest(ckpt.parent)
    if (
        _CKPT_NAME.match(ckpt.name)
        and m is not None
        and isinstance(m["files"].get(ckpt.name), dict)
        and m["files"][ckpt.name].get("dir") is True
    ):
        return ckpt.parent
    return None


def resume_run_dir(ckpt) -> Path:
    """Where a run resumed from `ckpt` writes by default: its run directory, else the checkpoint's own."""
    return owning_run(ckpt) or Path(ckpt)


def checkpoint_step(ckpt: Path) -> int:
    from ..checkpoint import load_trainer_state

    if ckpt.name.startswith("step_"):
        return int(ckpt.name.split("_")[1])
    st = load_trainer_state(ckpt, with_optimizer=False) or {}
    return int(st.get("step", -1))


def training_checkpoints(run_dir) -> list[Path]:
    """Complete, resumable checkpoints the run directory's manifest records (step_* and checkpoint/),
    oldest step first."""
    run = Path(run_dir)
    m = read_manifest(run)
    if m is None:
        return []
    found = [run / n for n, e in m["files"].items() if _CKPT_NAME.match(n) and isinstance(e, dict) and e.get("dir")]
    found = [d for d in found if (d / "meta.json").is_file() and (d / "trainer_state.pt").is_file()]
    # the final checkpoint sorts after a step checkpoint of the same step
    return sorted(found, key=lambda d: (checkpoint_step(d), d.name == "checkpoint"))


def latest_checkpoint(run_dir) -> Path | None:
    """Newest checkpoint in a run directory by training step (`--resume auto`). Call it holding the
    run's lock (`run_lock`): interrupted saves were recovered when it was taken."""
    ckpts = training_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def run_lock(out_dir, flag: str = "--out"):
    """The run directory's one-writer lock (torchrun rank 0 only; None elsewhere). A lock left by a dead
    run is taken over: its recorded interrupted saves are finished first, the leftovers an earlier save
    could not delete are removed (nexus.atomic.retry_leftovers), and `.notes` says so."""
    if not is_rank0():
        return None
    out = Path(out_dir)
    lk = acquire_output_lock(out, flag)
    lk.notes = [lk.note] if lk.note else []
    if lk.taken_over:
        lk.notes += recover_recorded(lk)
    if lk.parent is None:
        lk.notes += remove_dead_manifest_temporaries(out)
        lk.notes += retry_leftovers(out)  # what an earlier save of the run could not delete
    return lk


def check_in_place(out_dir, flag: str = "--out", log_to=()) -> None:
    """A run continued in place (a resume) writes config.yaml, metrics.jsonl, checkpoint/ and step_*/ in
    `out_dir`, and the folders of the logging libraries in `log_to`: refuse (one line) when the folder
    has no manifest, or when any of those names holds something nexus did not write or that changed since."""
    out = Path(out_dir)
    shown = f"{flag}={str(out)!r}"
    check_usable(out, flag)
    if not out.is_dir() or not any(out.iterdir()):
        return
    m = read_manifest(out)
    if m is None:
        raise ConfigError(
            f"{shown} has no nexus manifest, so nexus will not write into it (valid: --out DIR for the "
            "resumed run, a new or empty directory)"
        )
    pending = recorded_temporaries(out)
    logged = [n for n in LOGGER_DIRS if n in log_to]
    for p in sorted(out.iterdir()):
        if p.name not in RUN_FILES and p.name not in logged and not _CKPT_NAME.match(p.name) or p.name in pending:
            continue
        entry = m["files"].get(p.name)
        if is_library(entry) and p.is_dir() and not p.is_symlink():
            foreign_in_library(out, p.name, entry, shown)
            continue
        if entry is None or not entry_unchanged(p, entry):
            what = "was changed since nexus wrote it" if entry is not None else "was not written by nexus"
            raise ConfigError(
                f"{shown}: {p.name!r} {what}, and the resumed run would write it (valid: move it out "
                "of the folder, or --out DIR for the resumed run)"
            )


def trim_metrics(run_dir, max_step: int | None) -> None:
    """Drop metric records past `max_step` (all when None): the resumed run logs them again. A growth
    event at `max_step` is dropped too (the resumed run grows there again), and a `final` record at
    `max_step` stops being final."""
    f = Path(run_dir) / "metrics.jsonl"
    if not f.is_file():
        return
    keep = []
    for line in f.read_text().splitlines():
        try:
            rec = json.loads(line)
            step = int(rec.get("step", 0))
        except (json.JSONDecodeError, TypeError, ValueError, AttributeError):
            continue  # a line cut short by a kill
        if max_step is None or step > max_step:
            continue
        if step == max_step and rec.get("event") == "growth":
            continue
        if rec.pop("final", None) is not None:
            line = json.dumps(rec)
        keep.append(line)
    write_text_atomic(f, "".join(k + "\n" for k in keep))  # listed in the manifest: entered with its new bytes


def prepare_run_dir(out_dir, resumed_step: int | None) -> list[str]:
    """Start-up of a run directory (main process): give it a manifest and cut metrics.jsonl back to the
    resumed step. Returns a line per repair made."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if read_manifest(out) is None:
        record(out, TRAIN_RUN)
    if resumed_step is not None:
        trim_metrics(out, resumed_step)
    return []


def logger_dir_started(out_dir, name: str) -> None:
    """A logging library this process started writes `out_dir/name` (a LOGGER_DIRS name): recorded by
    record_run_files from now on. Refused (one line) when that name already holds something the run's
    manifest does not record as such a folder: nexus never adopts a user's folder or symlink."""
    out = Path(out_dir)
    p = out / name
    m = read_manifest(out)
    entry = (m or {"files": {}})["files"].get(name)
    if (p.exists() or p.is_symlink()) and (not is_library(entry) or p.is_symlink() or not p.is_dir()):
        raise ConfigError(
            f"--out={str(out)!r}: {name!r} was not written by nexus, and the run would log into it "
            "(valid: move it out of the folder, or drop it from --train.log_to)"
        )
    if p.is_dir():
        foreign_in_library(out, name, entry, f"--out={str(out)!r}")
    _LOGGER_DIRS_STARTED.add(p.resolve())


def foreign_in_library(out: Path, name: str, entry: dict, shown: str) -> None:
    """Refuse (one line) a logging library's folder holding a file the library did not write: the user's,
    which the run's record would adopt. A listed file the library changed in place since (a killed W&B
    run) is its own, which it continues."""
    foreign = [rel for rel, why in library_problems(out / name, entry) if why != "changed"]
    if foreign:
        raise ConfigError(
            f"{shown}: {name + '/' + foreign[0]!r} was not written by nexus, and the run would log into "
            "its folder (valid: move it out of the folder, or drop it from --train.log_to)"
        )


def record_run_files(out_dir) -> None:
    """Record the logger folders this process's logging libraries write (the run's files are entered
    in the manifest by their own writes: metrics.jsonl line by line, the rest at their rename)."""
    out = Path(out_dir)
    started = [n for n in LOGGER_DIRS if (out / n).resolve() in _LOGGER_DIRS_STARTED and (out / n).is_dir()]
    if started or read_manifest(out) is None:
        record(out, TRAIN_RUN, library_dirs=started)


def prune_step_checkpoints(out_dir, step: int, keep_last: int) -> None:
    """Keep the newest `keep_last` step checkpoints (this step's included). Each older one leaves the
    manifest, is renamed aside, then deleted: a kill mid-prune never leaves a half-deleted folder under
    its step name. Every saved checkpoint is finite (save refuses NaN/inf weights), so the newest finite
    one is always kept."""
    out = Path(out_dir)
    older = [d for d in training_checkpoints(out) if d.name.startswith("step_") and checkpoint_step(d) < step]
    doomed = older[: max(len(older) - (keep_last - 1), 0)]
    remove_entries(out, [d.name for d in doomed])


def remove_entries(out_dir, names) -> None:
    """Remove recorded entries of `out_dir`, each before its manifest entry goes: a folder is renamed
    aside (journaled) and deleted, a file unlinked. A kill at any point leaves every name still present
    recorded (a later --overwrite or --resume auto finds only files it can prove are nexus's)."""
    out = Path(out_dir)
    lk = held_lock(out)
    listed = (read_manifest(out) or {"files": {}})["files"]
    for name in names:
        p = out / name
        if is_library(listed.get(name)) and p.is_dir() and not p.is_symlink():
            remove_library_files(p, listed[name])
        elif p.is_dir() and not p.is_symlink():
            remove_recorded(lk, p)
        else:
            p.unlink(missing_ok=True)
        crash_point("entry-removed")
        forget(out, [name])


def remove_library_files(folder: Path, entry: dict) -> None:
    """Remove what a logging library wrote in `folder` (the files its entry lists, still starting with the
    recorded bytes), then the folders left empty; anything else stays where it is."""
    for dirpath, dirs, names in os.walk(folder, topdown=False):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(folder).as_posix()
            if library_file_owned(folder, rel, entry):
                (Path(dirpath) / name).unlink()
        for name in dirs:
            d = Path(dirpath) / name
            if not d.is_symlink() and d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


def clear_run(out_dir) -> None:
    """--overwrite (or a --resume auto restart) of a training run: remove what the manifest records;
    anything else in the folder stays. Checked up front by the command; its files and symlinks checked
    here again (one line, nothing removed): a recorded file changed since would be the user's."""
    out = Path(out_dir)
    m = read_manifest(out)
    if m is None:
        return
    changed = [
        rel
        for rel, e in sorted(m["files"].items())
        if through_symlink(out, rel)
        or (isinstance(e, dict) and not e.get("dir") and (out / rel).exists() and not entry_unchanged(out / rel, e))
    ]
    changed += [
        f"{rel}/{inner}"
        for rel, e in sorted(m["files"].items())
        if is_library(e) and (out / rel).is_dir() and not through_symlink(out, rel)
        for inner, _ in library_problems(out / rel, e)
    ]
    if changed:
        raise ConfigError(
            f"--out={str(out)!r}: {changed[0]!r} was changed since nexus wrote it, so the run is not "
            "replaced (valid: move it out of the folder; nothing was removed)"
        )
    # checkpoints first: a kill midway leaves either a resumable checkpoint with its metrics, or no
    # checkpoint at all (then --resume auto starts the run over, as --overwrite would)
    remove_entries(out, sorted(m["files"], key=lambda n: not _CKPT_NAME.match(n)))


def carry_schedule_and_lr(old, new, *, grown: bool, step: int | None = None) -> list[str]:
    """Training fields on resume (old: the checkpoint's TrainConfig, new: this run's). The LR schedule
    keeps the horizon the run started with, so growing train.steps never makes the LR jump (it stays
    at its floor past the old horizon); an explicit train.schedule_steps re-plans it. A grown checkpoint
    (`grown`) trained further is the exception: its schedule is re-planned over the new train.steps, so
    the entries it had continue the base schedule over the new horizon and its new entries re-warm from
    there (SPARKLING eq. 28), instead of training at the floor. step: where the run continues (named in
    the lr notes). Returns notes."""
    notes = []
    if not new.schedule_steps and new.steps != old.steps:
        if grown and new.steps > (old.schedule_steps or old.steps):
            notes.append(
                f"train.steps {old.steps} -> {new.steps} on a grown checkpoint: the LR schedule is re-planned "
                f"over {new.steps} steps (the base {new.schedule} over the new horizon, new entries re-warm "
                "as the growth recorded; set --train.schedule_steps to choose the horizon)"
            )
            return notes + _lr_notes(old, new, step)
        new.schedule_steps = old.schedule_steps or old.steps
        notes.append(
            f"train.steps {old.steps} -> {new.steps}: the LR schedule keeps its horizon of "
            f"{new.schedule_steps} steps (set --train.schedule_steps to re-plan it)"
        )
    return notes + _lr_notes(old, new, step)


def record_replan(old, new, growth_history: list, step: int | None) -> None:
    """A grown checkpoint whose LR horizon changes at `step` (old -> new TrainConfig): its newest growth
    record says so (`lr_replan`), and the lr moves to the new plan over a bridge instead of jumping to it
    (growth/rewarmup.py; a cosine that had ended would jump from its floor to the middle of the new one)."""
    before, after = old.schedule_steps or old.steps, new.schedule_steps or new.steps
    if growth_history and step is not None and before != after:
        growth_history[-1]["lr_replan"] = {"step": int(step), "horizon_before": int(before)}


def _lr_notes(old, new, step: int | None) -> list[str]:
    notes = []
    at = "from the resumed step on" if step is None else f"from step {step} on"
    pairs = [("train.lr", old.lr, new.lr)]
    if hasattr(old.optimizer, "lr") and hasattr(new.optimizer, "lr"):  # a kind's own lr (muon's matrices)
        pairs.append(("train.optimizer.lr", old.optimizer.lr, new.optimizer.lr))
    for name, a, b in pairs:
        if a != b:
            notes.append(f"{name} {a:g} -> {b:g} {at} (resumed optimizer state kept)")
    return notes


def apply_base_lrs(optimizer, base_lrs: list[float]) -> None:
    """After loading a checkpoint's optimizer state, use this run's base LRs (the stored ones would
    silently win otherwise)."""
    for g, lr in zip(optimizer.param_groups, base_lrs):
        g["base_lr"] = lr
