"""No command destroys files it did not create: output guards, resume targets, metrics on resume,
interrupted saves, non-finite weights (issues 15 and 18)."""

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

import nexus
from nexus.cli import main

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.steps",
    "4",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.sample_tokens",
    "4",
]


def snapshot(root: Path) -> dict:
    """Every path below root with the sha256 of its bytes (None for directories)."""
    root = Path(root)
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def make_victim(root: Path) -> Path:
    v = root / "victim"
    (v / "sub").mkdir(parents=True)
    (v / "precious.txt").write_text("years of work")
    (v / "sub" / "thesis.tex").write_text("\\section{results}")
    return v


def one_line_exit_2(capsys, argv, needle=None) -> str:
    capsys.readouterr()  # what earlier commands of the test printed is not this command's line
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    if needle:
        assert needle in err, err
    return err


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "base"
    assert main(["train", *MICRO, "--train.steps", "8", "--train.save_every", "4", "--out", str(out), "--quiet"]) == 0
    return out


def _writers(run: Path, out: Path) -> dict:
    ckpt = run / "checkpoint"
    return {
        "train": ["train", *MICRO, "--out", out, "--quiet"],
        "analyze": ["analyze", "params", "--preset", "baseline-micro", "--out", out],
        "grow": ["grow", "--checkpoint", ckpt, "--width.hidden", "48", "--no-verify", "--out", out],
        "export-hf": ["export", "--checkpoint", ckpt, "--format", "hf", "--out", out],
        "import": ["import", "--hf", run / "missing-hf-dir", "--out", out],
        "progressive": ["experiment", "progressive", "--tokens", "8192", "--out", out, "--quiet"],
        "compare": [
            "experiment",
            "compare",
            "--presets",
            "baseline-micro",
            "--seeds",
            "0",
            "--tokens",
            "512",
            "--out",
            out,
            "--quiet",
        ],
    }


WRITERS = ["train", "analyze", "grow", "export-hf", "progressive", "compare"]


@pytest.mark.parametrize("cmd", WRITERS)
def test_out_never_replaces_a_directory_nexus_did_not_write(capsys, tmp_path, run, cmd):
    victim = make_victim(tmp_path)
    before, run_before = snapshot(victim), snapshot(run)
    one_line_exit_2(capsys, _writers(run, victim)[cmd], "not a nexus output")
    assert snapshot(victim) == before
    assert snapshot(run) == run_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]  # no temporary left beside it


@pytest.mark.parametrize("cmd", WRITERS)
def test_out_that_is_a_file_is_refused(capsys, tmp_path, run, cmd):
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    one_line_exit_2(capsys, _writers(run, f)[cmd], "is a file")
    assert f.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("cmd", WRITERS)
