"""Generic growth machinery: optimizer-state surgery (per-element AdamW steps, asymmetric / copy /
drop policies, Muon momentum), pairing by name, and the checkpoint flow (grow -> reload -> resume
with decreasing loss; bad input leaves the source untouched and writes nothing)."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from nexus.analysis import growth_stats as gs
from nexus.checkpoint import load_checkpoint, load_trainer_state
from nexus.cli import main
from nexus.config import TrainConfig
from nexus.config_overrides import parse_overrides
from nexus.growth import ParamMap, grow_checkpoint, transplant_optimizer_state
from nexus.optim.param_groups import build_optimizer
from nexus.presets import get_preset
from nexus.train.resume import resume_config
from nexus.train.trainer import Trainer


class Tiny(nn.Module):
    def __init__(self, rows: int):
        super().__init__()
        self.a = nn.Linear(3, 2, bias=False)  # never grows: a second parameter to test pairing by name
        self.lin = nn.Linear(3, rows, bias=False)


def _train(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()


def _grown(old: Tiny, rows: int) -> Tiny:
    new = Tiny(rows)
    with torch.no_grad():
        new.a.weight.copy_(old.a.weight)
        new.lin.weight[: old.lin.out_features] = old.lin.weight
        new.lin.weight[old.lin.out_features :] = torch.randn(rows - old.lin.out_features, 3)
    return new


MAPS = {"a.weight": ParamMap("a.weight"), "lin.weight": ParamMap("lin.weight", (slice(0, 4), slice(0, 3)))}


@pytest.mark.parametrize("beta2", [0.95, 0.999])
def test_asymmetric_adamw_new_rows_behave_like_a_fresh_optimizer(beta2):
    tcfg = TrainConfig(optimizer={"kind": "adamw", "betas": [0.9, beta2]}, lr=0.01, weight_decay=0.1)
    torch.manual_seed(0)
    old = Tiny(4)
    old_opt = build_optimizer(old, tcfg)
    _train(old, old_opt, 7, seed=1)
    new = _grown(old, 6)
    new_opt = build_optimizer(new, tcfg)
    transplant_optimizer_state(old_opt.state_dict(), new_opt, MAPS, "asymmetric")
    st = new_opt.state_for("lin.weight")
    assert st["step"].shape == (6, 3)
    assert torch.equal(st["step"][:4], torch.full((4, 3), 7.0)) and torch.equal(st["step"][4:], torch.zeros(2, 3))
    assert torch.equal(st["exp_avg"][:4], old_opt.state_for("lin.weight")["exp_avg"]) and not st["exp_avg"][4:].any()
    assert torch.equal(st["new_mask"], torch.cat([torch.zeros(4, 3), torch.ones(2, 3)]))
    assert new_opt.state_for("a.weight")["step"].ndim == 0  # untouched tensors keep a scalar step

    # references: the old optimizer continued, and a brand-new optimizer on just the new rows
    cont, cont_opt = copy.deepcopy(old), None
    cont_opt = build_optimizer(cont, tcfg)
    cont_opt.load_state_dict(old_opt.state_dict())
    fresh = Tiny(2)
    with torch.no_grad():
        fresh.lin.weight.copy_(new.lin.weight[4:])
        fresh.a.weight.copy_(new.a.weight)
    fresh_opt = build_optimizer(fresh, tcfg)
    g = torch.Generator().manual_seed(9)
    for _ in range(3):
        G = torch.randn(6, 3, generator=g)
        Ga = torch.randn(2, 3, generator=g)
        new.lin.weight.grad, new.a.weight.grad = G.clone(), Ga.clone()
        cont.lin.weight.grad, cont.a.weight.grad = G[:4].clone(), Ga.clone()
        fresh.lin.weight.grad, fresh.a.weight.grad = G[4:].clone(), torch.zeros(2, 3)
        new_opt.step(), cont_opt.step(), fresh_opt.step()
        torch.testing.assert_close(new.lin.weight[:4], cont.lin.weight, atol=1e-7, rtol=1e-6)
        torch.testing.assert_close(new.lin.weight[4:], fresh.lin.weight, atol=1e-7, rtol=1e-6)
        torch.testing.assert_close(new.a.weight, cont.a.weight, atol=1e-7, rtol=1e-6)


def test_inherited_scalar_step_would_overshoot():
    """Why the per-element step matters: with the old scalar step the new rows' first update skips
    Adam's bias correction and is several times too large at beta2 = 0.999."""
    tcfg = TrainConfig(optimizer={"kind": "adamw", "betas": [0.9, 0.999]}, lr=0.01, weight_decay=0.0)
    torch.manual_seed(0)
    old = Tiny(4)
    old_opt = build_optimizer(old, tcfg)
    _train(old, old_opt, 50, seed=1)
    sizes = {}
    for per_element in (True, False):
        new = _grown(old, 6)
        new_opt = build_optimizer(new, tcfg)
        transplant_optimizer_state(old_opt.state_dict(), new_opt, MAPS, "asymmetric")
        if not per_element:
            # torch-style: the whole tensor shares one step; a long-trained tensor has a large one
            new_opt.state_for("lin.weight")["step"] = torch.tensor(5000.0)
        before = new.lin.weight[4:].detach().clone()
        new.lin.weight.grad = torch.ones(6, 3)
        new.a.weight.grad = torch.ones(2, 3)
        new_opt.step()
        sizes[per_element] = (new.lin.weight[4:] - before).abs().max().item()
    assert sizes[True] == pytest.approx(0.01, rel=1e-3)  # Adam's first step: lr * sign(g)
    assert sizes[False] > 3 * sizes[True]


