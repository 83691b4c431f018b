"""Where training metrics go: metrics.jsonl always, TensorBoard and W&B when `train.log_to` names them.

TensorBoard and W&B are optional packages, imported only when chosen; `check_log_targets` runs before
the run writes anything, so a missing package is a one-line config error, not a crash at step 10.
W&B honours its own environment (WANDB_MODE=offline, WANDB_PROJECT, ...) and keeps its files in the
run directory.
"""
from __future__ import annotations

import json
import numbers
from pathlib import Path

from ..config import ConfigError
from ..outdir.crash import crash_point
from .run_dir import record_run_files

TARGETS = ("jsonl", "tensorboard", "wandb")
_PACKAGES = {"tensorboard": ("tensorboard", "pip install tensorboard"), "wandb": ("wandb", "pip install wandb")}


def check_log_targets(targets: list[str]) -> None:
    import importlib.util

    for t in targets:
        if t not in TARGETS:
            raise ConfigError(f"train.log_to={targets!r} (valid: a list of {'|'.join(TARGETS)})")
        if t in _PACKAGES and importlib.util.find_spec(_PACKAGES[t][0]) is None:
            raise ConfigError(f"train.log_to includes {t!r} but the {t} package is not installed "
                              f"(valid: {_PACKAGES[t][1]}, or drop {t})")
    if "wandb" in targets:
        _check_wandb_can_start()


def _check_wandb_can_start() -> None:
    """wandb.init finds no API key, or rejects WANDB_MODE, only after the run directory is written, and then
    as a traceback. wandb.login() runs the same lookup (env, netrc, settings) without writing a run: it
    raises where wandb.init would (UsageError with no key and no terminal, AuthenticationError for a
    malformed key, a ValueError for a bad WANDB_MODE), returns in offline/disabled mode, and on a terminal
    asks once, as wandb.init would."""
    import wandb

    try:
        wandb.login(verify=False)
    except (wandb.errors.Error, ValueError) as e:
        reason = " ".join(str(e).split()).split(" For further information")[0][:300]  # pydantic appends a URL
        raise ConfigError(f"train.log_to includes 'wandb' but W&B cannot start: {reason} "
                          "(valid: `wandb login`, WANDB_API_KEY, WANDB_MODE=offline, or drop wandb)") from None


def _scalars(record: dict) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if isinstance(v, numbers.Real) and not isinstance(v, bool) and k != "step"}


class JsonlSink:
    def __init__(self, out_dir: Path):
        self.path = out_dir / "metrics.jsonl"

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        crash_point("metrics-write")  # the kill tests: a run killed before its first checkpoint

    def close(self) -> None:
        pass


class TensorBoardSink:
    """Scalars under their metrics.jsonl names (train/loss -> "loss"), at the record's step, in out_dir/tensorboard."""

    def __init__(self, out_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out_dir / "tensorboard"))

    def write(self, record: dict) -> None:
        step = int(record.get("step", 0))
        for k, v in _scalars(record).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, out_dir: Path, config: dict, project: str, resume_step: int | None):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=out_dir.name, dir=str(out_dir), config=config,
                              reinit="finish_previous")
        self.resume_step = resume_step

    def write(self, record: dict) -> None:
        self.run.log(_scalars(record), step=int(record.get("step", 0)))

    def close(self) -> None:
        self.run.finish()


class MetricLog:
    """Fans each record out to the chosen sinks (rank 0 only; the trainer does not create it elsewhere)."""

    def __init__(self, out_dir: Path, targets: list[str], config: dict | None = None, project: str = "nexus",
                 resume_step: int | None = None):
        check_log_targets(targets)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.sinks = [JsonlSink(out_dir)]  # metrics.jsonl is always written: the experiments read it
        if "tensorboard" in targets:
            self.sinks.append(TensorBoardSink(out_dir))
        if "wandb" in targets:
            self.sinks.append(WandbSink(out_dir, config or {}, project, resume_step))
        self.out_dir = out_dir
        self.sinks[0].path.touch()
        record_run_files(out_dir)  # metrics.jsonl (and the logger folders) are the run's from the first record on

    def write(self, record: dict) -> None:
        for s in self.sinks:
            s.write(record)

    def close(self) -> None:
        for s in self.sinks:
            s.close()
        record_run_files(self.out_dir)
