"""benchmarks/progressive_regime.py at its --smoke scale: the plan is the regime it claims (40 tokens per
parameter, FFN 128 -> 256, train to 2x, >= 64K evaluation tokens), every grown variant branches from the
seed's one small checkpoint, a rerun skips finished runs and retrains an unfinished one to the same
result, and bad input (a corpus that would repeat, a missing or foreign lr sweep, too few lrs) is one
line with exit code 2."""
from __future__ import annotations

import json

import pytest

from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("progressive_regime.py")


def test_full_plan_is_the_issue_regime(bench, tmp_path):
    plan = bench.plan_regime(list(bench.DEFAULT_METHODS), [0, 1, 2], "full", "embedded", tmp_path, None)
    tps = plan["tokens_per_step"]
    assert plan["tokens_per_param_at_growth"] == pytest.approx(40, rel=0.001) and plan["steps"] == 2 * plan["grow_step"]
    assert plan["eval_tokens"] >= 65536
    runs = plan["runs"]
    small = runs["seed0/small"]["cfg"]["model"]
    assert (small["n_layers"], small["d_model"], small["n_heads"], small["head_dim"], small["ffn_hidden"]) == (4, 64, 4, 16, 128)
    assert runs["seed0/scratch-d64-ffn256"]["cfg"]["model"]["ffn_hidden"] == 256
    assert runs["seed0/prefix"]["cfg"]["train"]["steps"] == plan["grow_step"]
    for name in ("small", *bench.DEFAULT_METHODS):  # every branch starts from the seed's one prefix
        assert runs[f"seed1/{name}"]["after"] == "seed1/prefix"
        assert runs[f"seed1/{name}"]["cfg"]["train"]["steps"] * tps == plan["token_budget"]
    for r in runs.values():  # one schedule horizon for every run: the prefix is the first half of the others
        assert r["cfg"]["train"]["schedule_steps"] == plan["steps"]
        assert r["cfg"]["train"]["decay_all"] and r["cfg"]["model"]["qk_norm"]
    assert runs["seed2/naive-copy"]["cfg"]["train"]["hooks"][0]["spec"]["optimizer_state"] == "copy"
    assert plan["small_params"] * 40 == pytest.approx(7.2e6, rel=0.01)


def test_smoke_run_branches_resumes_and_summarizes(bench, tmp_path, capsys):
    out = tmp_path / "b"
    args = ["--smoke", "--seeds", "0", "--untuned", "--workers", "1", "--out", str(out)]
    assert bench.main(args) == 0
    text = capsys.readouterr().out
    assert "UNTUNED" in text and "share of the gap closed" in text and "0.84-0.90" in text
    res = json.loads((out / "smoke" / "results.json").read_text())
    plan = res["plan"]
    g = plan["grow_step"]
    prefix = out / "smoke" / "seed0" / "prefix"
    for name in ("small", *bench.DEFAULT_METHODS):
        run = out / "smoke" / "seed0" / name
        done = json.loads((run / "done.json").read_text())
        assert done["branched_from"] == str(prefix / "checkpoint") and done["step"] == plan["steps"]
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert min(r["step"] for r in rows) >= g  # nothing before the branch point was retrained
        if name != "small":
            assert [r["step"] for r in rows if r.get("event") == "growth"] == [g]
    sm = res["summary"]["methods"]["sparkling"]
    assert set(sm) >= {"gap_closed", "grown_minus_scratch", "compute_to_scratch_loss", "eq29_equal_tokens"}
    assert sm["per_seed"]["small"] == [json.loads((out / "smoke/seed0/small/done.json").read_text())["val_loss"]]

    # a rerun skips finished runs and retrains an unfinished one to the same result
    victim = out / "smoke" / "seed0" / "naive-copy" / "done.json"
    before = json.loads(victim.read_text())["val_loss"]
    victim.unlink()
    kept = (out / "smoke" / "seed0" / "sparkling" / "done.json").stat().st_mtime_ns
    assert bench.main(args) == 0
    assert json.loads(victim.read_text())["val_loss"] == before
    assert (out / "smoke" / "seed0" / "sparkling" / "done.json").stat().st_mtime_ns == kept


def test_a_corpus_that_would_repeat_is_refused(bench, tmp_path, capsys):
    plan = bench.plan_regime(["sparkling"], [0], "smoke", "embedded", tmp_path, None)
    assert bench.corpus_check(plan)["share_of_split_drawn"] < 1  # the embedded corpus holds a smoke run
    with pytest.raises(bench.Refused) as e:
        bench.corpus_check({**plan, "token_budget": 10 ** 9})
    assert e.value.code == 2 and "--data='embedded'" in e.value.line and "repeat" in e.value.line
    assert "repeat" in bench.corpus_check({**plan, "token_budget": 10 ** 9}, refuse=False)["problem"]  # --estimate says it


@pytest.mark.parametrize("args,needle", [(["--lrs", "1e-3,2e-3,4e-3"], "--lrs"),
                                         (["--methods", "nexus-rank"], "--methods"),
                                         ([], "--sweep")])
def test_bad_input_is_one_line_exit_2(bench, tmp_path, capsys, args, needle):
    with pytest.raises(SystemExit) as e:
        bench.main(["--smoke", "--seeds", "0", "--out", str(tmp_path / "x"), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x" / "smoke" / "seed0").exists()  # nothing trained


def test_a_sweep_of_another_plan_is_refused(bench, tmp_path, capsys):
    sweep = tmp_path / "x" / "smoke" / bench.SWEEP_FILE
    sweep.parent.mkdir(parents=True)
    sweep.write_text(json.dumps({"key": {"scale": "full", "data": "stdlib", "token_budget": 1}, "best": {"small": 1e-3}}))
    with pytest.raises(SystemExit) as e:
        bench.main(["--smoke", "--seeds", "0", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "swept for" in capsys.readouterr().err


def test_estimate_of_the_lr_sweep_trains_nothing(bench, tmp_path, capsys, monkeypatch):
    """--lr-sweep --estimate once ran the whole sweep; it prints the plan and the time instead."""
    monkeypatch.setattr(bench, "step_seconds", lambda cfg, steps, threads: (0.01, 0.1))  # no timing runs here
    out = tmp_path / "x"
    assert bench.main(["--smoke", "--lr-sweep", "--estimate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "lr sweep" in text and "min wall" in text
    assert not (out / "smoke" / "lr-sweep").exists() and not (out / "smoke" / bench.SWEEP_FILE).exists()
