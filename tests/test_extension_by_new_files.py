"""Issue 37's proof that a contributor extends nexus with new files only: a sigmoid-attention kind, a ReLU^2
MLP kind that width growth grows, a preset and a growth family (`zero_units`), each written as a contributor
would write it (tests/fixtures/extension_kinds/<feature>/, laid out as under src/nexus/) into a copy of
src/nexus (and issue 49's: an optimizer, Lion, with its own betas, a schedule, a 1 - sqrt cooldown, and a data
source format, tab-separated rows). A fresh
interpreter with the copy on its path then

  * lists the new entry from the command line (torch-free: `nexus config`, `nexus presets`, `nexus grow --help`),
  * trains a tiny model with it through `nexus train`,
  * passes the invariant tests that run over whatever is registered (tests/test_kind_declarations.py, ...),
  * for the MLP kind and the growth family: grows a trained checkpoint with `nexus grow` and the grown model
    computes the logits the trained one did,

and every file the copy had before is byte-identical afterwards: the feature took 0 edits. (The fifth
feature of the issue, the per-layer grad-norm hook, is src/nexus/train/grad_norm.py: tests/test_grad_norm_hook.py.)

Run by pytest, this module makes the copies and starts the interpreter; run as a script (`python
tests/test_extension_by_new_files.py WORK FEATURE...`, the copy on PYTHONPATH) it is that interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures" / "extension_kinds"
PACKAGE = TESTS.parent / "src" / "nexus"
FEATURES = (
    "sigmoid_attention",
    "relu2_mlp",
    "deep_narrow_preset",
    "zero_units_growth",
    "lion_optimizer",
    "wsd_sqrt_schedule",
    "tsv_source",
)
# a short run: 2 steps of a 2x32 model, no evaluation or sample until the end
TINY_RUN = [
    "--train.steps",
    "2",
    "--train.log_every",
    "1",
    "--train.eval_every",
    "0",
    "--train.eval_batches",
    "1",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.sample_tokens",
    "4",
    "--quiet",
]
MICRO = ["--preset", "baseline-micro", "--model.d_model", "32", "--model.ffn_hidden", "64"]
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # tests/test_width_axes_declared_by_kinds.py's for an exact growth


def fixture_files(feature: str) -> dict[str, bytes]:
    """{path under src/nexus: content} of a feature's files."""
    root = FIXTURES / feature
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.py"))}
    assert files, f"no files for feature {feature!r} under {root}"
    return files


def snapshot(package: Path) -> dict[str, bytes]:
    return {
        p.relative_to(package).as_posix(): p.read_bytes()
        for p in sorted(package.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def run_in_copy(tmp_path: Path, features: list[str]) -> None:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "nexus", ignore=shutil.ignore_patterns("__pycache__"))
    before = snapshot(src / "nexus")
    added = {}
    for feature in features:
        for rel, text in fixture_files(feature).items():
            assert rel not in before and rel not in added, f"{feature}: {rel} exists already (a new file must be new)"
            target = src / "nexus" / rel
            assert target.parent.is_dir(), f"{feature}: {rel} needs a new package folder"
            target.write_bytes(text)
            added[rel] = text
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "NEXUS_DISABLE_PLUGINS": "1",
    }
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, __file__, str(work), *features], env=env, cwd=work, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.splitlines()[-1] == f"checked {' '.join(features)}", proc.stdout[-2000:]
    after = snapshot(src / "nexus")
    assert {rel: after[rel] for rel in before} == before  # 0 edits to the files nexus had
    assert set(after) == set(before) | set(added)  # and nothing written into the package while it ran


def test_the_four_features_together_take_new_files_only(tmp_path):
    run_in_copy(tmp_path, list(FEATURES))


@pytest.mark.slow
@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_alone_takes_new_files_only(tmp_path, feature):
    """Alone, so no feature leans on another's files."""
    run_in_copy(tmp_path, [feature])


# ----------------------------------------------------------------------------- the interpreter on the copy
def cli(*argv: str) -> str:
    """`nexus ARGV` in this process; its stdout. A nonzero exit code fails the check with its message."""
    import contextlib
    import io

    from nexus.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code == 0, f"nexus {' '.join(argv)}: exit {code}: {err.getvalue()[-2000:]}"
    return out.getvalue()