@pytest.mark.parametrize("where", ["under-file", "proc", "sys"])
def test_unusable_out_paths_are_one_line(capsys, tmp_path, run, cmd, where):
    f = tmp_path / "afile"
    f.write_text("x")
    out = {"under-file": f / "sub" / "out", "proc": Path("/proc/nexus-out"), "sys": Path("/sys/nexus-out")}[where]
    one_line_exit_2(capsys, _writers(run, out)[cmd], str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and f.read_text() == "x"


def test_grow_into_its_own_run_directory_is_refused(capsys, run):
    before = snapshot(run)
    one_line_exit_2(
        capsys, ["grow", "--checkpoint", run / "checkpoint", "--width.hidden", "48", "--out", run], "source"
    )
    one_line_exit_2(
        capsys,
        ["grow", "--checkpoint", run / "checkpoint", "--width.hidden", "48", "--out", run / "checkpoint" / "inner"],
        "inside the source",
    )
    one_line_exit_2(
        capsys,
        ["export", "--checkpoint", run / "checkpoint", "--format", "hf", "--out", run / "checkpoint" / "hf"],
        "inside the source",
    )
    assert snapshot(run) == before


def test_same_kind_output_needs_overwrite(capsys, tmp_path):
    out = tmp_path / "params"
    argv = ["analyze", "params", "--preset", "baseline-micro", "--out", out]
    assert main([str(a) for a in argv + ["--model.d_model", "32"]]) == 0
    first = (out / "params.json").read_text()
    one_line_exit_2(capsys, argv, "--overwrite")
    assert (out / "params.json").read_text() == first
    assert main([str(a) for a in argv + ["--model.d_model", "64", "--overwrite"]]) == 0
    assert json.loads((out / "params.json").read_text())["total"] > json.loads(first)["total"]


def test_new_train_run_into_an_earlier_run_needs_overwrite(capsys, tmp_path):
    out = tmp_path / "r"
    argv = ["train", *MICRO, "--out", out, "--quiet"]
    assert main([str(a) for a in argv]) == 0
    before = snapshot(out)
    one_line_exit_2(capsys, argv, "--overwrite")
    assert snapshot(out) == before
    assert main([str(a) for a in argv + ["--overwrite"]]) == 0
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(bool(r.get("final")) for r in recs) == 1


def test_grow_then_resume_leaves_the_source_run_byte_identical(tmp_path, run):
    """The README flow: grow a run's checkpoint into runs/wide, then resume runs/wide with more steps."""
    src = tmp_path / "src"
    shutil.copytree(run, src)
    wide = tmp_path / "wide"
    before = snapshot(src)
    assert (
        main(
            ["grow", "--checkpoint", str(src / "checkpoint"), "--width.hidden", "48", "--no-verify", "--out", str(wide)]
        )
        == 0
    )
    grown = snapshot(wide)
    assert main(["train", "--resume", str(wide), "--train.steps", "12", "--quiet"]) == 0
    assert snapshot(src) == before  # the source run: same files, same bytes
    after = snapshot(wide)
    # the grown checkpoint itself is untouched too; only its manifest gains the resumed run's entries
    assert {k: after[k] for k in grown if k != ".nexus-run"} == {k: v for k, v in grown.items() if k != ".nexus-run"}
    assert (wide / "checkpoint" / "model.safetensors").is_file() and (wide / "metrics.jsonl").is_file()
    assert nexus.load(wide / "checkpoint").cfg.d_model == 48


def test_resuming_a_copied_checkpoint_writes_beside_the_copy(tmp_path, run):
    before = snapshot(run)
    copy = tmp_path / "copy"
    shutil.copytree(run / "step_0000004", copy)
    assert main(["train", "--resume", str(copy), "--train.steps", "10", "--quiet"]) == 0
    assert snapshot(run) == before
    assert (copy / "checkpoint" / "meta.json").is_file()
    other = tmp_path / "other"
    assert main(["train", "--resume", str(run / "step_0000004"), "--out", str(other), "--quiet"]) == 0
    assert snapshot(run) == before and (other / "checkpoint" / "meta.json").is_file()


def test_resume_out_inside_the_checkpoint_is_refused(capsys, tmp_path, run):
    before = snapshot(run)
    one_line_exit_2(
        capsys, ["train", "--resume", run / "step_0000004", "--out", run / "step_0000004" / "more"], "inside the source"
    )
    assert snapshot(run) == before


def test_resume_into_another_run_is_refused(capsys, tmp_path, run):
    other = tmp_path / "other"
    assert main(["train", *MICRO, "--out", str(other), "--quiet"]) == 0
    before = snapshot(other)
    one_line_exit_2(capsys, ["train", "--resume", run / "step_0000004", "--out", other], "--overwrite")
    assert snapshot(other) == before


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_cli_resume_trims_metrics_to_the_resumed_step(tmp_path, run):
    r = tmp_path / "r"
    shutil.copytree(run, r)
    assert main(["train", "--resume", str(r / "step_0000004"), "--train.steps", "12", "--quiet"]) == 0
    recs = _records(r)
    train_steps = [x["step"] for x in recs if "loss" in x]
    assert len(train_steps) == len(set(train_steps))
    assert sum(bool(x.get("final")) for x in recs) == 1 and recs[-1]["final"] and recs[-1]["step"] == 12
    assert not list(r.glob(".*tmp*"))


def test_resume_auto_picks_the_newest_checkpoint(tmp_path, capsys):
    out = tmp_path / "r"
    base = ["train", *MICRO, "--train.steps", "6", "--train.save_every", "2", "--out", str(out), "--quiet"]
    assert main(["train", "--resume", "auto", *base[1:]]) == 0  # nothing there yet: a new run
    assert "starting a new run" in capsys.readouterr().err
    shutil.rmtree(out / "checkpoint")  # as if killed after step 4
    assert main(["train", "--resume", "auto", *base[1:], "--train.steps", "8"]) == 0
    assert "step_0000004" in capsys.readouterr().err
    steps = [x["step"] for x in _records(out) if "loss" in x]
    assert steps == sorted(set(steps)) and steps[-1] == 8


def test_resume_error_names_resume(capsys, tmp_path):
    one_line_exit_2(capsys, ["train", "--resume", tmp_path / "nope"], "--resume=")


def test_default_run_keeps_step_checkpoints_the_readme_resumes(tmp_path):
    from nexus.config import TrainConfig

    assert TrainConfig().save_every == 100
    out = tmp_path / "r"
    small = [
        "--preset",
        "baseline-micro",
        "--model.d_model",
        "32",
        "--data.seq_len",
        "16",
        "--train.batch_size",
        "2",
        "--train.eval_every",
        "0",
        "--train.sample_tokens",
        "2",
        "--train.log_every",
        "100",
    ]
    assert main(["train", *small, "--train.steps", "201", "--out", str(out), "--quiet"]) == 0
    assert (out / "step_0000200" / "meta.json").is_file()
    assert main(["train", "--resume", str(out / "step_0000200"), "--train.steps", "202", "--quiet"]) == 0


def test_growing_steps_on_resume_keeps_the_schedule_horizon(tmp_path):
    """Resuming with more steps continues the original schedule (no LR jump); the new steps run at the floor."""
    a, b = tmp_path / "a", tmp_path / "b"
    args = [
        *MICRO,
        "--train.steps",
        "20",
        "--train.warmup_steps",
        "2",
        "--train.save_every",
        "10",
        "--train.log_every",
        "1",
    ]
    assert main(["train", *args, "--out", str(a), "--quiet"]) == 0
    shutil.copytree(a, b)
    assert main(["train", "--resume", str(b / "step_0000010"), "--train.steps", "30", "--quiet"]) == 0
    lr_a = {x["step"]: x["lr"] for x in _records(a) if "lr" in x}
    lr_b = {x["step"]: x["lr"] for x in _records(b) if "lr" in x}
    for s in range(11, 21):
        assert lr_b[s] == pytest.approx(lr_a[s], rel=1e-9)
    floor = 3e-3 * 0.1
    assert all(lr_b[s] == pytest.approx(floor) for s in range(21, 31))
    assert nexus.checkpoint.read_config(b / "checkpoint").train.schedule_steps == 20
    # an explicit horizon re-plans the schedule: at step 11 of 30 the cosine is well above the floor
    c = tmp_path / "c"
    shutil.copytree(a, c)
    assert (
        main(
            [
                "train",
                "--resume",
                str(c / "step_0000010"),
                "--train.steps",
                "30",
                "--train.schedule_steps",
                "30",
                "--quiet",
            ]
        )
        == 0
    )
    assert {x["step"]: x["lr"] for x in _records(c) if "lr" in x}[11] > lr_a[11] * 1.2


def test_lr_on_resume_is_used_and_recorded(tmp_path, run):
    r = tmp_path / "r"
    shutil.copytree(run, r)
    assert (
        main(["train", "--resume", str(r / "step_0000004"), "--train.lr", "1e-4", "--train.log_every", "1", "--quiet"])
        == 0
    )
    recs = [x for x in _records(r) if "lr" in x and x["step"] > 4]
    assert recs and all(x["lr"] == pytest.approx(1e-4 * x["lr_factor"]) for x in recs)
    assert nexus.checkpoint.read_config(r / "checkpoint").train.lr == 1e-4


def test_atomic_dir_write_refuses_to_replace_foreign_directories(tmp_path):
    from nexus.atomic import atomic_dir_write
    from nexus.config import ConfigError

    victim = make_victim(tmp_path)
    before = snapshot(victim)
    with pytest.raises(ConfigError):
        atomic_dir_write(victim, lambda d: (d / "x").write_text("x"), "analysis")
    assert snapshot(victim) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]


