"""The ledger that lets a study outlive a session (issue 38 item 1), with tiny models (the regime benchmark's --smoke
scale: 4 steps before growth, 4 after): one atomic file per finished run, a rerun skips what the ledger holds, a run
killed mid-way is finished by the rerun to the result an uninterrupted run gets, runs in two parallel workers equal
the same runs alone bitwise on the CPU, and the summary and figure come from the ledger with the run directories
gone. Also the study's leak-free lr choice, its refusals and its estimate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchmark_module import BENCHMARKS, load_benchmark

from nexus.config import ConfigError
from nexus.experiments import ledger as L

LRS = {"small": 8e-3, "d64-ffn256": 2e-2}  # two different lrs, so the wide-lr arm is visible


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("studies/progressive_regime.py")


@pytest.fixture(scope="module")
def study():
    return load_benchmark("studies/regime_study.py")


def _plan(bench, out: Path) -> dict:
    return bench.plan_regime(["sparkling", "sparkling" + bench.WIDE_LR], [0], "smoke", "embedded", out, LRS)


def _train(bench, out: Path, workers: int):
    plan = _plan(bench, out / "runs")
    ledger = L.Ledger(out / "ledger")
    L.execute(plan["runs"], workers, 1, lambda s: None, ledger, plan["tokens_per_step"])
    return plan, ledger, out


@pytest.fixture(scope="module")
def trained(bench, tmp_path_factory):
    """Five runs (prefix, small, scratch, two grown branches) in one process: {1: (plan, ledger, out)}."""
    return {1: _train(bench, tmp_path_factory.mktemp("w1"), 1)}


def test_each_finished_run_is_one_ledger_file_with_config_final_and_curve(trained):
    plan, ledger, out = trained[1]
    assert ledger.names() == sorted(plan["runs"])
    for name, run in plan["runs"].items():
        rec = json.loads(ledger.path(name).read_text())
        assert rec["config_key"] == L.config_key(run["cfg"]) and rec["config"] == run["cfg"]
        done = json.loads((Path(run["cfg"]["train"]["out_dir"]) / "done.json").read_text())
        assert rec["final"]["val_loss"] == done["val_loss"]
        # the parameters of the model the run ends with (a grown branch grows in training), as its checkpoint holds
        from safetensors.torch import load_file

        weights = load_file(str(Path(run["cfg"]["train"]["out_dir"]) / "checkpoint" / "model.safetensors"))
        assert rec["final"]["params"] == sum(t.numel() for t in weights.values())
        rows = [
            json.loads(x) for x in (Path(run["cfg"]["train"]["out_dir"]) / "metrics.jsonl").read_text().splitlines()
        ]
        assert [p["val_loss"] for p in rec["val_curve"]] == [r["val_loss"] for r in rows if "val_loss" in r]
        assert rec["device"]["cpu_capability"]
    assert not list((out / "ledger").rglob("*.tmp")) and not list((out / "ledger").rglob(".*"))


@pytest.mark.slow
def test_runs_in_parallel_workers_equal_the_same_runs_alone_bitwise(bench, trained, tmp_path):
    (_, par, _), (plan, alone, _) = _train(bench, tmp_path, 2), trained[1]
    for name in plan["runs"]:
        a, b = par.read(name), alone.read(name)
        assert a["final"]["val_loss"] == b["final"]["val_loss"], name
        assert a["val_curve"] == b["val_curve"], name


def test_a_rerun_trains_nothing_the_ledger_holds(trained, monkeypatch):
    plan, ledger, _ = trained[1]
    called = []
    monkeypatch.setattr(L, "run_job", lambda *a: called.append(a) or pytest.fail("a held run was trained again"))
    said = []
    assert L.execute(plan["runs"], 1, 1, said.append, ledger, plan["tokens_per_step"]) == {}
    assert not called and f"{len(plan['runs'])} of {len(plan['runs'])} runs already there" in said[0]


def test_a_ledger_file_of_another_config_is_refused_in_one_line(trained, tmp_path):
    plan, ledger, _ = trained[1]
    other = json.loads(json.dumps(plan["runs"]["seed0/small"]["cfg"]))
    other["train"]["lr"] *= 2
    with pytest.raises(ConfigError) as e:
        ledger.holds("seed0/small", other)
    assert "another config" in str(e.value) and "\n" not in str(e.value)
    moved = json.loads(json.dumps(plan["runs"]["seed0/small"]["cfg"]))
    moved["train"]["out_dir"], moved["train"]["device"] = str(tmp_path / "elsewhere"), "cuda"
    assert ledger.holds("seed0/small", moved)  # where it wrote and what it ran on are not the experiment


def test_the_wide_lr_arm_continues_the_schedule_at_scratchs_lr(trained):
    plan, _, _ = trained[1]
    g = plan["grow_step"]

    def lrs(name):
        path = Path(plan["runs"][name]["cfg"]["train"]["out_dir"]) / "metrics.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        return {r["step"]: (r["lr"], r["lr_factor"]) for r in rows if "lr" in r}

    keep, wide = lrs("seed0/sparkling"), lrs("seed0/sparkling" + "@wide-lr")
    assert set(keep) == set(wide) and min(keep) > g
    for step in keep:  # the same schedule factor, the peak moved from the small model's lr to scratch's
        assert wide[step][1] == keep[step][1]
        assert wide[step][0] == pytest.approx(keep[step][0] * LRS["d64-ffn256"] / LRS["small"], rel=1e-9)


def test_summary_and_figure_come_from_the_ledger_alone(bench, trained, monkeypatch, tmp_path):
    _, held, _ = trained[1]
    out = tmp_path / "later"  # a later session holds only the ledger: no checkpoints, no metrics
    shutil.copytree(held.root, out / "ledger")
    plan, ledger = _plan(bench, out / "runs"), L.Ledger(out / "ledger")
    assert not (out / "runs").exists()
    summary = bench.summarize(plan, ledger)
    assert summary["methods"]["sparkling"]["per_seed"]["small"] == [ledger.final_val_loss("seed0/small")]
    import nexus.figures

    figs = []
    monkeypatch.setattr(nexus.figures, "save_figure", lambda fig, path: figs.append(fig) or Path(path).name)
    bench.plot_regime(plan, ledger, out)
    lines = {ln.get_label().split(",")[0]: ln for ln in figs[0].axes[0].lines}
    prefix = [p["val_loss"] for p in ledger.curve("seed0/prefix")]
    grown = ledger.curve("seed0/sparkling")
    ys = [float(y) for y in lines["sparkling"].get_ydata()]
    assert ys[0] == prefix[0] and ys[-len(grown) :] == [p["val_loss"] for p in grown]  # the prefix, then the branch


KILL_SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
from pathlib import Path
import progressive_regime as R
from nexus.experiments import ledger as L
plan = R.plan_regime(["sparkling"], [0], "smoke", "embedded", Path({out!r}) / "runs", {lrs!r})
L.execute(plan["runs"], 1, 1, print, L.Ledger(Path({out!r}) / "ledger"), plan["tokens_per_step"])
"""