TORCH_FREE = (
    "import json, sys, io, contextlib; from nexus.cli import main\n"
    "outs = []\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    out = io.StringIO()\n"
    "    with contextlib.redirect_stdout(out): rc = main(argv)\n"
    "    assert rc == 0, (argv, rc)\n"
    "    outs.append(out.getvalue())\n"
    "assert 'torch' not in sys.modules, 'torch imported'\n"
    "print(json.dumps(outs))"
)


def listed(*commands: list[str]) -> list[str]:
    """The stdout of `nexus ARGV` for each command, run in one fresh interpreter that must not import torch
    (kinds' options and presets are torch-free)."""
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_FREE, json.dumps(commands)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def train(out: Path, *argv: str) -> Path:
    """`nexus train` for 2 steps; the run's checkpoint, its losses finite."""
    import math

    cli("train", *argv, *TINY_RUN, "--train.out_dir", str(out))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) >= 2 and all(math.isfinite(x) for x in losses), losses
    return out / "checkpoint"


def grown_logits_equal(work: Path, checkpoint: Path, family: str, *growth: str) -> None:
    """`nexus grow` with `growth` (options of `family`); the grown model's logits equal the trained one's."""
    import torch

    from nexus.checkpoint import load_checkpoint

    out = work / "grown"
    report = json.loads(cli("grow", "--checkpoint", str(checkpoint), "--out", str(out), "--json", *growth))
    (old, old_cfg, _), (new, new_cfg, _) = load_checkpoint(checkpoint), load_checkpoint(out)
    assert new_cfg.growth_history[-1]["family"] == family
    assert sum(p.numel() for p in new.parameters()) > sum(p.numel() for p in old.parameters())
    x = torch.randint(0, old_cfg.model.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before, after = old.eval()(x).logits, new.eval()(x).logits
    torch.testing.assert_close(after, before, **TOLERANCE)
    assert report["verify"]["max_abs_dlogits"] <= TOLERANCE["atol"], report["verify"]
    assert not report["verify"]["dead_blocks"], report["verify"]["dead_blocks"]


def module_types(checkpoint: Path) -> set[str]:
    from nexus.checkpoint import load_checkpoint

    return {type(m).__name__ for m in load_checkpoint(checkpoint)[0].modules()}


def check_sigmoid_attention(work: Path) -> list[str]:
    yaml_file = work / "sigmoid.yaml"
    yaml_file.write_text("model:\n  attention: {kind: sigmoid, length_bias: false}\n")
    kinds, options = listed(
        ["config", "--section", "model.attention.kind"],
        ["config", "--preset", "baseline-micro", "--config", str(yaml_file), "--section", "model.attention"],
    )
    assert "|sigmoid" in kinds.split("(valid: ")[1], kinds
    assert "model.attention.length_bias = False" in options, options
    ckpt = train(work / "sigmoid", *MICRO, "--model.attention.kind", "sigmoid")
    assert "SigmoidAttention" in module_types(ckpt)
    return [
        "tests/test_kind_declarations.py::test_each_kind_counts_its_parameters_and_declares_its_width_roles"
        "[attention-sigmoid]"
    ]


def check_relu2_mlp(work: Path) -> list[str]:
    (line,) = listed(["config", "--section", "model.mlp.kind"])
    assert "|relu2" in line.split("(valid: ")[1], line
    ckpt = train(work / "relu2", *MICRO, "--model.mlp.kind", "relu2")
    types = module_types(ckpt)
    assert "ReLU2MLP" in types and "SwiGLU" not in types, types
    grown_logits_equal(work, ckpt, "width", "--width.ffn", "128", "--init", "copy,copy", "--preserve", "exact")
    return [
        "tests/test_kind_declarations.py::test_each_kind_counts_its_parameters_and_declares_its_width_roles[mlp-relu2]",
        "tests/test_width_axes_declared_by_kinds.py::test_every_registered_mlp_kind_declares_each_axis_it_reports",
    ]


def check_deep_narrow_preset(work: Path) -> list[str]:
    from nexus.kind_options.param_formula import count
    from nexus.models.accounting import param_count_for_config
    from nexus.presets import get_preset

    row = next(r for r in listed(["presets"])[0].splitlines() if r.startswith("deep-narrow-micro "))
    cfg = get_preset("deep-narrow-micro")
    assert f"{count(cfg.model)['total'] / 1e6:.2f}M" in row and "deep and thin" in row, row
    assert count(cfg.model)["total"] == param_count_for_config(cfg.model)["total"]  # the preset counting invariant
    ckpt = train(work / "deep", "--preset", "deep-narrow-micro")
    assert json.loads((ckpt / "config.json").read_text())["model"]["n_layers"] == 6
    return ["tests/test_core_config.py::test_every_preset_validates"]


def check_zero_units_growth(work: Path) -> list[str]:
    help_text = " ".join(cli("grow", "--help").split())
    assert "growth: zero_units (Zero units: widen the MLP's inner axis" in help_text
    assert "--zero-units N new inner size of the MLP" in help_text
    ckpt = train(work / "zero", *MICRO)
    grown_logits_equal(work, ckpt, "zero_units", "--zero-units", "96")
    # the same family inside training: `nexus train` takes its flag and grows at step 1 of 2
    grown = train(work / "zero_in_run", *MICRO, "--grow-at", "1", "--zero-units", "96")
    cfg = json.loads((grown / "config.json").read_text())
    assert cfg["model"]["ffn_hidden"] == 96 and cfg["growth_history"][-1]["family"] == "zero_units"
    return [
        "tests/test_growth_specs.py::test_cli_flags_are_generated_from_the_spec_fields_with_their_reasons",
        "tests/test_growth_spec_flags.py::"
        "test_help_groups_every_flag_once_under_its_family_with_its_reason_and_default",
        "tests/test_growth_registry.py::test_families_are_the_registered_growers_sorted",
    ]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def check_lion_optimizer(work: Path) -> list[str]:
    """Issue 49 item 4: Lion with its own betas (the paper's 0.9/0.99, not AdamW's), from two new files."""
    (line,) = listed(["config", "--section", "train.optimizer.kind"])
    assert "|lion" in line.split("(valid: ")[1], line
    yaml_file = work / "lion.yaml"
    yaml_file.write_text("train:\n  optimizer: lion\n")
    (lion,) = listed(
        ["config", "--preset", "baseline-micro", "--config", str(yaml_file), "--section", "train.optimizer"]
    )
    assert "train.optimizer.betas = [0.9, 0.99]" in lion, lion
    ckpt = train(work / "lion", *MICRO, "--train.optimizer", "lion", "--train.lr", "3e-4")
    saved = json.loads((ckpt / "config.json").read_text())["train"]["optimizer"]
    assert saved == {"kind": "lion", "betas": [0.9, 0.99]}, saved
    import torch

    state = torch.load(ckpt / "trainer_state.pt", weights_only=True)["optimizer"]
    assert set(state["groups"]) == {"lion"} and state["groups"]["lion"][0]["betas"] == [0.9, 0.99]
    grown_logits_equal(work, ckpt, "width", "--width.hidden", "64", "--init", "copy,copy", "--preserve", "exact")
    node = "tests/test_optimizer_kinds.py::test_"
    return [
        f"{node}{t}[lion]"
        for t in (
            "every_kind_declares_its_options_and_builds_a_contract_optimizer",
            "save_and_resume_continue_bitwise",
            "a_non_finite_step_changes_nothing",
            "growth_extends_every_declared_state_tensor",
        )
    ]


def check_wsd_sqrt_schedule(work: Path) -> list[str]:
    """Issue 49 item 4: a 1 - sqrt cooldown from one new file; the lr applied is its formula at every step."""
    import math

    (line,) = listed(["config", "--section", "train.schedule"])
    assert "|wsd_sqrt" in line.split("(valid: ")[1], line
    run = work / "wsd_sqrt"
    train(
        run,
        *MICRO,
        "--train.schedule",
        "wsd_sqrt",
        "--train.warmup_steps",
        "0",
        "--train.decay_fraction",
        "0.5",
        "--train.min_lr_ratio",
        "0.1",
    )
    factors = [r["lr_factor"] for r in metrics(run) if "lr_factor" in r]
    want = [1.0, 0.1 + 0.9 * (1 - math.sqrt(1.0))]  # 2 steps, the last one decaying: D = 1, progress 1 at T_last
    assert factors == want, factors
    node = "tests/test_schedule_kinds.py::test_every_registered_kind_"
    return [f"{node}keeps_the_invariants", f"{node}is_re_planned_after_growth[wsd_sqrt]"]


def check_tsv_source(work: Path) -> list[str]:
    """Issue 49 item 4: a source format (.tsv) from one new file: listed by the help texts and the unknown-suffix
    line, prepared, trained on, and held to the registry-wide source invariants."""
    from nexus.data.readers import reader

    (help_text,) = listed(["data", "prepare", "--help"])
    assert ".tsv (tab-separated rows)" in " ".join(help_text.split()), help_text
    docs = [f"row {i}: tabs\tand\nnewlines, growth at step {i * 7}" for i in range(40)]
    corpus = reader("tsv").example(work / "rows.tsv", docs)
    report = json.loads(
        cli(
            "data",
            "prepare",
            str(corpus),
            "--tokenizer",
            "byte",
            "--out",
            str(work / "prep"),
            "--quiet",
            "--num-proc",
            "1",
        )
    )
    assert sum(report["documents"].values()) == len(docs), report
    train(work / "run", *MICRO, "--data", str(corpus), "--data.cache_dir", str(work / "cache"))
    node = "tests/test_data_readers.py::test_"
    return [
        f"{node}every_registered_format_reads_the_same_tokens_through_prepare_and_training[tsv-.tsv]",
        f"{node}every_registered_file_suffix_is_named_when_a_suffix_is_unknown",
        f"{node}help_texts_list_the_registered_forms",
    ]


# invariant tests over every registered kind that each kind feature also passes
KIND_INVARIANTS = [
    "tests/test_kind_declarations.py::test_the_registries_and_the_options_tables_name_the_same_kinds",
    "tests/test_width_growth_names_no_kind.py",
]
CHECKS = {
    "sigmoid_attention": (check_sigmoid_attention, KIND_INVARIANTS),
    "relu2_mlp": (check_relu2_mlp, KIND_INVARIANTS),
    "deep_narrow_preset": (check_deep_narrow_preset, []),
    "zero_units_growth": (check_zero_units_growth, []),
    "lion_optimizer": (check_lion_optimizer, []),
    "wsd_sqrt_schedule": (check_wsd_sqrt_schedule, []),
    "tsv_source": (check_tsv_source, []),
}


class Outcomes:
    """pytest plugin: the node ids that passed and those that did not."""

    def __init__(self):
        self.passed, self.failed = set(), set()

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid)
        elif report.passed and report.when == "call":
            self.passed.add(report.nodeid)


