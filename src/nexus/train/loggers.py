"""Where training metrics go: metrics.jsonl always, TensorBoard and W&B when `train.log_to` names them.

TensorBoard and W&B are optional packages, imported only when chosen; `check_log_targets` runs before
the run writes anything, so a missing package is a one-line config error, not a crash at step 10.
W&B honours its own environment (WANDB_MODE=offline, WANDB_PROJECT, ...) and keeps its files in the
run directory.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from pathlib import Path

from ..config import ConfigError
from ..config_base import declare_choice
from ..outdir import TRAIN_RUN, read_manifest
from ..outdir.crash import crash_point
from ..outdir.manifest import entry_unchanged, record_growing
from .run_dir import logger_dir_started, record_run_files

SINKS = {
    "jsonl": "metrics.jsonl in the run directory (written whether named or not)",
    "tensorboard": "TensorBoard event files in the run directory (needs the tensorboard package)",
    "wandb": "Weights & Biases (needs the wandb package; WANDB_MODE=offline works without an account)",
}
for _name, _reason in SINKS.items():
    declare_choice("train.log_to", _name, _reason)
TARGETS = tuple(SINKS)
_PACKAGES = {"tensorboard": ("tensorboard", "pip install tensorboard"), "wandb": ("wandb", "pip install wandb")}


def check_log_targets(targets: list[str]) -> None:
    import importlib.util

    for t in targets:
        if t not in TARGETS:
            raise ConfigError(f"train.log_to={targets!r} (valid: a list of {'|'.join(TARGETS)})")
        if t in _PACKAGES and importlib.util.find_spec(_PACKAGES[t][0]) is None:
            raise ConfigError(
                f"train.log_to includes {t!r} but the {t} package is not installed "
                f"(valid: {_PACKAGES[t][1]}, or drop {t})"
            )
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
        raise ConfigError(
            f"train.log_to includes 'wandb' but W&B cannot start: {reason} "
            "(valid: `wandb login`, WANDB_API_KEY, WANDB_MODE=offline, or drop wandb)"
        ) from None


def _scalars(record: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in record.items()
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and k != "step"
    }


class JsonlSink:
    """metrics.jsonl, appended line by line. Before each line its manifest entry records the bytes so far
    and the line about to follow, so the file is provably nexus's after a kill at any moment, and a
    line anyone else adds is not (nexus.outdir.manifest.entry_unchanged). The running hash is kept here:
    no line is ever read back."""

    def __init__(self, out_dir: Path):
        self.out_dir, self.path = out_dir, out_dir / "metrics.jsonl"
        if self.path.exists() or self.path.is_symlink():
            m = read_manifest(out_dir)
            entry = (m or {"files": {}})["files"].get(self.path.name)
            if entry is None or not entry_unchanged(self.path, entry):
                self._refuse("was changed since nexus wrote it" if entry else "was not written by nexus")
        else:
            self._enter(0, hashlib.sha256().hexdigest())
            self.path.touch()
        self._rehash()

    def _refuse(self, what: str) -> None:
        raise ConfigError(
            f"--out={str(self.out_dir)!r}: 'metrics.jsonl' {what}, and the run would append to it "
            "(valid: move it out of the folder; nexus never adds to a file that is not its own)"
        )

    def _rehash(self) -> None:
        self.hasher = hashlib.sha256(self.path.read_bytes())
        self.size = self.path.stat().st_size

    def _enter(self, size: int, digest: str, appending: str | None = None) -> None:
        record_growing(self.out_dir, TRAIN_RUN, self.path.name, size, digest, appending)

    def write(self, record: dict) -> None:
        line = json.dumps(record) + "\n"
        if self.path.stat().st_size != self.size:  # nexus alone appends, and only here: someone else wrote it
            self._refuse("was changed while the run wrote it")
        self._enter(self.size, self.hasher.hexdigest(), appending=line)
        with open(self.path, "a") as f:
            f.write(line)
        self.hasher.update(line.encode())
        self.size += len(line.encode())
        crash_point("metrics-write")  # the kill tests: a run killed before its first checkpoint

    def close(self) -> None:
        if self.path.is_file() and self.path.stat().st_size == self.size:
            self._enter(self.size, self.hasher.hexdigest())


class TensorBoardSink:
    """Scalars under their metrics.jsonl names (train/loss -> "loss"), at the record's step, in out_dir/tensorboard."""

    def __init__(self, out_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        logger_dir_started(out_dir, "tensorboard")
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

        logger_dir_started(out_dir, "wandb")
        self.wandb = wandb
        self.run = wandb.init(
            project=project, name=out_dir.name, dir=str(out_dir), config=config, reinit="finish_previous"
        )
        self.resume_step = resume_step

    def write(self, record: dict) -> None:
        self.run.log(_scalars(record), step=int(record.get("step", 0)))

    def close(self) -> None:
        self.run.finish()


class MetricLog:
    """Fans each record out to the chosen sinks (rank 0 only; the trainer does not create it elsewhere)."""

    def __init__(
        self,
        out_dir: Path,
        targets: list[str],
        config: dict | None = None,
        project: str = "nexus",
        resume_step: int | None = None,
    ):
        check_log_targets(targets)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.sinks = [JsonlSink(out_dir)]  # metrics.jsonl is always written: the experiments read it
        if "tensorboard" in targets:
            self.sinks.append(TensorBoardSink(out_dir))
        if "wandb" in targets:
            self.sinks.append(WandbSink(out_dir, config or {}, project, resume_step))
        self.out_dir = out_dir
        record_run_files(out_dir)  # the logger folders are the run's from the first record on

    def write(self, record: dict) -> None:
        for s in self.sinks:
            s.write(record)

    def close(self) -> None:
        for s in self.sinks:
            s.close()
        record_run_files(self.out_dir)
