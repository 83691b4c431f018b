"""`nexus experiment progressive` on a micro budget: well-formed report whose numbers are recomputable
from results.json; eq. 29 by hand; bad input fails before any training with exit code 2.

The machinery test uses a test-only growth family (FFN doubled, new down-projection columns zero:
exactly function-preserving) so it depends only on the generic growth API, not on a paper family.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from nexus.cli import main
from nexus.config import ConfigError
from nexus.experiments import progressive as P
from nexus.growth import GrowthResult, GrowthSpec, ParamMap, register_grower
from nexus.growth.methods import Method, register_method


@dataclasses.dataclass
class FfnDoubleSpec(GrowthSpec):
    """test: the dense FFN doubled (no options)."""


@register_grower("test_ffn_double", FfnDoubleSpec)
def _grow_ffn_double(model, cfg, spec):
    from nexus.models import build_model

    new_cfg = copy.deepcopy(cfg.model)
    new_cfg.ffn_hidden = 2 * cfg.model.ffn
    torch.manual_seed(1)
    new = build_model(new_cfg)
    old = dict(model.named_parameters())
    maps = {}
    with torch.no_grad():
        for name, p in new.named_parameters():
            o = old[name]
            sl = tuple(slice(0, s) for s in o.shape)
            if name.endswith("down_proj.weight"):
                p.zero_()  # new FFN units write nothing: the grown model computes the same function
            p[sl] = o
            maps[name] = ParamMap(old_name=name, old_slices=sl if o.shape != p.shape else None)
    return GrowthResult(new, new_cfg, maps, {"ffn": [cfg.model.ffn, new_cfg.ffn_hidden]}, {})


# a family's module registers its methods beside its grower (as growth/width.py does): the experiment lists
# them without an edit of its own
register_method(
    Method("test-ffn-registered", "test_ffn_double", "baseline-micro", {}, "test: registered by its family")
)
TEST_METHOD = Method("test-ffn", "test_ffn_double", "baseline-micro", {}, "test: FFN x2 (zero down columns)")
# 1x32 model, 2x16-token batches, 12 steps: the machinery, not the learning, is under test
MICRO = [
    "--model.n_layers",
    "1",
    "--model.d_model",
    "32",
    "--model.n_heads",
    "2",
    "--train.eval_batches",
    "1",
    "--train.batch_size",
    "2",
    "--data.seq_len",
    "16",
    "--train.sample_tokens",
    "1",
    "--train.warmup_steps",
    "2",
]


def add_methods(monkeypatch, *added: Method) -> None:
    """The registered methods plus `added`, for this test (P.methods is what every lookup calls)."""
    known = {**P.methods(), **{m.name: m for m in added}}
    monkeypatch.setattr(P, "methods", lambda: dict(known))


@pytest.fixture
def methods(monkeypatch):
    add_methods(monkeypatch, TEST_METHOD)
    return P.methods()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One micro experiment shared by the tests that only read it (training is the slow part)."""
    tmp = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as mp:
        add_methods(mp, TEST_METHOD)
        plan, r = _run(tmp)
    return tmp, plan, r


def _run(tmp_path, tokens=384, grow_at=0.5, seeds=(3,)):
    plan = P.plan_progressive(
        "test-ffn",
        overrides=list(MICRO),
        tokens=tokens,
        grow_at=grow_at,
        seeds=list(seeds),
        out=str(tmp_path / "exp"),
        eval_points=5,
    )
    return plan, P.run_progressive(plan, quiet=True, say=lambda *_: None)


def _first_crossing(xs, ys, target):
    prev = None
    for x, y in zip(xs, ys):
        if y <= target:
            if prev is None:
                return x
            (x0, y0) = prev
            return x0 + (x - x0) * (y0 - target) / (y0 - y)
        prev = (x, y)
    return None


