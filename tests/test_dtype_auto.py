"""`--train.dtype auto`, the default (issue 51 item 1): bf16 autocast where the device computes bf16 natively and
the model is wide enough to gain (nexus/train/precision.py, a rule from benchmarks/results/dtype-auto.md), float32
elsewhere; the choice printed once per run; checkpoints fp32; studies and the main job pinned to float32; old saved
configs keep meaning float32. The CPU's flags are monkeypatched, so each verdict is checked on any machine."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from benchmark_module import load_benchmark

from nexus import cpu_info
from nexus.cli import main
from nexus.config import RunConfig, TrainConfig
from nexus.train import precision as P

CPU = torch.device("cpu")
CARD = "benchmarks/results/dtype-auto.md"


@pytest.fixture
def cpu_flags(monkeypatch):
    """Set the CPU's reported flags (and no code-generation restriction) for the rule."""

    def set_flags(*flags):
        monkeypatch.setattr(cpu_info, "cpu_flags", lambda: list(flags))
        monkeypatch.setattr(cpu_info, "restricted_by", lambda: [])

    return set_flags


def _tiny(out, d_model: int, head_dim: int, *extra) -> list[str]:
    """`nexus train` of a one-layer model d_model wide with heads of head_dim, 2 steps of 2 x 16 tokens."""
    return [
        "train",
        "--preset",
        "baseline-micro",
        "--model.d_model",
        str(d_model),
        "--model.n_heads",
        str(d_model // head_dim),
        "--model.n_layers",
        "1",
        "--data.seq_len",
        "16",
        "--train.batch_size",
        "2",
        "--train.steps",
        "2",
        "--train.eval_every",
        "0",
        "--train.eval_batches",
        "1",
        "--train.sample_tokens",
        "1",
        "--out",
        str(out),
        *extra,
    ]


# ----------------------------------------------------------------------------------------------------------- the rule
def test_auto_is_the_default_and_picks_float32_on_a_cpu_without_native_bf16(cpu_flags):
    assert TrainConfig().dtype == "auto"
    cpu_flags("avx2", "avx512f", "avx512_vnni")  # AVX-512 without BF16 (or an AVX2-only CPU): bf16 is converted
    p = P.resolve_precision("auto", CPU, 1024, 64)
    assert (p.dtype, p.autocast) == ("float32", False)
    assert "no avx512_bf16 / amx_bf16" in p.reason
    cpu_flags("avx2")
    assert P.resolve_precision("auto", CPU, 4096, 128).dtype == "float32"


def test_auto_picks_bf16_on_a_cpu_with_native_bf16_at_a_wide_model(cpu_flags):
    for flag in ("avx512_bf16", "amx_bf16"):
        cpu_flags("avx2", "avx512f", flag)
        p = P.resolve_precision("auto", CPU, 512, 64)  # baseline-small: d512, heads of 64 (issue 51's 1.77x)
        assert (p.dtype, p.autocast) == ("bfloat16", True), flag
        assert (
            p.line() == f"dtype: auto -> bfloat16 autocast (CPU has {flag}; d_model 512 at head dim 64 >= 64: {CARD})"
        )
        for d, hd in ((256, 16), (512, 16), (128, 32), (4096, 128)):  # the measured table's gains, and beyond
            assert P.resolve_precision("auto", CPU, d, hd).dtype == "bfloat16", (d, hd)


def test_auto_picks_float32_at_d64_even_with_native_bf16(cpu_flags):
    cpu_flags("avx512_bf16", "amx_bf16")
    # the studies' shape (d 64, heads of 16: 0.56x in bf16), baseline-micro (heads of 32), and the table's other
    # widths that were not faster in every round; a head dim below the table is not measured
    for d, hd in ((64, 16), (64, 32), (128, 16), (255, 16), (127, 32), (512, 8)):
        p = P.resolve_precision("auto", CPU, d, hd)
        assert p.dtype == "float32", (d, hd)
        assert f"head dim {hd}" in p.line() and CARD in p.line()
    assert (
        "d_model 64 at head dim 16 < 256, where bf16 measured no faster"
        in P.resolve_precision("auto", CPU, 64, 16).line()
    )


def test_a_code_generation_restriction_makes_the_flags_no_promise(monkeypatch):
    monkeypatch.setattr(cpu_info, "cpu_flags", lambda: ["avx512_bf16"])
    monkeypatch.setattr(cpu_info, "restricted_by", lambda: ["ONEDNN_MAX_CPU_ISA=AVX2"])
    p = P.resolve_precision("auto", CPU, 1024, 64)
    assert p.dtype == "float32" and "ONEDNN_MAX_CPU_ISA=AVX2" in p.reason


def test_cuda_picks_bf16_from_compute_capability_8_and_other_devices_float32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "GPU X")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    assert P.resolve_precision("auto", torch.device("cuda", 0), 64, 16).dtype == "bfloat16"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))  # a T4: no bf16 tensor cores
    p = P.resolve_precision("auto", torch.device("cuda", 0), 4096, 128)
    assert p.dtype == "float32" and "7.5" in p.reason
    assert P.resolve_precision("auto", torch.device("mps"), 4096, 128).dtype == "float32"