def test_state_is_paired_by_name_not_order():
    tcfg = TrainConfig(optimizer="adamw")
    old = Tiny(4)
    old_opt = build_optimizer(old, tcfg)
    _train(old, old_opt, 3, seed=2)
    sd = old_opt.state_dict()
    sd["state"] = dict(reversed(list(sd["state"].items())))  # different order, same names
    new = _grown(old, 6)
    new_opt = build_optimizer(new, tcfg)
    transplant_optimizer_state(sd, new_opt, MAPS, "asymmetric")
    assert torch.equal(new_opt.state_for("a.weight")["exp_avg"], old_opt.state_for("a.weight")["exp_avg"])


def test_copy_policy_copies_moments_with_their_step_count_and_drop_discards():
    tcfg = TrainConfig(optimizer="adamw")
    old = Tiny(4)
    old_opt = build_optimizer(old, tcfg)
    _train(old, old_opt, 5, seed=3)
    new = _grown(old, 6)
    new_opt = build_optimizer(new, tcfg)
    maps = dict(MAPS)
    maps["lin.weight"] = ParamMap(
        "lin.weight", (slice(0, 4), slice(0, 3)), copy_source={0: torch.tensor([0, 1, 2, 3, 1, 2])}
    )
    transplant_optimizer_state(old_opt.state_dict(), new_opt, maps, "copy")
    st, st_old = new_opt.state_for("lin.weight"), old_opt.state_for("lin.weight")
    assert torch.equal(st["exp_avg"][4:], st_old["exp_avg"][[1, 2]])
    assert torch.equal(st["step"], torch.full((6, 3), 5.0))  # copied moments keep their bias-correction count
    new_opt2 = build_optimizer(new, tcfg)
    transplant_optimizer_state(old_opt.state_dict(), new_opt2, maps, "drop")
    assert set(new_opt2.state_for("lin.weight")) == {"new_mask"} and not new_opt2.state_for("a.weight")


def test_muon_momentum_old_rows_kept_new_rows_zero():
    tcfg = TrainConfig(optimizer="muon")
    old = Tiny(4)
    old_opt = build_optimizer(old, tcfg)
    assert "muon" in old_opt.optimizers
    _train(old, old_opt, 3, seed=4)
    new = _grown(old, 6)
    new_opt = build_optimizer(new, tcfg)
    transplant_optimizer_state(old_opt.state_dict(), new_opt, MAPS, "asymmetric")
    buf = new_opt.state_for("lin.weight")["momentum_buffer"]
    assert torch.equal(buf[:4], old_opt.state_for("lin.weight")["momentum_buffer"]) and not buf[4:].any()


