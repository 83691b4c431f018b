"""benchmarks/studies/progressive_regime.py at its --smoke scale: the plan is the regime it claims (40 tokens per
parameter, FFN 128 -> 256, train to 2x, >= 64K evaluation tokens), every grown variant branches from the
seed's one small checkpoint, a rerun skips finished runs and retrains an unfinished one to the same
result, and bad input (a corpus that would repeat, a missing or foreign lr sweep, too few lrs) is one
line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("studies/progressive_regime.py")


def test_full_plan_is_the_issue_regime(bench, tmp_path):
    plan = bench.plan_regime(list(bench.DEFAULT_METHODS), [0, 1, 2], "full", "embedded", tmp_path, None)
    tps = plan["tokens_per_step"]
    assert plan["tokens_per_param_at_growth"] == pytest.approx(40, rel=0.001) and plan["steps"] == 2 * plan["grow_step"]
    assert plan["eval_tokens"] >= 65536
    runs = plan["runs"]
    small = runs["seed0/small"]["cfg"]["model"]
    assert (small["n_layers"], small["d_model"], small["n_heads"], small["head_dim"], small["ffn_hidden"]) == (
        4,
        64,
        4,
        16,
        128,
    )
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


def test_smoke_run_branches_resumes_and_summarizes(bench, tmp_path, capsys, monkeypatch):
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

    # the curves' picture: a PNG written whole, one bold line per run kind in each panel, branches start at the prefix
    png = out / "smoke" / "loss_vs_tokens.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not list(png.parent.glob(".*.tmp"))
    import nexus.figures

    figs = []
    monkeypatch.setattr(nexus.figures, "save_figure", lambda fig, path: figs.append(fig) or Path(path).name)
    from nexus.experiments.ledger import Ledger

    bench.plot_regime(res["plan"], Ledger(out / "smoke" / "ledger"), out / "smoke")
    whole, after = figs[0].axes[:2]
    labels = [ln.get_label() for ln in whole.lines if not ln.get_label().startswith("_")]
    assert len(labels) == 2 + len(bench.DEFAULT_METHODS) + 1  # small, scratch, each method, the growth mark
    assert {ln.get_label() for ln in after.lines} >= set(labels)
    bold = {ln.get_label().split(",")[0]: list(ln.get_xdata()) for ln in whole.lines}
    grow_tokens = plan["grow_step"] * plan["tokens_per_step"]
    assert bold["sparkling"][0] == bold["small alone"][0] < grow_tokens  # both begin with the prefix's points

    # a rerun skips finished runs and retrains an unfinished one (neither in the ledger nor done) to the same result
    victim = out / "smoke" / "seed0" / "naive-copy" / "done.json"
    before = json.loads(victim.read_text())["val_loss"]
    victim.unlink()
    (out / "smoke" / "ledger" / "runs" / "seed0" / "naive-copy.json").unlink()
    kept = (out / "smoke" / "seed0" / "sparkling" / "done.json").stat().st_mtime_ns
    assert bench.main(args) == 0
    assert json.loads(victim.read_text())["val_loss"] == before
    assert (out / "smoke" / "seed0" / "sparkling" / "done.json").stat().st_mtime_ns == kept


def test_a_corpus_that_would_repeat_is_refused(bench, tmp_path, capsys):
    plan = bench.plan_regime(["sparkling"], [0], "smoke", "embedded", tmp_path, None)
    assert bench.corpus_check(plan)["share_of_split_drawn"] < 1  # the embedded corpus holds a smoke run
    with pytest.raises(bench.Refused) as e:
        bench.corpus_check({**plan, "token_budget": 10**9})
    assert e.value.code == 2 and "--data='embedded'" in e.value.line and "repeat" in e.value.line
    assert (
        "repeat" in bench.corpus_check({**plan, "token_budget": 10**9}, refuse=False)["problem"]
    )  # --estimate says it


@pytest.mark.parametrize(
    "args,needle", [(["--lrs", "1e-3,2e-3,4e-3"], "--lrs"), (["--methods", "nexus-rank"], "--methods"), ([], "--sweep")]
)
def test_bad_input_is_one_line_exit_2(bench, tmp_path, capsys, args, needle):
    with pytest.raises(SystemExit) as e:
        bench.main(["--smoke", "--seeds", "0", "--out", str(tmp_path / "x"), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x" / "smoke" / "seed0").exists()  # nothing trained


def test_a_sweep_of_another_plan_is_refused(bench, tmp_path, capsys):
    sweep = tmp_path / "x" / "smoke" / bench.SWEEP_FILE
    sweep.parent.mkdir(parents=True)
    sweep.write_text(
        json.dumps({"key": {"scale": "full", "data": "stdlib", "token_budget": 1}, "best": {"small": 1e-3}})
    )
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


def test_only_a_finished_sweep_run_of_the_same_config_is_reused(bench, tmp_path):
    out = tmp_path / "smoke"
    lrs = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    sweep_runs = bench.plan_sweep(list(bench.DEFAULT_METHODS), "smoke", "embedded", out, lrs)["runs"]
    table = {}
    for _name, r in sweep_runs.items():
        if r["lr"] != 1.6e-2:  # one lr's runs unfinished: nothing of theirs may be reused
            d = Path(r["cfg"]["train"]["out_dir"])
            d.mkdir(parents=True)
            (d / "done.json").write_text(json.dumps({"val_loss": 1.0}))
        table.setdefault(r["shape"], []).append({"lr": r["lr"], "final_val_loss": 1.0})
    scratch = next(k for k in table if k != "small")
    for small_lr, scratch_lr, reused in [(1e-3, 4e-3, True), (1e-3, 1.6e-2, False)]:
        plan = bench.plan_regime(
            list(bench.DEFAULT_METHODS), [0, 1], "smoke", "embedded", out, {"small": small_lr, scratch: scratch_lr}
        )
        names = bench.reuse_sweep_runs(plan, list(bench.DEFAULT_METHODS), out, {"table": table})
        # the small run is the prefix's continuation, a full-horizon run of the same config (resume is bitwise:
        # test_core_train::test_exact_resume_is_bitwise); seed 1 and the prefix (a half run) are their own runs
        assert names == ["seed0/small"] + ([f"seed0/scratch-{scratch}"] if reused else [])
        assert plan["runs"]["seed0/small"]["cfg"]["train"]["out_dir"] == str(out / "lr-sweep" / "small" / "lr0.001")
        if reused:
            assert plan["runs"][names[1]]["cfg"]["train"]["out_dir"] == str(out / "lr-sweep" / scratch / "lr0.004")
    assert bench.reuse_sweep_runs(plan, list(bench.DEFAULT_METHODS), out, {}) == []  # a sweep without its table


def test_the_sweep_behind_a_tuned_result_is_printed_with_its_cost(bench):
    table = {
        "small": [
            {"lr": 1e-3, "final_val_loss": 2.0},
            {"lr": 2e-3, "final_val_loss": 1.5},
            {"lr": 4e-3, "final_val_loss": 1.7},
        ]
    }
    lines = bench.sweep_lines({"path": "s.json", "table": table, "cost": {"run_seconds": 5400, "wall_s": 2700}})
    assert lines[0] == "lr sweep (s.json): 3 runs, one seed (0), 90 run-minutes, 45 min wall"
    assert lines[1] == "  small: 0.001 -> 2.0000, 0.002 -> 1.5000, 0.004 -> 1.7000 (best 0.002)"
    assert bench.sweep_lines(None) == []  # an untuned result has no sweep to show


@pytest.mark.slow
def test_the_sweeps_run_of_a_benchmark_config_is_not_trained_again(bench, tmp_path, capsys, monkeypatch):
    """Seed 0's scratch at its chosen lr is the sweep's run of that lr (the same config, the same seed): the
    benchmark reads it from the sweep instead of training it twice, and nothing else is taken from the sweep."""
    out = tmp_path / "x"
    assert bench.main(["--smoke", "--lr-sweep", "--workers", "1", "--out", str(out)]) == 0
    sweep = json.loads((out / "smoke" / bench.SWEEP_FILE).read_text())
    key = next(k for k in sweep["best"] if k != "small")
    lr = sweep["best"][key]
    swept = next(r["final_val_loss"] for r in sweep["table"][key] if r["lr"] == lr)
    capsys.readouterr()
    monkeypatch.setattr(bench, "step_seconds", lambda cfg, steps, threads: (0.01, 0.1))
    assert bench.main(["--smoke", "--seeds", "0,1", "--estimate", "--out", str(out)]) == 0
    est = capsys.readouterr().out
    assert f"seed0/scratch-{key}: the lr sweep's run" in est and "seed1/scratch" not in est.split("run ")[0]
    assert bench.main(["--smoke", "--seeds", "0,1", "--workers", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"seed0/scratch-{key}: the lr sweep's run of the same config" in text
    assert not (out / "smoke" / "seed0" / f"scratch-{key}").exists()  # not trained again
    assert (out / "smoke" / "seed1" / f"scratch-{key}" / "done.json").is_file()  # another seed is its own run
    res = json.loads((out / "smoke" / "results.json").read_text())
    assert res["summary"]["methods"]["sparkling"]["per_seed"]["scratch"][0] == swept
    assert "seed0/small: the lr sweep's run" in text and not (out / "smoke" / "seed0" / "small").exists()
    assert f"lr sweep ({out / 'smoke' / bench.SWEEP_FILE}): 10 runs, one seed" in text  # its cost beside the result
    assert f"(best {lr:.3g})" in text
    small_lr = sweep["best"]["small"]
    assert res["plan"]["runs"]["seed0/prefix"]["cfg"]["train"]["lr"] == small_lr
    assert not res["plan"]["runs"]["seed0/prefix"].get("reused_from")  # the sweep ran no prefix


def test_arch_pair_is_matched_and_each_grows_from_its_own_base(bench, tmp_path):
    """Item 5: Nexus-Rank and TokenFormer at the regime's d 64, equal in size before and after growth, each
    branched from its own small checkpoint at 40 tokens per parameter of its own small model."""
    plan = bench.plan_regime(["sparkling", *bench.ARCH_SHAPES], [0, 1], "full", "embedded", tmp_path, None)
    d, vocab, ffn, layers = 64, 259, 128, 4
    # per projection: Nexus-Rank d*M + M*A + A*d (Nexusformer Sec. 3), TokenFormer 2*n*d (TokenFormer Sec. 3)
    nr = lambda m, a: d * m + m * a + a * d  # noqa: E731
    tf = lambda n: 2 * n * d  # noqa: E731
    assert nr(72, 80) == tf(121) and nr(96, 160) == tf(248)
    # one layer: q, k, v through the projection, o as a d x d Linear, SwiGLU 3 x d x ffn, two RMSNorms, per-head
    # QK-norm weights (16 each for q and k)
    layer = lambda proj: 3 * proj + d * d + 3 * d * ffn + 2 * d + 2 * 16  # noqa: E731
    small = vocab * d + layers * layer(nr(72, 80)) + d
    bases = plan["bases"]
    assert bases["nexus-rank-regime"]["small_params"] == bases["tokenformer-regime"]["small_params"] == small
    assert bases["small"]["small_params"] == vocab * d + layers * layer(d * d) + d
    tps = plan["tokens_per_step"]
    runs = plan["runs"]
    for name in bench.ARCH_SHAPES:
        b = bases[name]
        assert b["grow_step"] == -(-40 * small // tps) and b["steps"] == 2 * b["grow_step"]
        for sd in (0, 1):
            grown = runs[f"seed{sd}/{name}"]
            assert (
                grown["after"] == f"seed{sd}/{name}-prefix"
                and runs[f"seed{sd}/{name}-small"]["after"] == grown["after"]
            )
            assert runs[grown["after"]]["cfg"]["train"]["steps"] == b["grow_step"]
            assert (
                grown["cfg"]["train"]["steps"] == b["steps"]
                and grown["cfg"]["train"]["hooks"][0]["at"] == b["grow_step"]
            )
    big = {
        n: runs[f"seed0/scratch-{runs[f'seed0/{n}']['shape']}"]["cfg"]["model"]["projection"] for n in bench.ARCH_SHAPES
    }
    assert (big["nexus-rank-regime"]["rank_m"], big["nexus-rank-regime"]["rank_a"]) == (96, 160)
    assert big["tokenformer-regime"]["param_tokens"] == 248
    assert runs["seed0/sparkling"]["after"] == "seed0/prefix"  # the FFN-axis base keeps its names
    from nexus.experiments import progressive as P

    assert "nexus-rank-regime" not in P.methods()  # the benchmark's own methods do not leak into the library's


def test_each_base_is_scored_against_its_own_small_and_scratch(bench, tmp_path):
    """Planted losses: growth closes 50% of Nexus-Rank's own gap and 90% of TokenFormer's, while Nexus-Rank's base
    is 0.3 nats better at equal tokens. The summary must report each share against its own base and the
    architectures' gap apart from it."""
    seeds = [0, 1, 2]
    plan = bench.plan_regime(list(bench.ARCH_SHAPES), seeds, "smoke", "embedded", tmp_path, None)
    noise = {0: 0.0, 1: 0.02, 2: -0.01}
    planted = {}  # run name -> final loss
    for sd in seeds:
        s = 3.0 + noise[sd]
        for name, (small, scratch, grown) in {
            "nexus-rank-regime": (s, s - 1.0, s - 0.5),
            "tokenformer-regime": (s + 0.3, s - 0.7, s + 0.3 - 0.9),
        }.items():
            planted[f"seed{sd}/{name}-small"] = planted[f"seed{sd}/{name}-prefix"] = small
            planted[f"seed{sd}/{name}"] = grown
            planted[f"seed{sd}/scratch-{plan['runs'][f'seed{sd}/{name}']['shape']}"] = scratch
    from nexus.experiments.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    tps = plan["tokens_per_step"]
    for name, loss in planted.items():
        ledger.write(
            name,
            plan["runs"][name]["cfg"],
            {"val_loss": loss},
            [
                {"step": 1, "tokens": tps, "val_loss": loss + 1},
                {"step": plan["steps"], "tokens": plan["steps"] * tps, "val_loss": loss},
            ],
        )
    summary = bench.summarize(plan, ledger)
    nr, tf = (summary["methods"][m] for m in bench.ARCH_SHAPES)
    assert nr["base"] == "nexus-rank-regime" and tf["base"] == "tokenformer-regime"
    assert nr["gap_closed"]["estimate"] == pytest.approx(0.5, abs=1e-9)
    assert tf["gap_closed"]["estimate"] == pytest.approx(0.9, abs=1e-9)
    arch = summary["between_bases"]["nexus-rank-regime - tokenformer-regime"]
    assert arch["small"]["diff"]["mean"] == pytest.approx(-0.3, abs=1e-9)
    assert arch["scratch"]["diff"]["mean"] == pytest.approx(-0.3, abs=1e-9)
    assert arch["grown"]["diff"]["mean"] == pytest.approx(-0.5 - 0.3 + 0.9, abs=1e-9)
    text = bench.render(plan, summary, {"train_tokens": 1, "share_of_split_drawn": 0.1, "sampler": "s"}, "head")
    assert "architectures' own gap" in text and "nexus-rank-regime vs tokenformer-regime" in text