def test_an_explicit_dtype_is_kept_and_a_slow_explicit_bf16_is_named(cpu_flags):
    cpu_flags("avx2")
    assert P.resolve_precision("float32", CPU, 4096, 128).dtype == "float32"
    p = P.resolve_precision("bfloat16", CPU, 64, 16)
    assert p.dtype == "bfloat16" and p.worth_saying and "slow here" in p.line()
    cpu_flags("avx512_bf16")
    assert P.resolve_precision("float32", CPU, 4096, 128).dtype == "float32"
    assert not P.resolve_precision("bfloat16", CPU, 64, 16).worth_saying


# ------------------------------------------------------------------------------------------------------ a real run
def _dtype_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("dtype:")]


def test_a_run_prints_the_choice_once_and_computes_in_it(cpu_flags, tmp_path, capsys, monkeypatch):
    seen = []
    real = torch.autocast

    def spy(*a, **k):  # every autocast the trainer enters, with its dtype
        seen.append(k.get("dtype"))
        return real(*a, **k)

    monkeypatch.setattr(torch, "autocast", spy)
    cpu_flags("avx512_bf16")
    assert main(_tiny(tmp_path / "wide", 64, 64)) == 0  # one head of 64: bf16 from d_model 64
    lines = _dtype_lines(capsys.readouterr().out)
    assert lines == [f"dtype: auto -> bfloat16 autocast (CPU has avx512_bf16; d_model 64 at head dim 64 >= 64: {CARD})"]
    assert seen and set(seen) == {torch.bfloat16}  # 2 steps and the final evaluation, under bf16 autocast
    seen.clear()
    assert main(_tiny(tmp_path / "narrow", 64, 16)) == 0  # the studies' heads of 16
    lines = _dtype_lines(capsys.readouterr().out)
    assert lines == [
        "dtype: auto -> float32 (CPU has avx512_bf16, but d_model 64 at head dim 16 < 256, where bf16 measured no "
        f"faster: {CARD})"
    ]
    assert seen == []


def test_checkpoints_stay_fp32_after_a_bf16_run_and_record_what_the_steps_ran_in(cpu_flags, tmp_path):
    from safetensors.torch import load_file

    from nexus.checkpoint import load_trainer_state

    cpu_flags("avx512_bf16")
    assert main(_tiny(tmp_path / "r", 64, 64, "--quiet")) == 0
    for ckpt in (tmp_path / "r" / "checkpoint", tmp_path / "r" / "step_0000002"):
        if not ckpt.exists():
            continue
        tensors = load_file(str(ckpt / "model.safetensors"))
        assert tensors and {t.dtype for t in tensors.values() if t.is_floating_point()} == {torch.float32}
        st = load_trainer_state(ckpt)
        assert st["dtype"] == "bfloat16"
        moments = [v for s in st["optimizer"]["state"].values() for v in s.values() if torch.is_tensor(v)]
        assert {m.dtype for m in moments if m.is_floating_point() and m.dim() > 0} == {torch.float32}
    assert json.loads((tmp_path / "r" / "checkpoint" / "config.json").read_text())["train"]["dtype"] == "auto"


