"""A training run's directory: where a resumed run writes, its newest checkpoint, and the start-up
clean-up (interrupted saves, metrics past the resumed step, the `.nexus-run` marker).

A checkpoint named `checkpoint` or `step_NNNNNNN` inside a run directory belongs to that run, and a
resumed run continues there. Any other checkpoint (a `nexus grow` / `nexus import` output) is its own
directory, and a run resumed from it writes metrics.jsonl, step_*/ and checkpoint/ inside it, next
to the untouched files it started from. Never into the run recorded in the checkpoint's config: a
copied or grown checkpoint must not write into the run it came from.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from ..atomic import recover, write_text_atomic
from ..outdir import MARKER, TRAIN_RUN, output_kind, write_marker

_CKPT_NAME = re.compile(r"^(checkpoint|step_\d+)$")
# What `nexus train` itself writes into a run directory; --overwrite removes these and nothing else.
RUN_FILES = ("metrics.jsonl", "config.yaml", MARKER, "done.json")


def owning_run(ckpt) -> Path | None:
    """The run directory `ckpt` is part of, or None for a stand-alone checkpoint."""
    ckpt = Path(ckpt)
    if _CKPT_NAME.match(ckpt.name) and output_kind(ckpt.parent) == TRAIN_RUN:
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
    """Complete, resumable checkpoints in a run directory (step_* and checkpoint/), oldest step first."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    found = [d for d in run.iterdir() if _CKPT_NAME.match(d.name) and (d / "meta.json").is_file()
             and (d / "trainer_state.pt").is_file()]
    # the final checkpoint sorts after a step checkpoint of the same step
    return sorted(found, key=lambda d: (checkpoint_step(d), d.name == "checkpoint"))


def latest_checkpoint(run_dir) -> Path | None:
    """Newest checkpoint in a run directory by training step (`--resume auto`)."""
    recover(run_dir)
    ckpts = training_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


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
    write_text_atomic(f, "".join(k + "\n" for k in keep))


def prepare_run_dir(out_dir, resumed_step: int | None) -> list[str]:
    """Start-up of a run directory (main process): restore checkpoints whose save was killed between
    its renames, remove leftovers of dead processes' saves, mark the directory, and cut metrics.jsonl
    back to the resumed step. Returns a line per repair made."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    actions = recover(out)
    if not (out / MARKER).is_file():
        write_marker(out, TRAIN_RUN)
    if resumed_step is not None:
        trim_metrics(out, resumed_step)
    return actions


def clear_run(out_dir) -> None:
    """--overwrite of a training run: remove what nexus wrote there (metrics, config, marker, step and
    final checkpoints); files nexus did not write stay."""
    out = Path(out_dir)
    recover(out)
    for d in training_checkpoints(out):
        shutil.rmtree(d)
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)


def carry_schedule_and_lr(old, new, grown: bool = False) -> list[str]:
    """Training fields on resume (old: the checkpoint's TrainConfig, new: this run's). The LR schedule
    keeps the horizon the run started with, so growing train.steps never makes the LR jump (it stays
    at its floor past the old horizon); an explicit train.schedule_steps re-plans it. A grown checkpoint
    (`grown`) trained further is the exception: its schedule is re-planned over the new train.steps, so
    the entries it had continue the base schedule over the new horizon and its new entries re-warm from
    there (SPARKLING eq. 28), instead of training at the floor. Returns notes."""
    notes = []
    if not new.schedule_steps and new.steps != old.steps:
        if grown and new.steps > (old.schedule_steps or old.steps):
            notes.append(f"train.steps {old.steps} -> {new.steps} on a grown checkpoint: the LR schedule is re-planned "
                         f"over {new.steps} steps (the base {new.schedule} over the new horizon, new entries re-warm "
                         "as the growth recorded; set --train.schedule_steps to choose the horizon)")
            return notes + _lr_notes(old, new)
        new.schedule_steps = old.schedule_steps or old.steps
        notes.append(f"train.steps {old.steps} -> {new.steps}: the LR schedule keeps its horizon of "
                     f"{new.schedule_steps} steps (set --train.schedule_steps to re-plan it)")
    return notes + _lr_notes(old, new)


def _lr_notes(old, new) -> list[str]:
    notes = []
    for field in ("lr", "muon_lr"):
        a, b = getattr(old, field), getattr(new, field)
        if a != b:
            notes.append(f"train.{field} {a:g} -> {b:g} from step on (resumed optimizer state kept)")
    return notes


def apply_base_lrs(optimizer, base_lrs: list[float]) -> None:
    """After loading a checkpoint's optimizer state, use this run's base LRs (the stored ones would
    silently win otherwise)."""
    for g, lr in zip(optimizer.param_groups, base_lrs):
        g["base_lr"] = lr

