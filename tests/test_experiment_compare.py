"""`nexus experiment compare`: presets x seeds at equal FLOPs, statistics recomputable from results.json."""
from __future__ import annotations

import json
import statistics

import pytest
from scipy import stats

from nexus.cli import main
from nexus.experiments.compare import plan_compare, run_compare, summarize

TINY = ["--train.eval_batches", "1", "--train.batch_size", "2", "--data.seq_len", "32", "--train.sample_tokens", "1",
        "--model.n_layers", "1"]


def test_compare_equal_flops_statistics_recomputable(tmp_path):
    out = tmp_path / "cmp"
    plan = plan_compare(["baseline-micro", "mqar-baseline"], [0, 1], "flops", 96, list(TINY), str(out), eval_task="mqar")
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
    assert acc_rows[1]["values"] == [run["mqar_accuracy"] for run in on_disk["runs"] if run["preset"] == "mqar-baseline"]
    assert acc_rows[1]["mean"] == pytest.approx(statistics.fmean(acc_rows[1]["values"]))
    report = (out / "report.md").read_text()
    assert f"{other['mean']:.4f}" in report and f"{want_p:.3g}" in report
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_welch_needs_two_seeds_per_side():
    rows = summarize({"a": [1.0, 1.2, 1.1], "b": [2.0]}, ["a", "b"])
    assert rows[1]["p_value_vs_reference"] is None and rows[1]["std"] == 0.0


@pytest.mark.parametrize("args,needle", [
    (["--presets", "baseline-micro,no-such-preset"], "no-such-preset"),
    (["--presets", "baseline-micro", "--seeds", "1,1"], "--seeds"),
    (["--presets", "baseline-micro,baseline-micro"], "--presets"),
])
def test_compare_bad_input_exit_2_nothing_written(tmp_path, capsys, args, needle):
    out = tmp_path / "never"
    rc = main(["experiment", "compare", "--out", str(out), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]
    assert not out.exists()