@pytest.mark.slow
def test_a_study_killed_mid_way_is_finished_by_the_rerun_to_the_same_results(bench, tmp_path):
    """SIGKILL once the first run is in the ledger (the second one mid-way); the same command again skips the
    first, finishes the rest, and every ledger record equals an uninterrupted run's."""
    import os

    killed, whole = tmp_path / "killed", tmp_path / "whole"
    script = KILL_SCRIPT.format(bench=str(BENCHMARKS / "studies"), out=str(killed), lrs=LRS)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while not list((killed / "ledger").rglob("*.json")) and p.poll() is None and time.time() - t0 < 120:
        time.sleep(0.05)
    p.kill()
    p.wait()
    held = L.Ledger(killed / "ledger").names()
    assert 1 <= len(held) < 4, held  # killed part-way
    plan = bench.plan_regime(["sparkling"], [0], "smoke", "embedded", killed / "runs", LRS)
    L.execute(plan["runs"], 1, 1, lambda s: None, L.Ledger(killed / "ledger"), plan["tokens_per_step"])
    ref = bench.plan_regime(["sparkling"], [0], "smoke", "embedded", whole / "runs", LRS)
    L.execute(ref["runs"], 1, 1, lambda s: None, L.Ledger(whole / "ledger"), ref["tokens_per_step"])
    a, b = L.Ledger(killed / "ledger"), L.Ledger(whole / "ledger")
    assert a.names() == b.names() == sorted(plan["runs"])
    for name in plan["runs"]:
        assert a.read(name)["final"]["val_loss"] == b.read(name)["final"]["val_loss"], name
        assert a.read(name)["val_curve"] == b.read(name)["val_curve"], name


def test_downsample_keeps_the_ends_and_at_most_n_points():
    pts = [{"step": i} for i in range(1000)]
    d = L.downsample(pts, 50)
    assert len(d) == 50 and d[0] == pts[0] and d[-1] == pts[-1]
    assert L.downsample(pts[:10], 50) == pts[:10]


