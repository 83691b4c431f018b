"""A run killed at any moment continues with the same command plus `--resume auto` (issue 28 item 3).

Each kill is injected at a named point (NEXUS_CRASH_AT=<point>[:<nth time>], nexus/outdir/crash.py):
the process exits there with code 137, as `kill -9` at that instant would, so no test depends on timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nexus

RUN = [
    "--preset",
    "baseline-micro",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.eval_every",
    "0",
    "--train.sample_tokens",
    "4",
    "--train.log_every",
    "1",
    "--quiet",
]


def nexus_cli(args, tmp_path: Path, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(nexus.__file__).parents[1]),
        OMP_NUM_THREADS="1",
        NEXUS_CACHE=str(tmp_path / "cache"),
    )
    env.pop("NEXUS_CRASH_AT", None)
    if crash_at:
        env["NEXUS_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "nexus", *map(str, args)], env=env, capture_output=True, text=True, timeout=300
    )


def train_steps(out: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def leftovers(folder: Path) -> list[str]:
    """Temporaries and locks (nexus's bookkeeping names) left in a folder."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".nexus-run")


def assert_finished(out: Path, steps: int) -> None:
    assert train_steps(out) == list(range(1, steps + 1))  # every step once, in order
    assert nexus.load(out / "checkpoint") is not None
    assert leftovers(out) == [] and leftovers(out.parent) == []


def saved_step(ckpt: Path) -> int:
    from nexus.checkpoint import load_trainer_state

    return load_trainer_state(ckpt, with_optimizer=False)["step"]


def crash_then_resume(tmp_path: Path, argv: list, point: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "run"
    killed = nexus_cli(["train", *argv, "--out", out], tmp_path, crash_at=point)
    assert killed.returncode == 137, killed.stderr[-2000:]
    again = nexus_cli(["train", *argv, "--out", out, "--resume", "auto"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    return again, out


def test_killed_before_its_first_checkpoint_the_same_command_starts_it_over(tmp_path):
    again, out = crash_then_resume(tmp_path, [*RUN, "--train.steps", "6", "--train.save_every", "4"], "metrics-write:2")
    assert "starting the run over" in again.stderr and "took over the lock" in again.stderr
    assert_finished(out, 6)


def test_killed_while_a_step_checkpoint_is_written_resumes_from_the_one_before(tmp_path):
    # the 2nd step save dies after its files are complete, before the rename: step 2 is the newest
    again, out = crash_then_resume(
        tmp_path, [*RUN, "--train.steps", "6", "--train.save_every", "2"], "swap-before-rename:2"
    )
    assert "resuming from" in again.stderr and "step_0000002" in again.stderr
    assert_finished(out, 6)


def test_killed_while_pruning_never_leaves_a_half_deleted_checkpoint_under_its_name(tmp_path):
    argv = [*RUN, "--train.steps", "8", "--train.save_every", "2", "--train.keep_last", "1"]
    out = tmp_path / "run"
    killed = nexus_cli(["train", *argv, "--out", out], tmp_path, crash_at="prune-after-rename")
    assert killed.returncode == 137
    # step 2 was renamed aside before its deletion began; step 4, just saved, is whole
    assert not (out / "step_0000002").exists() and any(".step_0000002.del-" in n for n in leftovers(out))
    assert nexus.load(out / "step_0000004") is not None
    again = nexus_cli(["train", *argv, "--out", out, "--resume", "auto"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "step_0000004" in again.stderr and "removed .step_0000002.del-" in again.stderr
    assert_finished(out, 8)


def test_killed_between_the_two_renames_of_a_replaced_checkpoint(tmp_path):
    out = tmp_path / "run"
    argv = [*RUN, "--train.steps", "4", "--out", out]
    assert nexus_cli(["train", *argv], tmp_path).returncode == 0
    more = ["train", *argv, "--train.steps", "6", "--resume", "auto"]
    assert saved_step(out / "checkpoint") == 4
    killed = nexus_cli(more, tmp_path, crash_at="swap-between-renames")
    assert killed.returncode == 137
    assert not (out / "checkpoint").exists()  # the moment a kill leaves behind: no checkpoint under its name
    # both versions sit beside it, and they differ (step 4 and step 6), so the test can tell which survives
    sides = {n.split(".")[2].split("-")[0]: out / n for n in leftovers(out) if n.startswith(".checkpoint.")}
    assert saved_step(sides["old"]) == 4 and saved_step(sides["new"]) == 6
    again = nexus_cli(more, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "restored" in again.stderr and "(new version)" in again.stderr
    assert saved_step(out / "checkpoint") == 6  # the complete new version was put in place, not the old one
    assert_finished(out, 6)


def test_ternary_export_killed_before_its_rename_leaves_a_recorded_temporary_the_next_export_removes(tmp_path):
    from nexus.checkpoint import save_checkpoint
    from nexus.config import ModelConfig, RunConfig
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.models import build_model
    from nexus.models.recurrent import RecurrentOptions

    cfg = RunConfig(
        model=ModelConfig(arch=RecurrentOptions(n_sup=2, t_inner=2), d_model=32, n_layers=2, n_heads=1, ffn_hidden=80)
    )
    ckpt = save_checkpoint(tmp_path / "ckpt", build_model(cfg.model), cfg, ByteTokenizer())
    out = tmp_path / "exports" / "model.ternary"
    argv = ["export", "--checkpoint", ckpt, "--format", "ternary", "--out", out]
    killed = nexus_cli(argv, tmp_path, crash_at="file-before-rename")
    assert killed.returncode == 137
    assert not out.exists() and any(".tmp-" in n for n in leftovers(out.parent))  # the full-size temporary
    again = nexus_cli(argv, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "took over the lock" in again.stderr and "removed .model.ternary.tmp-" in again.stderr
    assert leftovers(out.parent) == [] and out.is_file()
    from nexus.export.ternary import load_ternary

    load_ternary(out)


# ----------------------------------------------------------------------------- issue 42 item 2: every kill resumable
def manifest_owns_everything(out: Path) -> None:
    """The finished run's manifest accounts for every name in it: a later --overwrite would go through."""
    from nexus.outdir.manifest import ownership_problems

    assert ownership_problems(out) == []


SLOW = pytest.mark.slow  # ~30 s each on the shared 2-core machine: the named points stay in the default suite


@pytest.mark.parametrize(
    "point",
    [
        "dir-after-rename@step_0000002",  # the step checkpoint renamed into place, the run's manifest not yet updated
        "file-after-rename@loss_curve.csv",
        pytest.param("file-after-rename@config.yaml", marks=SLOW),
        pytest.param("file-after-rename@loss_curve.png", marks=SLOW),
        # a manifest update itself cut short (its temporary written, not renamed)
        pytest.param("manifest-before-rename:4", marks=SLOW),
        pytest.param(
            "metrics-write:3", marks=SLOW
        ),  # after a line was appended (its manifest entry announced it first)
    ],
)
def test_a_kill_between_a_rename_and_its_manifest_entry_resumes_with_the_same_command(tmp_path, point):
    argv = [*RUN, "--train.steps", "4", "--train.save_every", "2"]
    again, out = crash_then_resume(tmp_path, argv, point)
    assert "not written by nexus" not in again.stderr
    assert_finished(out, 4)
    manifest_owns_everything(out)


@SLOW
def test_a_kill_after_the_loss_curve_of_a_resumed_run_replaced_the_old_one(tmp_path):
    """loss_curve.csv already recorded, replaced by a longer one, killed before its entry follows: the
    next run recognises nexus's own completed rename by the hash its journal holds."""
    out = tmp_path / "run"
    argv = ["train", *RUN, "--train.save_every", "2", "--out", out]
    assert nexus_cli([*argv, "--train.steps", "4"], tmp_path).returncode == 0
    more = [*argv, "--train.steps", "6", "--resume", "auto"]
    killed = nexus_cli(more, tmp_path, crash_at="file-after-rename@loss_curve.csv")
    assert killed.returncode == 137
    again = nexus_cli(more, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert_finished(out, 6)
    manifest_owns_everything(out)


@pytest.mark.parametrize(
    "point, then",
    [
        ("prune-after-rename", "--overwrite"),  # a checkpoint renamed aside, not yet deleted nor forgotten
        pytest.param("prune-after-rename", "--resume auto", marks=SLOW),
        pytest.param("entry-removed:2", "--overwrite", marks=SLOW),  # removed, its entry not yet forgotten
        pytest.param("entry-removed:2", "--resume auto", marks=SLOW),
        pytest.param("entry-removed:5", "--overwrite", marks=SLOW),  # past the checkpoints, among the files
        pytest.param("entry-removed:5", "--resume auto", marks=SLOW),
    ],
)
def test_an_overwrite_killed_midway_finishes_on_the_next_run(tmp_path, point, then):
    out = tmp_path / "run"
    argv = ["train", *RUN, "--train.steps", "4", "--train.save_every", "2", "--out", out]
    assert nexus_cli(argv, tmp_path).returncode == 0
    killed = nexus_cli([*argv, "--overwrite"], tmp_path, crash_at=point)
    assert killed.returncode == 137, killed.stderr[-2000:]
    again = nexus_cli([*argv, *then.split()], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert_finished(out, 4)
    manifest_owns_everything(out)