def test_a_model_on_the_meta_device_draws_no_init(monkeypatch):
    """Parameter accounting builds models on the meta device many times per plan; their init draws are no-ops that
    cost more than the build (torch runs meta `normal_` through Python reference kernels), so they are skipped."""
    from nexus.models import build_model
    from nexus.models.accounting import build_on_meta
    from nexus.models.base import LanguageModel
    from nexus.presets import get_preset

    def refuse(*a, **k):
        raise AssertionError("init drew values")

    monkeypatch.setattr(LanguageModel, "init_module", refuse)
    model = build_on_meta(get_preset("baseline-micro").model)
    assert all(p.is_meta for p in model.parameters())
    with pytest.raises(AssertionError, match="init drew values"):  # a real build still initializes (here: refuses)
        build_model(get_preset("baseline-micro").model)


def test_the_plot_draws_every_scratch_shape_of_a_base(bench, tmp_path, monkeypatch):
    """sparkling-hidden and sparkling-both share a small model but grow to two shapes: both scratch runs are drawn
    in that base's panels (the first version drew only the first method's and dropped the other silently)."""
    import nexus.figures

    out = tmp_path / "b"
    args = [
        "--smoke",
        "--seeds",
        "0",
        "--untuned",
        "--workers",
        "1",
        "--methods",
        "sparkling-hidden,sparkling-both",
        "--out",
        str(out),
    ]
    assert bench.main(args) == 0
    res = json.loads((out / "smoke" / "results.json").read_text())
    figs = []
    monkeypatch.setattr(nexus.figures, "save_figure", lambda fig, path: figs.append(fig) or Path(path).name)
    from nexus.experiments.ledger import Ledger

    bench.plot_regime(res["plan"], Ledger(out / "smoke" / "ledger"), out / "smoke")
    labels = [ln.get_label() for ln in figs[0].axes[0].lines if ln.get_label().startswith("scratch")]
    shapes = {r["shape"] for r in res["plan"]["runs"].values() if r["kind"] == "scratch"}
    assert len(shapes) == 2 and len(labels) == 2 and all(any(sh in lab for lab in labels) for sh in shapes)