# ----------------------------------------------------------------------------- the study (leak-free tuning, estimate)
def _record(ledger, name, run, loss):
    """A planted record: the run's final loss, without training it."""
    ledger.write(name, run["cfg"], {"val_loss": loss}, [{"step": 1, "tokens": 64, "val_loss": loss}])


def test_tuning_never_uses_an_evaluation_seed_and_chooses_by_the_mean_over_tuning_seeds(study, tmp_path):
    assert not set(study.TUNING_SEEDS) & set(study.EVAL_SEEDS) and len(study.TUNING_SEEDS) >= 2
    assert not set(study.ARCH_TUNING_SEEDS) & set(study.ARCH_SEEDS)
    ledger = L.Ledger(tmp_path / "ledger")
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger)
    tune = parts["tune"]["plans"][0]
    assert {r["seed"] for r in tune["runs"].values()} == set(study.TUNING_SEEDS)
    assert {r["seed"] for p in ("headline", "ablations", "horizon") for r in parts[p]["runs"].values()} <= set(
        study.EVAL_SEEDS
    )
    assert not parts["headline"]["tuned"]  # nothing tuned yet: the headline is not ready to run
    # planted losses: seed 100 alone would pick 0.032, the mean over both seeds picks 0.016
    planted = {
        (0.004, 100): 3.0,
        (0.008, 100): 2.5,
        (0.016, 100): 2.2,
        (0.032, 100): 2.1,
        (0.064, 100): 2.9,
        (0.004, 101): 3.0,
        (0.008, 101): 2.5,
        (0.016, 101): 2.2,
        (0.032, 101): 2.5,
        (0.064, 101): 2.9,
    }
    for name, run in tune["runs"].items():
        _record(ledger, name, run, planted[(run["lr"], run["seed"])] + (0.1 if run["shape"] != "small" else 0))
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger)
    c = parts["tune"]["choice"]
    assert c["complete"] and c["best"] == {"small": 0.016, "d64-ffn256": 0.016}
    assert [r["lr"] for r in c["neighbours"]["small"]] == [0.008, 0.032] and not c["edge"]["small"]
    assert parts["headline"]["tuned"]
    lr_of = {
        r["kind"]: r["cfg"]["train"]["lr"]
        for r in parts["headline"]["runs"].values()
        if r.get("method") != "sparkling@wide-lr"
    }
    assert lr_of == {"prefix": 0.016, "small": 0.016, "grown": 0.016, "scratch": 0.016}