def test_a_resume_where_auto_resolves_otherwise_says_so_in_one_note(cpu_flags, tmp_path, capsys):
    cpu_flags("avx512_bf16")
    assert main(_tiny(tmp_path / "r", 64, 64, "--quiet")) == 0
    capsys.readouterr()
    ckpt = tmp_path / "r" / "checkpoint"
    cpu_flags("avx2")  # the same checkpoint on a CPU without native bf16
    assert main(["train", "--resume", str(ckpt), "--train.steps", "3", "--quiet"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "dtype" in line]
    assert len(notes) == 1, notes
    assert notes[0].startswith("note: the checkpoint's steps ran in bfloat16, this run continues in float32")
    assert "--train.dtype bfloat16" in notes[0]
    assert "(train.dtype auto: CPU has no avx512_bf16 / amx_bf16" in notes[0]
    # its last step ran in float32: resumed again on the same machine, there is nothing to say
    assert main(["train", "--resume", str(ckpt), "--train.steps", "4", "--quiet"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if "dtype" in line]


def test_a_bad_dtype_is_refused_in_one_line_naming_field_value_and_valid(tmp_path, capsys):
    assert main(_tiny(tmp_path / "r", 64, 16, "--train.dtype", "float16")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "train.dtype='float16'" in err[0] and "auto|float32|bfloat16" in err[0]
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------ what must not change
def test_old_saved_configs_keep_meaning_float32():
    from nexus.config_migration import saved_run_config

    saved = RunConfig().to_dict()
    saved["train"]["dtype"] = "float32"
    assert saved_run_config(copy.deepcopy(saved)).train.dtype == "float32"
    del saved["train"]["dtype"]  # saved before the field existed: it ran in the default of its day
    assert saved_run_config(saved).train.dtype == "float32"
    assert RunConfig().train.dtype == "auto"  # while a new config (or a partial config file) gets today's


def test_the_main_job_pins_float32_and_a_users_dtype_wins():
    from nexus.experiments.progressive import DEFAULT_METHOD, plan_progressive, resolve_method
    from nexus.presets import get_preset

    own = resolve_method(DEFAULT_METHOD).preset
    assert get_preset(own).train.dtype == "auto"  # the main job's preset is at the default
    plan = plan_progressive(out="runs/x")
    dtypes = {c["train"]["dtype"] for per in plan["configs"].values() for c in per.values()}
    assert dtypes == {"float32"}
    plan = plan_progressive(out="runs/x", overrides=["--train.dtype", "bfloat16"])
    assert {c["train"]["dtype"] for per in plan["configs"].values() for c in per.values()} == {"bfloat16"}
    user = "sparkling-dense-tiny"  # a preset named by the user, at auto: pinned too
    assert get_preset(user).train.dtype == "auto"
    plan = plan_progressive(out="runs/x", preset=user)
    assert {c["train"]["dtype"] for per in plan["configs"].values() for c in per.values()} == {"float32"}


def test_nexus_experiment_compare_pins_float32_unless_given():
    from nexus.experiments.compare import plan_compare

    wide_and_narrow = ["baseline-micro", "baseline-small"]  # auto could split them between fp32 and bf16
    plan = plan_compare(wide_and_narrow, seeds=[0], tokens=4096)
    assert {r["config"]["train"]["dtype"] for r in plan["runs"]} == {"float32"}
    plan = plan_compare(wide_and_narrow, seeds=[0], tokens=4096, overrides=["--train.dtype", "auto"])
    assert {r["config"]["train"]["dtype"] for r in plan["runs"]} == {"auto"}


def test_every_study_plan_pins_float32(tmp_path):
    from nexus.experiments.ledger import Ledger
    from nexus.experiments.study_plan import run_overrides

    assert TrainConfig().dtype == "auto"
    regime = load_benchmark("studies/regime_study.py")
    o = run_overrides(regime.R.SCALES["smoke"], "embedded", None)  # each study run's own settings name it too,
    assert o[o.index("--train.dtype") + 1] == "float32"  # whatever the experiment's pin does
    for study in (regime.STUDY, *regime.STUDIES):  # progressive-regime / -main, sparkling-credible, arch, depth
        lrs = getattr(regime.STUDIES.get(study), "TUNE_LRS", regime.TUNE_LRS)
        parts = regime.build("smoke", "embedded", tmp_path / "runs", Ledger(tmp_path / "l"), lrs, study=study)
        dtypes = {r["cfg"]["train"]["dtype"] for part in parts.values() for r in part["runs"].values()}
        assert dtypes == {"float32"}, study
    width = load_benchmark("studies/width_growth.py")
    assert width.small_config(10, 0, tmp_path).train.dtype == "float32"
    higher = load_benchmark("studies/higher_order_tasks.py")
    seen = []

    class Stop(Exception):
        pass

    def trainer(cfg, **kw):
        seen.append(cfg.train.dtype)
        raise Stop

    higher.Trainer = trainer
    with pytest.raises(Stop):
        higher.run("mqar", 1, 0, 2, str(tmp_path / "ho"))
    assert seen == ["float32"]
