"""A WSD decay branched from a stable-phase run is the single run with its decay at the branch point, bit for bit
(issue 47 item 4; nexus.experiments.branch, nexus.experiments.study_plan.plan_horizon).

The horizon scan of one seed at the smoke scale (growth at step 4; horizons 1x, 2x, 4x end at steps 8, 12, 20, their
decays over the last 20% from steps 6, 10, 16) trains as the study does it: the prefix, each arm's stable phase in
segments (each from the checkpoint of the one before), and a decay branched from each segment. The slow reference of
each branch is its own config trained without the shortcut: from step 0 (scratch), or from the prefix in one piece
(a grown or small arm, which changes its lr at the growth step as eval's arms do). Final weights must be equal
bitwise."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from benchmark_module import load_benchmark

from nexus.config import ConfigError
from nexus.config_migration import saved_run_config
from nexus.experiments import ledger as L
from nexus.experiments.runs import run_resumable
from nexus.experiments.study_parts import Horizon, plan_horizon_part

LRS = {"small": 8e-3, "d64-ffn256": 2e-2}
SEED = 0


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """The horizon scan of sparkling@lr2x, its control small@lr2x and scratch on one seed, trained: (plan, ledger)."""
    R = load_benchmark("studies/progressive_regime.py")
    out = tmp_path_factory.mktemp("horizon")
    part = Horizon(("sparkling@lr2x",), (SEED,), "tune", LRS, small_lr_mults=(2,), controls=("small@lr2x",))
    plan = plan_horizon_part(part, LRS, R.SCALES["smoke"], "embedded", out / "runs")
    ledger = L.Ledger(out / "ledger")
    torch.set_num_threads(1)
    L.execute(plan["runs"], 1, 1, lambda s: None, ledger, plan["tokens_per_step"])
    return plan, ledger, out


def _weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "checkpoint" / "model.safetensors"))


def _lr_factors(run_dir) -> dict:
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr_factor"] for r in rows if "lr_factor" in r}


def test_the_plan_is_one_stable_run_per_arm_with_a_decay_per_horizon(scan):
    plan, ledger, _ = scan
    g = plan["grow_step"]
    assert {k: (h["steps"], h["decay_start"]) for k, h in plan["horizons"].items()} == {
        1: (2 * g, 6),
        2: (3 * g, 10),
        4: (5 * g, 16),
    }
    runs = plan["runs"]
    assert ledger.names() == sorted(runs) and len(runs) == 1 + 3 * 6
    pre = f"horizon/seed{SEED}"
    for arm in ("sparkling@lr2x", "small@lr2x", "scratch-d64-ffn256"):
        after = None if arm.startswith("scratch") else f"{pre}/prefix"
        for k, h in plan["horizons"].items():
            seg, dec = runs[f"{pre}/{arm}/stable-{k}x"], runs[f"{pre}/{arm}/{k}x"]
            assert seg["after"] == after and dec["after"] == f"{pre}/{arm}/stable-{k}x"
            assert seg["cfg"]["train"]["steps"] == dec["start_step"] == h["decay_start"]
            assert dec["cfg"]["train"]["steps"] == dec["cfg"]["train"]["schedule_steps"] == h["steps"]
            assert seg["cfg"]["train"]["schedule"] == dec["cfg"]["train"]["schedule"] == "wsd"
            after = f"{pre}/{arm}/stable-{k}x"
    # the prefix and every stable segment sit at the peak after the warmup: no decay before growth or a branch point
    warm = runs[f"{pre}/prefix"]["cfg"]["train"]["warmup_steps"]
    for name, r in runs.items():
        if r["phase"] == "stable":
            f = _lr_factors(r["cfg"]["train"]["out_dir"])
            assert f and all(v == 1.0 for s, v in f.items() if s > warm), name


@pytest.mark.parametrize(
    "arm,k,start",
    [
        ("sparkling@lr2x", 2, "prefix"),
        ("sparkling@lr2x", 4, "prefix"),
        ("small@lr2x", 1, "prefix"),
        ("scratch", 4, None),
    ],
)
def test_a_decay_branched_from_the_stable_run_equals_the_single_run_bitwise(scan, tmp_path, arm, k, start):
    plan, ledger, _ = scan
    runs = plan["runs"]
    arm = "scratch-d64-ffn256" if arm == "scratch" else arm
    name = f"horizon/seed{SEED}/{arm}/{k}x"
    run = runs[name]
    assert run["phase"] == "decay" and run["start_step"] > plan["grow_step"]  # a branch of a branch of ...
    cfg = saved_run_config(copy.deepcopy(run["cfg"]))
    ckpt = (
        None if start is None else Path(runs[f"horizon/seed{SEED}/{start}"]["cfg"]["train"]["out_dir"]) / "checkpoint"
    )
    res = run_resumable(cfg, tmp_path / "single", quiet=True, say=lambda *a: None, start_from=ckpt)
    assert res["val_loss"] == ledger.final_val_loss(name)
    a, b = _weights(tmp_path / "single"), _weights(run["cfg"]["train"]["out_dir"])
    assert a.keys() == b.keys() and all(torch.equal(a[t], b[t]) for t in a), name
    # and the lr it trained with: the schedule's own (flat, then the linear decay from its decay start)
    fa, fb = _lr_factors(tmp_path / "single"), _lr_factors(run["cfg"]["train"]["out_dir"])
    assert {s: v for s, v in fa.items() if s in fb} == fb and fb[max(fb)] == pytest.approx(cfg.train.min_lr_ratio)


def test_a_branch_that_is_not_the_checkpoints_run_is_refused_in_one_line(scan):
    from nexus.experiments.branch import branch_config

    plan, _, _ = scan
    runs = plan["runs"]
    seg = Path(runs[f"horizon/seed{SEED}/sparkling@lr2x/stable-2x"]["cfg"]["train"]["out_dir"]) / "checkpoint"
    cfg = saved_run_config(copy.deepcopy(runs[f"horizon/seed{SEED}/sparkling@lr2x/1x"]["cfg"]))
    # the 1x decay starts at step 6, before the segment's step 10: its lr there differs from what the segment trained
    with pytest.raises(ConfigError) as e:
        branch_config(seg, cfg)
    assert "at step 6" in str(e.value) and "\n" not in str(e.value)
    cos = copy.deepcopy(runs[f"horizon/seed{SEED}/sparkling@lr2x/2x"]["cfg"])
    cos["train"]["schedule"] = "cosine"  # the paper's schedule over the same horizon decays from the warmup on
    with pytest.raises(ConfigError, match="lr multiplier"):
        branch_config(seg, saved_run_config(cos))
    other = saved_run_config(copy.deepcopy(runs[f"horizon/seed{SEED}/scratch-d64-ffn256/2x"]["cfg"]))
    with pytest.raises(ConfigError, match="model"):
        branch_config(seg, other)  # scratch's config from the grown run's checkpoint: another model
    reseeded = copy.deepcopy(runs[f"horizon/seed{SEED}/sparkling@lr2x/2x"]["cfg"])
    reseeded["train"]["seed"] += 1
    with pytest.raises(ConfigError, match="train.seed"):
        branch_config(seg, saved_run_config(reseeded))
    same, notes = branch_config(
        seg, saved_run_config(copy.deepcopy(runs[f"horizon/seed{SEED}/sparkling@lr2x/2x"]["cfg"]))
    )
    assert same.model.ffn_hidden == 256 and same.growth_history and "grown at step 4" in notes[0]