def test_a_part_before_its_tuning_is_refused_in_one_line(study, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study.main(
            ["--scale", "smoke", "--parts", "headline", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "o")]
        )
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--parts headline needs part 'tune'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists() and not (tmp_path / "r" / "progressive-regime" / "runs").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--parts", "nope"], "--parts"),
        (["--estimate", "--device", "cuda"], "--cuda-steps-per-s"),
        ([], "nothing to do"),
        (["--parts", "tune", "--workers", "0"], "--workers"),
    ],
)
def test_study_bad_input_is_one_line_exit_2(study, tmp_path, capsys, args, needle):
    with pytest.raises(SystemExit) as e:
        study.main(["--scale", "smoke", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_estimate_counts_done_and_prices_what_remains(study, bench, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "step_seconds", lambda cfg, steps, threads: (0.5, 2.0))
    monkeypatch.setattr(study.R, "step_seconds", lambda cfg, steps, threads: (0.5, 2.0))
    ledger = L.Ledger(tmp_path / "r" / "progressive-regime")
    parts = study.build("smoke", "embedded", tmp_path / "o" / "smoke", ledger)
    first = next(iter(parts["tune"]["runs"].items()))
    _record(ledger, *first, 2.0)
    rows = study.estimate_parts(parts, ledger, 1, 2, 3, "cpu", None, print)
    tune = rows[0]
    assert tune["part"] == "tune" and tune["done"] == 1 and tune["remaining"] == len(parts["tune"]["runs"]) - 1
    per_run = [
        bench.describe_run(r, parts["tune"]["plans"][0]) for k, r in parts["tune"]["runs"].items() if k != first[0]
    ]
    evals = [
        max(1, d["steps"] // r["cfg"]["train"]["eval_every"]) + 1
        for d, r in zip(per_run, [r for k, r in parts["tune"]["runs"].items() if k != first[0]])
    ]
    assert tune["serial_s"] == pytest.approx(sum(0.5 * d["steps"] + 2.0 * e for d, e in zip(per_run, evals)))
    assert tune["wall_s"] == pytest.approx(tune["serial_s"] / 2)
    gpu = study.estimate_parts(parts, ledger, 1, 2, 3, "cuda", 40.0, print)
    assert gpu[0]["serial_s"] == pytest.approx(gpu[0]["remaining_steps"] / 40.0)
    assert "ASSUMED rate of 40" in capsys.readouterr().out


def test_arch_summary_is_the_paired_difference_of_growth_gains(study, tmp_path):
    """Planted finals: Nexus-Rank's growth gain (small - grown) is 0.10 + e_s, TokenFormer's 0.04 + e_s (paired noise
    e_s), so the paired difference is exactly 0.06 over 5 seeds; each one's share uses the 3 scratch seeds only."""
    ledger = L.Ledger(tmp_path / "ledger")
    plan = study.build("smoke", "embedded", tmp_path / "runs", ledger)["arch"]["plans"][0]
    assert {r["seed"] for r in plan["runs"].values() if r["kind"] == "scratch"} == set(study.ARCH_SCRATCH_SEEDS)
    noise = [0.0, 0.013, -0.007, 0.021, -0.015]
    want = {"nexus-rank-regime": (0.10, 0.20), "tokenformer-regime": (0.04, 0.08)}  # gain, small - scratch
    for name, run in plan["runs"].items():
        if run["kind"] == "prefix":
            continue
        e = noise[run["seed"]]
        if run["kind"] == "scratch":  # TokenFormer's projection is Pattention
            m = "tokenformer-regime" if "pattention" in run["shape"] else "nexus-rank-regime"
        else:  # arch/seedN/<method> (grown) or arch/seedN/<method>-small
            m = next(x for x in study.ARCH if name.split("/")[-1] in (x, f"{x}-small"))
        gain, gap = want[m]
        loss = {"small": 3.0 + e, "grown": 3.0 + e - gain - e / 2, "scratch": 3.0 + e - gap}[run["kind"]]
        _record(ledger, name, run, loss)
    lines = []
    got = study.arch_summary(plan, ledger, lines.append)
    assert got["gain_difference"]["diff"]["mean"] == pytest.approx(0.06, abs=1e-12)
    assert got["gain_difference"]["diff"]["std"] == pytest.approx(0.0, abs=1e-12)
    for m, (gain, gap) in want.items():  # scratch seeds 0-2: share = mean(gain + e/2) / gap
        assert got["share"][m]["estimate"] == pytest.approx((gain + sum(noise[:3]) / 6) / gap, rel=1e-9)
    assert "nexus-rank-regime minus tokenformer-regime" in lines[0]


def test_a_study_ledger_in_benchmarks_results_is_not_git_ignored():
    """The ledger is what gets committed between sessions; a `runs/` ignore rule once hid it from git silently."""
    repo = BENCHMARKS.parent
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=repo, capture_output=True, text=True)
    if (
        inside.stdout.strip() != "true"
    ):  # a copy outside a checkout (tools/mutation.py's scratch tree): no rules to check
        pytest.skip(f"{repo} is not a git checkout")
    rel = (Path("benchmarks") / "results" / "some-study" / L.RUNS / "seed0" / "small.json").as_posix()
    r = subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=repo)
    assert r.returncode == 1, f"{rel} is git-ignored"


def test_a_run_trained_on_another_corpus_under_the_same_name_is_refused(trained, tmp_path):
    """data.source names a corpus whose contents can change (the embedded corpus lost 27 duplicate docstrings): the
    ledger keys a run by its tokens' hash too, so a record from the old contents is not taken as today's run."""
    plan, ledger, _ = trained[1]
    rec = ledger.read("seed0/small")
    assert rec["data_key"] == L.data_key(plan["runs"]["seed0/small"]["cfg"])
    other = L.Ledger(tmp_path / "l")
    p = other.path("seed0/small")
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(L.seal({**rec, "data_key": "0" * 16})))  # sealed: only the corpus differs
    with pytest.raises(ConfigError) as e:
        other.holds("seed0/small", plan["runs"]["seed0/small"]["cfg"])
    assert "another corpus" in str(e.value) and "\n" not in str(e.value)
    cfg = json.loads(json.dumps(plan["runs"]["seed0/small"]["cfg"]))
    text = tmp_path / "corpus.txt"
    text.write_text("a different corpus " * 20000)
    cfg["data"]["source"] = str(text)
    assert L.data_key(cfg) != rec["data_key"]