# ----------------------------------------------------------------------------- checkpoint flow
def micro(out, *extra):
    cfg = get_preset("nexusformer-micro")
    parse_overrides(
        cfg,
        [
            "--train.out_dir",
            str(out),
            "--train.log_every",
            "1",
            "--train.eval_every",
            "0",
            "--train.eval_batches",
            "2",
            "--data.seq_len",
            "32",
            "--train.batch_size",
            "4",
            "--model.d_model",
            "32",
            "--train.sample_tokens",
            "4",
            "--train.warmup_steps",
            "2",
            *extra,
        ],
    )
    return cfg.validate()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    Trainer(micro(d / "run", "--train.steps", "12"), quiet=True).fit()
    return d / "run" / "checkpoint"


def _snapshot(path: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_grown_checkpoint_reloads_and_training_continues(trained, tmp_path):
    out = tmp_path / "grown"
    report = grow_checkpoint(trained, out, {"family": "nexus_rank", "delta_m": 16, "delta_a": 32})
    assert report["verify"]["max_abs_dlogits"] <= 1e-5 and report["verify"]["dead_blocks"] == []
    model, cfg, _ = load_checkpoint(out)
    assert (cfg.model.projection.rank_m, cfg.model.projection.rank_a) == (112, 160)
    assert cfg.growth_history[-1]["family"] == "nexus_rank" and cfg.growth_history[-1]["step"] == 12
    st = load_trainer_state(out)["optimizer"]["state"]["layers.0.attn.q_proj.w_a.weight"]["step"]
    assert st.shape == (160, 112) and st[:128, :96].eq(12).all() and st[128:].eq(0).all()

    src_eval = Trainer(
        resume_config(trained, ["--train.steps", "12"], out_dir=tmp_path / "e1")[0], resume=str(trained), quiet=True
    ).evaluate()
    cont, _ = resume_config(out, ["--train.steps", "26", "--train.lr", "3e-3"], out_dir=tmp_path / "cont")
    t = Trainer(cont, resume=str(out), quiet=True)
    assert t.step == 12
    at_growth = t.evaluate()
    assert at_growth == pytest.approx(src_eval, abs=1e-4)  # the function survived the checkpoint round trip
    result = t.fit()
    assert result["val_loss"] < at_growth - 0.05
    rows = [json.loads(line) for line in (tmp_path / "cont" / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in rows if "loss" in r]
    assert len(train_losses) == 14 and sum(train_losses[-4:]) < sum(train_losses[:4])


def test_grow_in_training_at_step(tmp_path):
    cfg = micro(tmp_path / "run", "--train.steps", "14")
    cfg.train.set_hook("growth", at=6, spec={"family": "nexus_rank", "delta_m": 8, "delta_a": 8})
    t = Trainer(cfg, quiet=True)
    t.fit()
    assert t.cfg.model.projection.rank_m == 104 and t.cfg.growth_history[-1]["step"] == 6
    model, ck_cfg, _ = load_checkpoint(tmp_path / "run" / "checkpoint")
    assert ck_cfg.model.projection.rank_a == 136


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--delta-m", "0"], "--delta-m=0"),
        (["--delta-a", "-3"], "--delta-a=-3"),
        (["--add-tokens", "8"], "no Pattention"),
        (["--delta-m", "4", "--cut", "sideways"], "--cut='sideways'"),
        (["--delta-m", "200"], "rank_m/rank_a"),
    ],
)
def test_cli_bad_input_exit_2_source_untouched_nothing_written(trained, tmp_path, capsys, argv, match):
    before = _snapshot(trained)
    out = tmp_path / "out"
    rc = main(["grow", "--checkpoint", str(trained), "--out", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and match in err and len(err.splitlines()) == 1
    assert _snapshot(trained) == before
    assert list(tmp_path.iterdir()) == []  # no output, no temporary leftovers


def test_cli_inexact_cut_for_l2norm_form_is_refused(tmp_path, capsys):
    run = tmp_path / "l2"
    Trainer(micro(run, "--train.steps", "2", "--model.projection.form", "l2norm"), quiet=True).fit()
    rc = main(
        [
            "grow",
            "--checkpoint",
            str(run / "checkpoint"),
            "--out",
            str(tmp_path / "o"),
            "--delta-m",
            "4",
            "--cut",
            "out",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "not exact for model.projection.form='l2norm'" in err
    assert not (tmp_path / "o").exists()
    rc = main(
        [
            "grow",
            "--checkpoint",
            str(run / "checkpoint"),
            "--out",
            str(tmp_path / "o"),
            "--delta-m",
            "4",
            "--delta-a",
            "4",
        ]
    )
    assert rc == 0 and "max |dlogits|" in capsys.readouterr().out


@pytest.mark.slow  # the statistics over every checkpoint of a grown run (~35 s); run with -m slow
def test_analyze_growth_over_checkpoints_of_a_grown_run(trained, tmp_path, capsys):
    grown = tmp_path / "grown"
    grow_checkpoint(trained, grown, {"family": "nexus_rank", "delta_m": 16, "delta_a": 32})
    cont, _ = resume_config(
        grown, ["--train.steps", "18", "--train.save_every", "2", "--train.keep_last", "5"], out_dir=tmp_path / "cont"
    )
    Trainer(cont, resume=str(grown), quiet=True).fit()
    snaps = (
        [str(grown)]
        + sorted(str(p) for p in (tmp_path / "cont").glob("step_*"))
        + [str(tmp_path / "cont" / "checkpoint")]
    )
    assert len(snaps) == 4
    out = tmp_path / "ana"
    capsys.readouterr()
    rc = main(["analyze", "growth", "--checkpoints", *snaps, "--out", str(out), "--batches", "1", "--json"])
    printed = capsys.readouterr()
    res = json.loads(printed.out)
    assert "nexus analyze growth: 4 checkpoints of 1 run(s): loading each" in printed.err  # the slow phase says so
    assert rc == 0 and res["growth_step"] == 12 and [s["step"] for s in res["snapshots"]] == [12, 14, 16, 18]
    assert res["R"][0] == 0 and all(r > 0 for r in res["R"][1:])  # the new weights move away from the growth state
    assert all(0 < s["noc"] <= 1 and 0 <= s["u_p"] <= 1 for s in res["snapshots"])
    assert (
        (out / "growth.json").is_file()
        and (out / "growth_radius.png").is_file()
        and (out / "growth_trajectory.png").is_file()
    )
    assert res["noc_reading"] == "whole" and res["pca"]["standardized"] is True
    # two runs pooled (cross-scale aggregation): one PCA over both runs' rows after growth, one fit
    out2 = tmp_path / "ana2"
    rc = main(
        [
            "analyze",
            "growth",
            "--checkpoints",
            *snaps[:3],
            "--checkpoints",
            *snaps,
            "--out",
            str(out2),
            "--batches",
            "1",
            "--json",
            "--noc-reading",
            "corner",
        ]
    )
    pooled = json.loads(capsys.readouterr().out)
    assert rc == 0 and pooled["n_runs"] == 2 and pooled["n_points"] == 7 and pooled["noc_reading"] == "corner"
    runs = pooled["runs"]
    assert [len(r["snapshots"]) for r in runs] == [3, 4]
    assert runs[1]["snapshots"][1]["noc"] != res["snapshots"][1]["noc"]  # the corner reading is another number
    rows = [
        gs.state_rows(
            [s["u_p"] for s in r["snapshots"]],
            [s["noc"] for s in r["snapshots"]],
            [1 / s["ppl"] for s in r["snapshots"]],
        )
        for r in runs
    ]
    want = gs.pooled_pca(rows)
    np.testing.assert_allclose(pooled["pooled"]["pca"]["components"], want["components"], atol=1e-9)
    R = [x for r in runs for x in r["R"]]
    fit = gs.scaling_fit(R, [s["ppl"] for r in runs for s in r["snapshots"]])
    assert pooled["scaling_w"] == pytest.approx(fit["w"]) and pooled["pooled"]["scaling_fit"]["n"] == 5
    for f in (
        "growth_scaling_pooled.png",
        "growth_pca_pooled.png",
        "run0_growth_radius.png",
        "run1_growth_trajectory.png",
    ):
        assert (out2 / f).is_file()
    rc = main(["analyze", "growth", "--checkpoints", str(trained), str(grown), "--out", str(tmp_path / "bad")])
    assert rc == 2 and "no growth record" in capsys.readouterr().err and not (tmp_path / "bad").exists()