def invariants_pass(work: Path, node_ids: list[str]) -> None:
    """Run the invariant tests (on the copy: this interpreter's nexus); each named case passed."""
    os.chdir(TESTS.parent)  # node ids are relative to the repository
    outcomes = Outcomes()
    code = pytest.main(
        ["-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--basetemp={work / 'pytest'}", *sorted(set(node_ids))],
        plugins=[outcomes],
    )
    assert code == 0 and not outcomes.failed, f"invariant tests failed: {sorted(outcomes.failed)}"
    unrun = [n for n in node_ids if not any(p == n or p.startswith((n + "[", n + "::")) for p in outcomes.passed)]
    assert unrun == [], f"invariant tests that did not run: {unrun}"


def main(work: Path, features: list[str]) -> None:
    import nexus

    package = Path(os.environ["PYTHONPATH"]) / "nexus"
    assert Path(nexus.__file__).resolve().parent == package.resolve(), (nexus.__file__, package)
    from nexus.experiments import run_plot

    run_plot.plot_runs = lambda *args, **kw: None  # each run's curve drawing (matplotlib, ~1 s): not what is checked
    node_ids = []
    for feature in features:
        check, invariants = CHECKS[feature]
        (work / feature).mkdir()
        node_ids += check(work / feature) + invariants
    invariants_pass(work, node_ids)
    print(f"checked {' '.join(features)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