def test_a_record_from_before_a_config_field_was_added_is_still_held(trained, tmp_path):
    """A ledger outlives schema additions: a field the recorded config lacks takes its default on both sides (two
    were added while this study ran: model.loss_chunk_tokens and train.compile_mode); a changed value does not."""
    plan, ledger, _ = trained[1]
    rec = ledger.read("seed0/small")
    older = json.loads(json.dumps(rec))
    older["config"]["train"].pop("compile_mode", None)
    older["config"]["model"].pop("loss_chunk_tokens", None)
    import hashlib

    raw = json.loads(json.dumps(older["config"]))  # the key such a record carried: its own raw form, hashed
    raw["train"].pop("out_dir"), raw["train"].pop("device", None)
    older["config_key"] = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]
    other = L.Ledger(tmp_path / "l")
    p = other.path("seed0/small")
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(L.seal(older)))
    assert other.holds("seed0/small", plan["runs"]["seed0/small"]["cfg"])
    changed = json.loads(json.dumps(plan["runs"]["seed0/small"]["cfg"]))
    changed["train"]["seed"] += 1
    with pytest.raises(ConfigError):
        other.holds("seed0/small", changed)


# ----------------------------------------------------------------------------- the committed ledger and today's planner
MAIN_LEDGER = BENCHMARKS / "results" / "progressive-main"  # issue 38's study at the main scale: 70 finished runs
ARCH_OUT = Path("/tmp/study/out/main")  # where the arch parts' runs were trained (their records' train.out_dir)
MAIN_OUT = Path("runs/regime-study/main")  # the default --out of the commands that trained them (README of the ledger)


def _held(ledger, runs: dict, names: list[str]) -> None:
    """Each named ledger run is planned today under its name, with the config it was trained with (compared as today's
    code parses both, as the ledger keys them; the directory and device too) on the same corpus."""
    from nexus.config_migration import saved_run_config

    for name in names:
        assert name in runs, f"ledger run {name} is not in today's plan"
        assert ledger.holds(name, runs[name]["cfg"]), name  # config key and corpus key; refuses another config
        recorded = saved_run_config(json.loads(json.dumps(ledger.read(name)["config"]))).to_dict()
        assert saved_run_config(json.loads(json.dumps(runs[name]["cfg"]))).to_dict() == recorded, name


def test_todays_plan_holds_the_main_ledgers_tuning_and_sparkling_runs(study):
    """The fast half of the check below: the tune part and the headline's sparkling arm (40 of the 70 runs)."""
    import dataclasses

    from nexus.experiments.study_parts import build_parts

    ledger = L.Ledger(MAIN_LEDGER)
    spec = study.study_parts(study.MAIN_TUNE_LRS)
    parts = build_parts(
        {"tune": spec["tune"], "headline": dataclasses.replace(spec["headline"], arms=("sparkling",))},
        study.R.SCALES["main"],
        "embedded",
        MAIN_OUT,
        ledger,
        study.MAIN_TUNE_LRS,
    )
    assert parts["tune"]["choice"]["complete"] and parts["headline"]["tuned"]  # the choice is read from the ledger
    runs = {**parts["tune"]["runs"], **parts["headline"]["runs"]}
    names = [n for n in ledger.names() if n in runs]
    assert len(names) == len(runs) == 40
    _held(ledger, runs, names)


@pytest.mark.slow
def test_todays_plan_holds_every_run_of_the_main_ledger(study):
    """Every finished run of the committed main-scale study: today's planner plans it under its name with its config,
    so a rerun of the study's commands skips all 134 and nothing is trained twice or refused: the 70 of tune,
    headline and ablations, and the 64 of arch-tune and arch, which were trained with --out /tmp/study/out."""
    ledger = L.Ledger(MAIN_LEDGER)
    parts = study.build("main", "embedded", MAIN_OUT, ledger, study.MAIN_TUNE_LRS)
    arch = study.build("main", "embedded", ARCH_OUT, ledger, study.MAIN_TUNE_LRS)
    runs = {k: r for name, part in parts.items() if not name.startswith("arch") for k, r in part["runs"].items()}
    runs.update({k: r for name, part in arch.items() if name.startswith("arch") for k, r in part["runs"].items()})
    assert len(ledger.names()) == 134
    _held(ledger, runs, ledger.names())
    assert all(parts[p]["tuned"] for p in ("headline", "ablations"))