def test_micro_experiment_report_is_recomputable_from_results_json(finished):
    from nexus.analysis.flops import train_flops_per_token
    from nexus.config import RunConfig

    tmp_path, plan, r = finished
    top = json.loads((tmp_path / "exp" / "results.json").read_text())
    out = tmp_path / "exp" / "seed3"
    on_disk = top["per_seed"]["3"]
    assert on_disk["target_val_loss"] == r["per_seed"]["3"]["target_val_loss"]
    for png in ("../loss_vs_flops.png", "../loss_vs_tokens.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000

    # FLOPs per token: the analytic walker on each run's model config
    small = RunConfig.from_dict(plan["configs"]["3"]["grown"]).model
    large = RunConfig.from_dict(plan["configs"]["3"]["scratch"]).model
    assert large.ffn == 2 * small.ffn
    f_small, f_large = train_flops_per_token(small, 16), train_flops_per_token(large, 16)
    assert top["small"]["train_flops_per_token"] == pytest.approx(f_small)
    assert top["large"]["train_flops_per_token"] == pytest.approx(f_large)

    # curves: every FLOPs value recomputed from tokens and the growth point
    g, s = on_disk["runs"]["grown"], on_disk["runs"]["scratch"]
    d_e = top["grow_at_tokens"]
    assert d_e == plan["grow_step"] * 2 * 16
    for p in on_disk["runs"]["small"]["val_curve"]:  # the small-only baseline runs the whole budget small
        assert p["flops"] == pytest.approx(f_small * p["tokens"])
    assert on_disk["runs"]["small"]["tokens"] == plan["token_budget"]
    for p in g["val_curve"]:
        want = f_small * min(p["tokens"], d_e) + f_large * max(0, p["tokens"] - d_e)
        assert p["flops"] == pytest.approx(want)
    for p in s["val_curve"]:
        assert p["flops"] == pytest.approx(f_large * p["tokens"])
    assert s["total_flops"] == pytest.approx(f_large * plan["token_budget"])

    # the target and the compute to reach it
    metrics = [json.loads(line) for line in (out / "scratch" / "metrics.jsonl").read_text().splitlines()]
    final = [m for m in metrics if m.get("final")][-1]
    assert on_disk["target_val_loss"] == pytest.approx(final["val_loss"])
    xs = [p["flops"] for p in g["val_curve"]]
    ys = [p["val_loss"] for p in g["val_curve"]]
    hit = _first_crossing(xs, ys, on_disk["target_val_loss"])
    if hit is None:
        assert on_disk["grown_flops_to_target"] is None and on_disk["measured_flops_saved"] is None
    else:
        assert on_disk["grown_flops_to_target"] == pytest.approx(hit)
        assert on_disk["measured_flops_saved"] == pytest.approx(1 - hit / s["total_flops"])

    # equal compute: the scratch curve read at the grown run's total FLOPs
    sx, sy = [p["flops"] for p in s["val_curve"]], [p["val_loss"] for p in s["val_curve"]]
    gx = g["total_flops"]
    i = next(i for i in range(1, len(sx)) if sx[i - 1] <= gx <= sx[i])
    want = sy[i - 1] + (sy[i] - sy[i - 1]) * (gx - sx[i - 1]) / (sx[i] - sx[i - 1])
    assert on_disk["scratch_val_loss_at_grown_flops"] == pytest.approx(want)

    # eq. 29 from the recorded sizes
    e = top["eq29"]
    ns, nl, d = top["small"]["active_params"], top["large"]["active_params"], top["token_budget"]
    assert e["flops_saved"] == pytest.approx(1 - (ns * d_e + nl * (d - d_e)) / (nl * d))
    assert nl > ns

    # growth happened once, at the planned step, and the parameter count went up there
    grown_metrics = [json.loads(line) for line in (out / "grown" / "metrics.jsonl").read_text().splitlines()]
    events = [m for m in grown_metrics if m.get("event") == "growth"]
    assert [ev["step"] for ev in events] == [plan["grow_step"]]
    params = {m["step"]: m["params"] for m in grown_metrics if "params" in m}
    assert min(v for k, v in params.items() if k > plan["grow_step"]) > max(
        v for k, v in params.items() if k <= plan["grow_step"]
    )

    # report.md states exactly these numbers, and every run's schedule
    report = (tmp_path / "exp" / "report.md").read_text()
    assert f"{g['final_val_loss']:.4f}" in report and f"{s['final_val_loss']:.4f}" in report
    assert f"{100 * e['flops_saved']:+.1f}%" in report and "at equal tokens" in report
    assert f"{want:.4f}" in report
    assert "loss_vs_flops.png" in report
    for name in ("grown", "scratch", "small"):
        assert top["schedules"][name].startswith("cosine") and top["schedules"][name] in report


def test_rerun_skips_finished_runs_and_reproduces_results(finished, methods, monkeypatch):
    tmp_path, _, first = finished
    import nexus.train.trainer as T

    def boom(*a, **k):
        raise AssertionError("a finished run was retrained")

    monkeypatch.setattr(T.Trainer, "fit", boom)
    _, again = _run(tmp_path)
    assert again["per_seed"]["3"]["target_val_loss"] == first["per_seed"]["3"]["target_val_loss"]
    assert again["per_seed"]["3"]["runs"]["grown"]["val_curve"] == first["per_seed"]["3"]["runs"]["grown"]["val_curve"]


def test_interrupted_experiment_resumes_from_step_checkpoint_and_matches(tmp_path, methods, monkeypatch):
    """Kill the grown run after growth; the rerun resumes from its last step checkpoint and ends with
    the same validation losses as an uninterrupted experiment."""
    import nexus.train.trainer as T

    _, ref = _run(tmp_path / "ref")
    orig_init = T.Trainer.__init__
    state = {"armed": True}

    from nexus.train.hooks import Hook

    class Crash(Hook):
        def on_log(self, trainer, step, metrics):
            if state["armed"] and "grown" in str(trainer.out_dir) and step == 10:
                state["armed"] = False
                raise KeyboardInterrupt

    def init_with_crash(self, *a, **k):
        orig_init(self, *a, **k)
        self.add_hook(Crash())

    monkeypatch.setattr(T.Trainer, "__init__", init_with_crash)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut")
    grown_dir = tmp_path / "cut" / "exp" / "seed3" / "grown"
    assert not (grown_dir / "done.json").exists() and list(grown_dir.glob("step_*"))
    _, res = _run(tmp_path / "cut")
    res, ref = res["per_seed"]["3"], ref["per_seed"]["3"]
    assert json.loads((grown_dir / "done.json").read_text())["resumed_from"].startswith("step_")
    assert res["runs"]["grown"]["final_val_loss"] == pytest.approx(ref["runs"]["grown"]["final_val_loss"], abs=1e-5)
    steps = [p["step"] for p in res["runs"]["grown"]["val_curve"]]
    assert steps == sorted(set(steps)) == [p["step"] for p in ref["runs"]["grown"]["val_curve"]]


@pytest.mark.parametrize(
    "n_small,n_large,d_e,d,want",
    [
        (1.0, 2.0, 5.0, 10.0, 0.25),  # C* = 6(5 + 10) = 90, C = 120
        (1.0, 4.0, 50.0, 100.0, 0.375),  # 2x width ~ 4x params, grow at half: 6(50 + 200) vs 6*400
        (3.0, 3.0, 7.0, 10.0, 0.0),  # nothing grows: nothing saved
        (2.0, 8.0, 0.0, 10.0, 0.0),  # grown at the start: the scratch run
        (2.0, 8.0, 10.0, 10.0, 0.75),  # never grown: 1 - N_small/N_large
    ],
)
def test_eq29_flops_saved_hand_computed(n_small, n_large, d_e, d, want):
    from nexus.experiments.report import eq29

    e = eq29(n_small, n_large, d_e, d)
    assert e["flops_saved"] == pytest.approx(want)
    assert e["c_star"] == pytest.approx(6 * (n_small * d_e + n_large * (d - d_e)))
    assert e["c_scratch"] == pytest.approx(6 * n_large * d)


def test_first_crossing_interpolates_linearly():
    from nexus.experiments.curves import first_crossing

    assert first_crossing([0, 10, 20], [5.0, 3.0, 1.0], 2.0) == pytest.approx(15.0)
    assert first_crossing([0, 10], [5.0, 3.0], 2.0) is None
    assert first_crossing([4, 10], [1.0, 0.5], 2.0) == 4


# ----------------------------------------------------------------------------- bad input: exit 2, nothing trained
def _cli(tmp_path, capsys, *args):
    out = tmp_path / "never"
    rc = main(["experiment", "progressive", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert not out.exists(), "something was written before the error"
    assert len(err.strip().splitlines()) == 1
    return err


def test_growth_point_outside_budget(tmp_path, capsys, methods):
    err = _cli(tmp_path, capsys, "--method", "test-ffn", "--tokens", "4096", "--grow-at", "5000")
    assert "--grow-at" in err and "outside the token budget" in err


def test_a_method_registered_by_its_growth_family_is_listed_and_planned():
    rows = {r["name"]: r for r in P.method_table()}
    assert rows["test-ffn-registered"]["family"] == "test_ffn_double" and rows["test-ffn-registered"]["installed"]
    assert {"sparkling", "nexus-rank", "tokenformer", "retrofit-ho"} <= set(rows)  # each family's own file
    plan = P.plan_progressive("test-ffn-registered", overrides=list(MICRO), tokens=384, out="unused")
    assert plan["method"] == "test-ffn-registered" and plan["family"] == "test_ffn_double"


def test_unknown_method(tmp_path, capsys):
    err = _cli(tmp_path, capsys, "--method", "grow-everything")
    assert "grow-everything" in err and "sparkling" in err


def test_method_not_applicable_to_architecture(tmp_path, capsys):
    err = _cli(tmp_path, capsys, "--method", "nexus-rank", "--preset", "baseline-micro")
    assert "does not apply" in err and "nexus_rank" in err


def test_method_whose_family_is_not_installed(tmp_path, capsys, monkeypatch):
    add_methods(monkeypatch, Method("future", "not_a_family", "baseline-micro", {}, "x"))
    err = _cli(tmp_path, capsys, "--method", "future")
    assert "not_a_family" in err and "not installed" in err


def test_different_settings_do_not_overwrite_an_experiment(tmp_path, methods):
    plan = P.plan_progressive("test-ffn", overrides=list(MICRO), tokens=384, out=str(tmp_path / "exp"))
    from nexus.outdir import EXPERIMENT, claim_directory

    claim_directory(tmp_path / "exp", EXPERIMENT)  # an earlier nexus experiment, of other settings
    (tmp_path / "exp" / "plan.json").write_text(json.dumps({**plan, "configs": {"0": {"grown": {}, "scratch": {}}}}))
    with pytest.raises(ConfigError, match="different experiment"):
        P.run_progressive(plan, say=lambda *_: None)


def test_an_experiment_planned_with_the_old_config_form_is_the_same_experiment(tmp_path, methods):
    """plan.json written before model.moe / model.recurrent became model.mlp / model.arch: the same plan."""
    plan = P.plan_progressive("test-ffn", overrides=list(MICRO), tokens=384, out=str(tmp_path / "exp"))
    old = json.loads(json.dumps(plan))
    for per in old["configs"].values():
        for cfg in per.values():
            m = cfg["model"]
            assert m.pop("mlp") == {"kind": "dense"} and m.pop("arch") == {"kind": "transformer"}
            m["moe"] = {"n_experts": 0, "top_k": 2, "expert_hidden": 0, "lb_loss_coef": 0.01, "router_z_coef": 0.001}
            m["arch"], m["recurrent"] = "transformer", {"n_sup": 4, "t_inner": 6}
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "plan.json").write_text(json.dumps(old))
    P._check_same_plan(tmp_path / "exp", plan)  # no "different experiment"
    old["configs"]["0"]["grown"]["model"]["moe"]["n_experts"] = 4
    (tmp_path / "exp" / "plan.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="different experiment"):
        P._check_same_plan(tmp_path / "exp", plan)


def test_seed_summary_is_the_statistics_of_the_per_seed_numbers(tmp_path, methods):
    """Two seeds: the summary's mean/std/interval/paired test are those of the per-seed values (scipy)."""
    from scipy import stats

    plan, r = _run(tmp_path, seeds=(0, 1))
    assert plan["seeds"] == [0, 1] and set(r["per_seed"]) == {"0", "1"}
    g = [r["per_seed"][k]["runs"]["grown"]["final_val_loss"] for k in ("0", "1")]
    sc = [r["per_seed"][k]["runs"]["scratch"]["final_val_loss"] for k in ("0", "1")]
    assert g[0] != g[1]  # the seeds really differ
    d = r["summary"]["final_val_loss"]["grown"]
    assert d["mean"] == pytest.approx(sum(g) / 2) and d["std"] == pytest.approx(abs(g[0] - g[1]) / 2**0.5)
    half = stats.t.ppf(0.975, 1) * d["std"] / 2**0.5
    assert (d["ci_low"], d["ci_high"]) == (pytest.approx(d["mean"] - half), pytest.approx(d["mean"] + half))
    assert r["summary"]["grown_minus_scratch_final"]["t_p"] == pytest.approx(stats.ttest_rel(g, sc).pvalue)
    report = (tmp_path / "exp" / "report.md").read_text()
    assert f"{d['mean']:.4f} +- {d['std']:.4f}" in report and "seeds 0, 1" in report
    # the headline: share of the small-to-scratch gap closed, from the per-seed finals
    sm = [r["per_seed"][k]["runs"]["small"]["final_val_loss"] for k in ("0", "1")]
    gc = r["summary"]["gap_closed"]
    assert gc["estimate"] == pytest.approx((sum(sm) - sum(g)) / (sum(sm) - sum(sc)))
    assert f"{gc['estimate']:.2f}" in report and "gap closed" in report


def test_paper_recipe_and_tau(methods):
    plan = P.plan_progressive("sparkling", tokens=2048 * 200, out="unused", seeds=[0])
    tc = plan["configs"]["0"]["grown"]["train"]
    assert (tc["schedule"], tc["warmup_steps"], tc["min_lr_ratio"]) == ("cosine", 6, 0.01)  # 3% of 200 steps
    assert plan["grow_step"] == 100 and tc["hooks"][0]["spec"]["rewarmup"] == "1.3,1"  # round(250/31800 * 100) = 1
    lit = P.plan_progressive("sparkling", tokens=2048 * 200, out="unused", seeds=[0], tau="250")
    assert lit["configs"]["0"]["grown"]["train"]["hooks"][0]["spec"]["rewarmup"] == "1.3,250"
    pre = P.plan_progressive("sparkling", tokens=2048 * 200, out="unused", seeds=[0], recipe="preset")
    assert pre["configs"]["0"]["grown"]["train"]["min_lr_ratio"] != 0.01
    sl = P.plan_progressive("sparkling", tokens=2048 * 200, out="unused", seeds=[0], steplaw_scratch=True)
    n_s, n_l = sl["total_params"]["small"], sl["total_params"]["large"]
    lrs = {k: v["train"]["lr"] for k, v in sl["configs"]["0"].items()}
    assert (
        lrs["scratch-steplaw"] == pytest.approx(lrs["small"] * (n_l / n_s) ** -0.713)
        and lrs["scratch"] == P.methods()["sparkling"].lrs["scratch"]  # the step-law arm is added; scratch stays tuned
    )
    with pytest.raises(ConfigError, match="--tau"):
        P.plan_progressive("sparkling", out="unused", tau="soon")
    with pytest.raises(ConfigError, match="--tau"):
        P.plan_progressive("naive-copy", out="unused", tau="5")


def test_method_pair_head_to_head(tmp_path, monkeypatch):
    """The pair: both grown runs per seed at equal tokens; the saving is the first method's FLOPs to
    reach the reference's final loss, recomputed here from the curves in results.json."""
    from nexus.experiments import pair

    other = Method("test-ffn-b", "test_ffn_double", "baseline-micro", {}, "test: FFN x2, other lr", {"train.lr": 1e-3})
    add_methods(monkeypatch, TEST_METHOD, other)
    monkeypatch.setitem(pair.PAIRS, "test-pair", ("test-ffn", "test-ffn-b", "test pair"))
    plan = pair.plan_pair("test-pair", list(MICRO), 384, 0.5, [0, 1], str(tmp_path / "pair"), eval_points=5)
    r = pair.run_pair(plan, quiet=True, say=lambda *_: None)
    on_disk = json.loads((tmp_path / "pair" / "results.json").read_text())
    for _sd, row in on_disk["per_seed"].items():
        a, b = row["runs"]["test-ffn"], row["runs"]["test-ffn-b"]
        assert a["tokens"] == b["tokens"] == plan["plans"]["test-ffn"]["token_budget"]
        hit = _first_crossing(
            [q["flops"] for q in a["val_curve"]], [q["val_loss"] for q in a["val_curve"]], b["final_val_loss"]
        )
        if hit is not None:
            assert row["saved"] == pytest.approx(1 - hit / b["total_flops"])
        else:
            back = _first_crossing(
                [q["flops"] for q in b["val_curve"]], [q["val_loss"] for q in b["val_curve"]], a["final_val_loss"]
            )
            assert row["saved"] == pytest.approx(back / a["total_flops"] - 1)
        # before growth the first method's run is its small model: FLOPs = growth tokens x the small model's FLOPs/token
        p_a = plan["plans"]["test-ffn"]
        at_growth = (
            p_a["grow_step"] * p_a["tokens_per_step"] * on_disk["sizes"]["test-ffn"]["small"]["train_flops_per_token"]
        )
        assert row["reached_before_growth"] == (hit is not None and hit <= at_growth)
        for m, run in row["runs"].items():
            assert row["val_loss_at_growth"][m] == next(
                q["val_loss"] for q in run["val_curve"] if q["step"] == p_a["grow_step"]
            )
    assert on_disk["summary"]["reached_before_growth"] == sum(
        row["reached_before_growth"] for row in on_disk["per_seed"].values()
    )
    assert r["summary"]["final_val_loss"]["test-ffn"]["n"] == 2
    assert "test-pair" in (tmp_path / "pair" / "report.md").read_text()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--seeds", "1,1"], "--seeds"),
        (["--tau", "soon"], "--tau"),
        (["--seed", "1", "--seeds", "2"], "--seed"),
        (["--method", "naive-copy", "--tau", "3"], "--tau"),
    ],
)
def test_seed_and_tau_bad_input(tmp_path, capsys, args, needle):
    err = _cli(tmp_path, capsys, *args)
    assert needle in err
