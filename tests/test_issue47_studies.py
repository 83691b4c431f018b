"""Issue 47's studies as data: sparkling-credible (successive-halving tuning on tuning seeds only, lr-matched
controls of every lr change at growth, the pre-stated margin's verdicts, the naive bracket) and
nexus-rank-vs-tokenformer (the pilot that voids the test, the paired difference of own-gap shares). Planted ledger
records (no training): each number is checked against its definition computed here."""

from __future__ import annotations

import pytest
from benchmark_module import load_benchmark

from nexus.experiments import ledger as L


@pytest.fixture(scope="module")
def study():
    return load_benchmark("studies/regime_study.py")


def _plant(ledger, runs: dict, loss_of) -> None:
    for name, run in runs.items():
        loss = loss_of(name, run)
        steps = run["cfg"]["train"]["steps"]
        ledger.write(
            name,
            run["cfg"],
            {"val_loss": loss, "wall_s": 1.0},
            [
                {"step": 1, "tokens": 64, "val_loss": loss + 1.0},
                {"step": steps, "tokens": 64 * steps, "val_loss": loss},
            ],
        )


def test_credible_tuning_never_touches_evaluation_seeds_and_every_lr_change_has_its_control(study, tmp_path):
    C = study.C
    assert not set(C.TUNING_SEEDS) & set(C.EVAL_SEEDS) and len(C.EVAL_SEEDS) == 8
    ledger = L.Ledger(tmp_path / "l")
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, C.TUNE_LRS, study=C.STUDY)
    assert {r["seed"] for p in ("tune", "tune-halving", "tune-cont") for r in parts[p]["runs"].values()} <= set(
        C.TUNING_SEEDS
    )
    assert {r["seed"] for p in ("eval", "bracket") for r in parts[p]["runs"].values()} <= set(C.EVAL_SEEDS)
    ev = parts["eval"]["runs"]
    for sd in C.EVAL_SEEDS:  # the grown run at K x lr and the small run at K x lr, both from the same prefix
        grown, ctl = ev[f"seed{sd}/sparkling@lr{C.LR_MULT}x"], ev[f"seed{sd}/small@lr{C.LR_MULT}x"]
        small = ev[f"seed{sd}/small"]
        assert grown["after"] == ctl["after"] == small["after"] == f"seed{sd}/prefix"
        assert grown["cfg"]["train"]["lr"] == ctl["cfg"]["train"]["lr"] == C.LR_MULT * small["cfg"]["train"]["lr"]
        assert small["cfg"]["train"]["dtype"] == "float32"  # pinned by the plan
    # the halving round runs only the first round's best TOP_K lrs per shape, once that round is complete
    planted = {lr: 3.0 + abs(lr - 4e-3) * 10 for lr in C.TUNE_LRS}  # best 4e-3, then 2e-3 and 8e-3 (tied: by order)
    _plant(ledger, parts["tune"]["runs"], lambda n, r: planted[r["lr"]])
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, C.TUNE_LRS, study=C.STUDY)
    top = sorted(C.TUNE_LRS, key=lambda lr: planted[lr])[: C.TOP_K]
    assert {r["lr"] for r in parts["tune-halving"]["runs"].values()} == set(top)
    assert parts["tune-halving"]["tuned"] and not parts["eval"]["tuned"]
    # the second seed flips the order of the two finalists: the mean over both seeds decides
    second = {top[0]: planted[top[0]] + 0.5, top[1]: planted[top[1]]}
    _plant(ledger, parts["tune-halving"]["runs"], lambda n, r: second[r["lr"]])
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, C.TUNE_LRS, study=C.STUDY)
    assert parts["eval"]["tuned"] and set(parts["tune-halving"]["choice"]["best"].values()) == {top[1]}


def test_credible_verdicts_follow_the_pre_stated_margin(study):
    C = study.C
    assert C.MARGIN == 0.01
    assert C._verdict(-0.02, 0.009).startswith("supported")
    assert C._verdict(0.011, 0.05).startswith("refuted")
    assert C._verdict(-0.01, 0.02).startswith("undetermined")


def test_arch_pilot_voids_the_comparison_when_a_family_gap_is_not_resolved(study, tmp_path):
    A = study.A
    ledger = L.Ledger(tmp_path / "l")
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, A.TUNE_LRS, study=A.STUDY)
    shapes = sorted(parts["tune"]["choice"]["table"])
    assert sum("nexus" in x for x in shapes) == 2 and sum(x.endswith("-small") for x in shapes) == 2, shapes

    # Nexus-Rank's scratch 0.2 below its small model (199 SE over the two seeds); TokenFormer's level with its own
    def loss(name, r):
        small = r["shape"].endswith("-small")
        nexus = "nexus" in r["shape"]
        base = 3.0 + abs(r["lr"] - 4e-3) + (0.01 if r["seed"] == 101 else 0.0)
        if small:
            return base
        if nexus:
            return base - 0.2 + (0.002 if r["seed"] == 101 else 0.0)
        return base + (0.001 if r["seed"] == 100 else -0.001)

    _plant(ledger, parts["tune"]["runs"], loss)
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, A.TUNE_LRS, study=A.STUDY)
    p = A.pilot(parts, ledger)
    assert set(p) == set(A.FAMILIES), shapes
    assert p["nexus-rank-regime"]["passes"] and not p["tokenformer-regime"]["passes"]
    said = []
    out = A.summarize(parts, ledger, said.append)
    assert any("FAILS: the test is void" in s for s in said) and "share_difference" not in out


def test_depth_vs_width_arms_end_at_one_shape_and_share_their_scratch_run(study, tmp_path):
    """Issue 48 item 6: the depth arm against the width arm at matched final parameters (planned)."""
    D = study.D
    ledger = L.Ledger(tmp_path / "l")
    parts = study.build("smoke", "embedded", tmp_path / "runs", ledger, D.TUNE_LRS, study=D.STUDY)
    ev = parts["eval"]["runs"]
    for sd in D.EVAL_SEEDS:
        width, depth = ev[f"seed{sd}/sparkling"], ev[f"seed{sd}/depth-zero-matched"]
        wm, dm = width["cfg"]["model"], depth["cfg"]["model"]
        wg = next(h for h in width["cfg"]["train"]["hooks"] if h["kind"] == "growth")["spec"]
        dg = next(h for h in depth["cfg"]["train"]["hooks"] if h["kind"] == "growth")["spec"]
        # width: 4 layers, FFN 128 -> 256; depth: 2 layers, FFN 256 -> 4 layers; both end 4 x d64 x FFN 256
        assert (wm["n_layers"], wm["ffn_hidden"], wg["ffn"]) == (4, 128, 256)
        assert (dm["n_layers"], dm["ffn_hidden"], dg["layers"], dg["init"]) == (2, 256, 4, "zero")
        assert wm["d_model"] == dm["d_model"] == 64 and width["shape"] == depth["shape"]
        scratch = [k for k, r in ev.items() if r["kind"] == "scratch" and r["seed"] == sd]
        assert scratch == [f"seed{sd}/scratch-{width['shape']}"]
        assert ev[scratch[0]]["cfg"]["model"]["n_layers"] == 4
        assert depth["after"] != width["after"]  # each from its own small model's prefix
