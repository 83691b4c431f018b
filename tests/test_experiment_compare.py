"""`nexus experiment compare`: presets x seeds at equal FLOPs, statistics recomputable from results.json."""

from __future__ import annotations

import json
import statistics

import pytest
from scipy import stats

from nexus.cli import main
from nexus.experiments.compare import plan_compare, run_compare, summarize

TINY = [
    "--train.eval_batches",
    "1",
    "--train.batch_size",
    "2",
    "--data.seq_len",
    "48",
    "--train.sample_tokens",
    "1",
    "--model.n_layers",
    "1",
]


def test_compare_equal_flops_statistics_recomputable(tmp_path):
    out = tmp_path / "cmp"
    # both trained on MQAR: a task accuracy of a model trained on text is refused (it would mean nothing)
    plan = plan_compare(["mqar-baseline", "mqar-order2"], [0, 1], "flops", 96, list(TINY), str(out), eval_task="mqar")
    r = run_compare(plan, quiet=True, say=lambda *_: None)
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["rows"] == json.loads(json.dumps(r["rows"]))
    budget = plan["flops_budget"]
    for run, spec in zip(on_disk["runs"], plan["runs"]):
        tc, seq = spec["config"]["train"], spec["config"]["data"]["seq_len"]
        step_flops = tc["batch_size"] * tc["grad_accum"] * seq * spec["train_flops_per_token"]
        assert budget <= run["flops"] < budget + step_flops  # equal FLOPs up to one optimizer step
    for row in on_disk["rows"]:
        vals = [run["val_loss"] for run in on_disk["runs"] if run["preset"] == row["preset"]]
        assert row["values"] == vals
        assert row["mean"] == pytest.approx(statistics.fmean(vals))
        assert row["std"] == pytest.approx(statistics.stdev(vals))
    ref, other = on_disk["rows"]
    assert ref["p_value_vs_reference"] is None
    want_p = stats.ttest_ind(other["values"], ref["values"], equal_var=False).pvalue
    assert other["p_value_vs_reference"] == pytest.approx(want_p)
    # the chosen eval: accuracy of each final checkpoint, recomputed here from the checkpoint
    from nexus.checkpoint import load_checkpoint
    from nexus.eval.synthetic_eval import evaluate_synthetic

    run0 = on_disk["runs"][-1]
    model, cfg, _ = load_checkpoint(out / run0["preset"] / f"seed{run0['seed']}" / "checkpoint")
    assert run0["mqar_accuracy"] == pytest.approx(evaluate_synthetic(model, cfg, "mqar", 8, 32)["accuracy"])
    acc_rows = on_disk["evals"][0]["rows"]
    assert acc_rows[1]["values"] == [run["mqar_accuracy"] for run in on_disk["runs"] if run["preset"] == "mqar-order2"]
    assert acc_rows[1]["mean"] == pytest.approx(statistics.fmean(acc_rows[1]["values"]))
    report = (out / "report.md").read_text()
    assert f"{other['mean']:.4f}" in report and f"{want_p:.3g}" in report
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_welch_needs_two_seeds_per_side():
    rows = summarize({"a": [1.0, 1.2, 1.1], "b": [2.0]}, ["a", "b"])
    assert rows[1]["p_value_vs_reference"] is None and rows[1]["std"] == 0.0


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--presets", "baseline-micro,no-such-preset"], "no-such-preset"),
        (["--presets", "baseline-micro", "--seeds", "1,1"], "--seeds"),
        (["--presets", "baseline-micro,baseline-micro"], "--presets"),
    ],
)
def test_compare_bad_input_exit_2_nothing_written(tmp_path, capsys, args, needle):
    out = tmp_path / "never"
    rc = main(["experiment", "compare", "--out", str(out), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]
    assert not out.exists()


def _lm_eval_helpers():
    import lm_eval  # noqa: F401  -- a dev dependency: without it these tests must fail, never skip
    import lm_eval_helpers

    return lm_eval_helpers


@pytest.mark.slow  # trains and scores with lm-eval (~17 s); run with -m slow
def test_compare_lm_eval_equals_adapter_on_each_checkpoint_and_resumes(tmp_path, monkeypatch):
    h = _lm_eval_helpers()
    from nexus.eval import lm_eval_adapter
    from nexus.eval.lm_eval_adapter import NexusLM, evaluate_tasks

    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    h.write_tiny_mc_task(tasks_dir)
    out = tmp_path / "cmp"
    plan = plan_compare(
        ["baseline-micro", "base-transformer-tiny"],
        [0, 1],
        "tokens",
        64,
        list(TINY),
        str(out),
        lm_eval=[h.TASK],
        lm_eval_include=str(tasks_dir),
    )
    r = run_compare(plan, quiet=True, say=lambda *_: None)
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["evals"] == json.loads(json.dumps(r["evals"]))
    for run in on_disk["runs"]:  # each stored number is what the adapter gives on that run's final checkpoint
        lm = NexusLM.from_checkpoint(out / run["preset"] / f"seed{run['seed']}" / "checkpoint")
        assert run["lm_eval"] == evaluate_tasks(lm, [h.TASK], include_path=str(tasks_dir))
    (ev,) = on_disk["evals"]
    assert ev["lm_eval_task"] == h.TASK and ev["lm_eval_metric"] == "acc" and ev["metric"] == f"lm-eval {h.TASK} acc"
    for row in ev["rows"]:  # the statistics, recomputed from the per-run values
        vals = [run["lm_eval"][h.TASK]["acc"] for run in on_disk["runs"] if run["preset"] == row["preset"]]
        assert row["values"] == vals
        assert row["mean"] == pytest.approx(statistics.fmean(vals))
        assert row["std"] == pytest.approx(statistics.stdev(vals))
    ref, other = ev["rows"]
    want_p = stats.ttest_ind(other["values"], ref["values"], equal_var=False).pvalue
    assert other["p_value_vs_reference"] == (None if want_p != want_p else pytest.approx(want_p))  # nan: no variance
    report = (out / "report.md").read_text()
    assert (
        f"lm-eval {h.TASK} acc" in report
        and f"| {other['preset']} | {other['mean']:.4f} | {other['std']:.4f} |" in report
    )

    # resumed: finished runs are not retrained and their stored eval results are not recomputed
    def no_eval(*a, **k):
        raise AssertionError("a finished run's lm-eval results were recomputed")

    monkeypatch.setattr(lm_eval_adapter, "evaluate_tasks", no_eval)
    again = run_compare(
        plan_compare(
            ["baseline-micro", "base-transformer-tiny"],
            [0, 1],
            "tokens",
            64,
            list(TINY),
            str(out),
            lm_eval=[h.TASK],
            lm_eval_include=str(tasks_dir),
        ),
        quiet=True,
        say=lambda *_: None,
    )
    assert json.loads(json.dumps(again["evals"])) == on_disk["evals"]


@pytest.mark.slow  # lm-eval task loading (~18 s); run with -m slow
def test_compare_bad_lm_eval_task_exit_2_before_training(tmp_path, capsys, monkeypatch):
    h = _lm_eval_helpers()
    from nexus.experiments import compare

    def no_training(*a, **k):
        raise AssertionError("training started before the lm-eval tasks were checked")

    monkeypatch.setattr(compare, "run_resumable", no_training)
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    h.write_tiny_mc_task(broken, data_file=tmp_path / "missing.jsonl")  # the task is found, its data is not
    out = tmp_path / "never"
    h.write_tiny_mc_task(tasks_dir)
    text = "baseline-micro,base-transformer-tiny"
    cases = [
        (text, ["--lm-eval", h.TASK, "--lm-eval-include", str(tmp_path / "no-dir")], "--lm-eval-include"),
        (text, ["--lm-eval", h.TASK, "--lm-eval-include", str(broken)], "cannot be loaded offline"),
        (text, ["--lm-eval", "no_such_task_xyz", "--lm-eval-include", str(tasks_dir)], "no_such_task_xyz"),
        (text, ["--lm-eval-limit", "2"], "without --lm-eval"),
        # a synthetic-vocabulary model cannot read text
        ("baseline-micro,mqar-baseline", ["--lm-eval", h.TASK, "--lm-eval-include", str(tasks_dir)], "synthetic:mqar"),
    ]
    for presets, args, needle in cases:
        rc = main(["experiment", "compare", "--presets", presets, "--out", str(out), *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and needle in err[0], (args, err)
        assert not out.exists()


def test_main_metric_is_acc_else_first_score():
    from nexus.experiments.compare import main_metric

    assert main_metric({"sample_len": 4, "acc_norm": 0.5, "acc": 0.25}) == "acc"
    assert main_metric({"sample_len": 4, "exact_match": 0.1, "f1": 0.3}) == "exact_match"


def test_compare_refuses_a_bad_growth_spec_of_any_preset_before_the_first_run(tmp_path, capsys, monkeypatch):
    """The second preset's growth spec is wrong (a nexus_rank typo): nothing trains, nothing is written."""
    import nexus.presets as presets
    from nexus.train.trainer import Trainer

    def bad():
        cfg = presets.get_preset("baseline-micro")
        cfg.train.set_hook("growth", at=2, spec={"family": "nexus_rank", "delta_mm": 8})
        return cfg

    presets.PRESETS.load()
    monkeypatch.setitem(presets.PRESETS._entries, "test-bad-growth", (bad, "test: a misspelled growth spec"))
    monkeypatch.setattr(Trainer, "train_step", lambda *a: (_ for _ in ()).throw(AssertionError("a step ran")))
    out = tmp_path / "never"
    rc = main(
        ["experiment", "compare", "--out", str(out), "--presets", "baseline-micro,test-bad-growth", "--tokens", "2048"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "test-bad-growth" in err[0] and "delta_mm" in err[0], err
    assert not out.exists()


def test_compare_with_a_yaml_preset_reports_it_by_its_stem(tmp_path, capsys):
    """Issue 40 item 2: a preset file (my.yaml) trained, then the summary looked it up by the file name
    instead of the label its runs carry (KeyError: 'my')."""
    import yaml

    from nexus.presets import get_preset

    mine = tmp_path / "my.yaml"
    mine.write_text(yaml.safe_dump(get_preset("baseline-micro").to_dict()))
    out = tmp_path / "cmp"
    rc = main(
        [
            "experiment",
            "compare",
            "--out",
            str(out),
            "--presets",
            f"baseline-micro,{mine}",
            "--seeds",
            "0",
            "--tokens",
            "96",
            "--quiet",
            *TINY,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["preset"] for r in rows] == ["baseline-micro", "my"]
    assert len(rows[1]["values"]) == 1 and (out / "my" / "seed0" / "checkpoint").is_dir()


def test_compare_refuses_a_bad_yaml_preset_before_any_training(tmp_path, capsys, monkeypatch):
    from nexus.train.trainer import Trainer

    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: baseline-micro\nmodel:\n  n_layers: -3\n")
    monkeypatch.setattr(Trainer, "train_step", lambda *a: (_ for _ in ()).throw(AssertionError("a step ran")))
    out = tmp_path / "never"
    rc = main(["experiment", "compare", "--out", str(out), "--presets", f"baseline-micro,{bad}", "--tokens", "96"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "n_layers" in err[0], err
    assert not out.exists()


def _no_training(monkeypatch):
    from nexus.train.trainer import Trainer

    monkeypatch.setattr(Trainer, "train_step", lambda *a: (_ for _ in ()).throw(AssertionError("a step ran")))


@pytest.mark.parametrize(
    "text, needle",
    [
        ("model: {qk_norm: true}\n", "preset: baseline-micro"),  # partial, no base: its other fields would be defaults
        ("preset: no-such-preset\nmodel: {qk_norm: true}\n", "no-such-preset"),
        ("preset: other.yaml\nmodel: {qk_norm: true}\n", "other.yaml"),
    ],
)
def test_a_partial_yaml_preset_without_a_registered_base_is_refused_in_one_line(
    tmp_path, capsys, monkeypatch, text, needle
):
    """Issue 50 item 2: `model: {qk_norm: true}` alone trained a 4x128 default model against a 2x64 preset."""
    _no_training(monkeypatch)
    mine = tmp_path / "micro_qk.yaml"
    mine.write_text(text)
    out = tmp_path / "never"
    rc = main(["experiment", "compare", "--out", str(out), "--presets", f"baseline-micro,{mine}", "--tokens", "96"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0] and "micro_qk.yaml" in err[0], err
    assert not out.exists()


def test_a_yaml_preset_that_names_its_base_changes_only_what_it_names(tmp_path):
    import yaml

    from nexus.presets import get_preset

    f = tmp_path / "micro_qk.yaml"
    f.write_text(yaml.safe_dump({"preset": "baseline-micro", "model": {"qk_norm": True}, "train": {"lr": 0.001}}))
    got = get_preset(str(f))
    want = get_preset("baseline-micro")
    assert not want.model.qk_norm and want.train.lr != 0.001  # the file changes both
    want.model.qk_norm, want.train.lr, want.preset = True, 0.001, "micro_qk"
    assert got.to_dict() == want.to_dict()


def _printed_before_training(monkeypatch, capsys, argv) -> str:
    """What `nexus experiment compare` prints before its first run would train (run_compare stopped there)."""
    import nexus.experiments.compare as C

    class Stop(Exception):
        pass

    monkeypatch.setattr(C, "run_compare", lambda *a, **k: (_ for _ in ()).throw(Stop()))
    with pytest.raises(Stop):
        main(argv)
    return capsys.readouterr().out


def test_compare_says_what_each_arm_changes_before_training(tmp_path, capsys, monkeypatch):
    same_base = tmp_path / "micro_qk.yaml"
    same_base.write_text("preset: baseline-micro\nmodel: {qk_norm: true}\n")
    other_base = tmp_path / "tiny_qk.yaml"
    other_base.write_text("preset: baseline-tiny\nmodel: {qk_norm: true}\n")
    out = _printed_before_training(
        monkeypatch,
        capsys,
        [
            "experiment",
            "compare",
            "--out",
            str(tmp_path / "c"),
            "--presets",
            f"baseline-micro,{same_base},{other_base}",
            "--tokens",
            "96",
        ],
    )
    lines = out.splitlines()
    mine = [ln for ln in lines if ln.startswith("micro_qk vs baseline-micro")]
    assert len(mine) == 1 and "1 field(s) differ: model.qk_norm false -> true" in mine[0], out
    # the arm whose base is another preset: every field that base changes is named, and flagged as not the file's
    from nexus.presets import get_preset

    micro, tiny = get_preset("baseline-micro"), get_preset("baseline-tiny")
    assert micro.model.d_model != tiny.model.d_model
    other = next(i for i, ln in enumerate(lines) if ln.startswith("tiny_qk vs baseline-micro"))
    assert f"model.d_model {micro.model.d_model} -> {tiny.model.d_model}" in lines[other]
    assert "warning" in lines[other + 1] and "model.d_model" in lines[other + 1]
    assert "qk_norm" not in lines[other + 1]  # the file's own change is not a surprise


def test_compare_plot_is_points_with_intervals_on_an_axis_whose_cut_is_drawn(tmp_path, monkeypatch):
    """Issue 50 item 6: bars on a y axis cut near the values overstated the difference; points with their 95%
    intervals instead, and the cut drawn on the axis and said in its label."""
    from PIL import Image

    import nexus.experiments.plots as plots

    figures = []
    real = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, **kw: (figures.append(fig), real(fig, path, **kw))[1])
    rows = summarize({"a": [3.30, 3.31, 3.33], "b": [3.25, 3.27, 3.26]}, ["a", "b"], [0, 1, 2])
    plots.plot_compare(rows, "final validation loss", tmp_path / "compare.png")
    (fig,) = figures
    (ax,) = [a for a in fig.axes if a.get_xticklabels()]
    assert not [p for p in ax.patches if type(p).__name__ == "Rectangle"]  # no bars
    caps = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(caps) == 2
    for row, c in zip(rows, caps):
        ((x, y),) = c.lines[0].get_xydata()
        assert y == pytest.approx(row["mean"])
        seg = c.lines[2][0].get_segments()[0]  # the interval's vertical line
        assert sorted(p[1] for p in seg) == pytest.approx([row["ci_low"], row["ci_high"]])
    bottom, _ = ax.get_ylim()
    assert bottom > 0 and "does not start at 0" in ax.get_ylabel()
    assert [ln for ln in ax.get_lines() if ln.get_gid() == "axis-break"]
    with Image.open(tmp_path / "compare.png") as im:
        assert round(im.info["dpi"][0]) >= 150