# ----------------------------------------------------------------------------- non-finite weights
def test_nonfinite_gradient_norm_skips_the_step(tmp_path):
    from nexus.config_overrides import parse_overrides
    from nexus.presets import get_preset
    from nexus.train.trainer import Trainer

    cfg = get_preset("baseline-micro")
    parse_overrides(cfg, MICRO[2:] + ["--train.out_dir", str(tmp_path / "o")])
    t = Trainer(cfg.validate(), quiet=True)
    p = next(t.model.parameters())
    p.register_hook(lambda g: g * float("inf"))  # finite loss, infinite gradient
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    m = t.read_step_metrics(t.train_step(0))  # metrics stay on the device until read
    assert math.isfinite(m["loss"]) and m["skipped"] and not math.isfinite(m["grad_norm"])
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())


def test_diverging_run_never_saves_or_prunes_into_nonfinite_weights(tmp_path, capsys):
    out = tmp_path / "r"
    code = main(
        [
            "train",
            *MICRO,
            "--train.steps",
            "30",
            "--train.lr",
            "1e30",
            "--train.grad_clip",
            "0",
            "--train.warmup_steps",
            "0",
            "--train.save_every",
            "2",
            "--train.keep_last",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "non-finite" in err, err
    ckpts = sorted(out.glob("step_*"))
    assert ckpts, "the finite checkpoints before the divergence are kept"
    from safetensors.torch import load_file

    for c in ckpts:
        assert all(bool(torch.isfinite(v).all()) for v in load_file(str(c / "model.safetensors")).values()), c


def test_load_refuses_nonfinite_weights_unless_asked(tmp_path, run):
    from safetensors.torch import load_file, save_file

    from nexus.checkpoint import _sha256

    bad = tmp_path / "bad"
    shutil.copytree(run / "checkpoint", bad)
    sd = load_file(str(bad / "model.safetensors"))
    k = next(iter(sd))
    sd[k][0] = float("nan")
    save_file(sd, str(bad / "model.safetensors"))
    meta = json.loads((bad / "meta.json").read_text())
    meta["sha256"]["model.safetensors"] = _sha256(bad / "model.safetensors")
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(nexus.ConfigError, match="NaN"):
        nexus.load(bad)
    assert torch.isnan(nexus.load(bad, allow_nonfinite=True).state_dict()[k]).any()


def test_load_of_a_non_path_is_a_type_error():
    with pytest.raises(TypeError, match="checkpoint directory"):
        nexus.load(123)
