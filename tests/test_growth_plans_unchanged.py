"""The growth studies' plans did not change when their planning moved into one planner (issue 37 item 6).

tests/data/growth_plans_1dbb173.json holds the plans the code at 1dbb173 made (three planners then): every method of
`nexus experiment progressive` and the regime study at full scale (142 runs, none in its ledger yet). Today's
planner must make the same runs with the same configs. A config is compared in the form today's code parses it to
(nexus.config_migration.saved_run_config, as the ledger keys runs), so a field added later with its default is not
a change, while any changed value is. The main-scale study's finished runs are checked against its ledger in
tests/test_ledger.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from benchmark_module import load_benchmark

from nexus.config_migration import saved_run_config
from nexus.experiments import progressive as P

FIXTURE = Path(__file__).parent / "data" / "growth_plans_1dbb173.json"
RECORDED = json.loads(FIXTURE.read_text())


def _recorded_config(entry: dict) -> dict:
    """A config from its dotted differences to the fixture's base."""
    flat = {**RECORDED["base"], **entry["set"]}
    for k in entry.get("unset", []):
        flat.pop(k)
    out: dict = {}
    for dotted, v in flat.items():
        *path, last = dotted.split(".")
        node = out
        for p in path:
            node = node.setdefault(p, {})
        node[last] = copy.deepcopy(v)
    return out


# Deliberate changes since 1dbb173, applied to the recorded plans by name; everything else must still match exactly.
# Issue 50 item 6: the FFN-axis methods' from-scratch lr moved from the seed-0 sweep's 2e-3 to study progressive-main's
# leak-free tuning, 4e-3 (its scratch run's config and the rule report.md prints).
SCRATCH_LR_BEFORE, SCRATCH_LR_NOW = 0.002, 0.004


def _intended(name: str, run: str, cfg: dict) -> dict:
    if P.methods()[name].lrs and run.endswith("/scratch"):
        assert cfg["train"]["lr"] == SCRATCH_LR_BEFORE, (name, run)
        cfg["train"]["lr"] = SCRATCH_LR_NOW
    return cfg


def _intended_meta(name: str, meta: dict) -> dict:
    if P.methods()[name].lrs:
        assert meta["scratch_lr_rule"].startswith(f"tuned: {SCRATCH_LR_BEFORE:g} ("), meta["scratch_lr_rule"]
        meta["scratch_lr_rule"] = f"tuned: {SCRATCH_LR_NOW:g} ({P.MAIN_JOB_SWEEP})"
        before = f"peak lr {SCRATCH_LR_BEFORE:g},"
        assert before in meta["schedules"]["scratch"], meta["schedules"]["scratch"]
        meta["schedules"] = {
            **meta["schedules"],
            "scratch": meta["schedules"]["scratch"].replace(before, f"peak lr {SCRATCH_LR_NOW:g},"),
        }
    return meta


def _parsed(cfg: dict) -> dict:
    return saved_run_config(copy.deepcopy(cfg)).to_dict()


def _json(x):
    return json.loads(json.dumps(x, default=str))


METHODS = sorted(k.split("/", 1)[1] for k in RECORDED["plans"] if k.startswith("prog/"))


def test_the_fixture_covers_every_registered_method():
    """Every method of nexus's own growth families (a test module registers one of its own family at import,
    test_experiment_progressive's `test-ffn-registered`, which has no recorded plan and is not nexus's)."""
    from nexus.growth import spec as S

    own = {n for n, m in P.methods().items() if S.spec_classes()[m.family].__module__.startswith("nexus.")}
    # a family added after 1dbb173 had no plan to keep (depth growth, issue 48: tests/test_experiment_methods.py
    # plans its methods); a method of an older family registered later has no recorded plan: add it here
    later = {n for n, m in P.methods().items() if m.family in ("depth",)}
    assert set(METHODS) == own - later


@pytest.mark.parametrize("name", METHODS)
def test_nexus_experiment_progressive_plans_each_method_as_recorded(name):
    rec = RECORDED["plans"][f"prog/{name}"]
    plan = _json(P.plan_progressive(name, out="runs/x"))
    got = {f"{sd}/{run}": c for sd, per in plan.pop("configs").items() for run, c in per.items()}
    assert sorted(got) == sorted(rec["configs"])
    for run, cfg in got.items():
        assert _parsed(cfg) == _parsed(_intended(name, run, _recorded_config(rec["configs"][run]))), run
    meta = _intended_meta(name, {k: v for k, v in rec["meta"].items() if k != "description"})  # description: no plan
    assert {k: v for k, v in plan.items() if k != "description"} == meta


@pytest.mark.slow
def test_the_regime_study_at_full_scale_plans_as_recorded(tmp_path):
    """All 142 runs of the full-scale study (its ledger is empty: every part planned at its estimate-only lrs)."""
    from nexus.experiments.ledger import Ledger

    study = load_benchmark("studies/regime_study.py")
    rec = RECORDED["plans"]["study/full/stdlib/progressive-regime"]
    parts = study.build("full", "stdlib", Path("runs/regime-study/full"), Ledger(tmp_path / "empty-ledger"))
    assert sorted(parts) == sorted(rec["meta"])
    for name, part in parts.items():
        want = rec["meta"][name]
        # a grid part recorded no "tuned" at 1dbb173; since the successive halving a first-round grid is tuned=True
        # (study_parts.build_parts): the same meaning, nothing waits on a tuning
        assert part.get("tuned") == (True if want["tuned"] is None and "choice" in part else want["tuned"]), name
        assert (
            _json({k: {f: x for f, x in r.items() if f != "cfg"} for k, r in part["runs"].items()}) == want["runs"]
        ), name
        for run, r in part["runs"].items():
            assert _parsed(r["cfg"]) == _parsed(_recorded_config(rec["configs"][run])), run
