"""Asymmetric re-warmup (SPARKLING eq. 25-28): the curve, old entries bitwise on the baseline
schedule, new entries on the re-warmup curve, under AdamW and Muon; the rewarmup-all baseline."""

import copy
import math

import pytest
import torch

from nexus.config import ModelConfig, RunConfig, TrainConfig
from nexus.growth import grow
from nexus.growth.rewarmup import make_rewarmup
from nexus.models import build_model
from nexus.optim.param_groups import build_optimizer
from nexus.optim.schedule import lr_factor, set_lr


def paper_f(t, t_w, T, eta0, eta_max, eta_min):
    """Eq. 25-26 written out literally (independent of nexus.growth.rewarmup)."""
    if t < t_w:
        return eta0 + (eta_max - eta0) * t / t_w
    return eta_min + (eta_max - eta_min) * 0.5 * (1 + math.cos(math.pi * min((t - t_w) / (T - t_w), 1.0)))


def test_curve_matches_eq_28():
    tcfg = TrainConfig(steps=1000, warmup_steps=30, schedule="cosine", min_lr_ratio=0.1)
    t_e, rho, tau = 400, 1.3, 250
    fn = make_rewarmup({"step": t_e, "rewarmup": {"rho": rho, "tau": tau}})
    eta_e = 2e-3 * lr_factor(t_e, tcfg)
    for t in (400, 401, 525, 649, 650, 651, 800, 999):
        # T of eq. 25/28 is the last step, steps - 1: the baseline (schedule.lr_factor) reaches eta_min there
        want = paper_f(t - t_e, tau, tcfg.steps - 1 - t_e, eta_e, rho * eta_e, 2e-3 * 0.1)
        assert fn(t, 2e-3, lr_factor(t, tcfg), tcfg) == pytest.approx(want, rel=1e-12)
    assert fn(t_e, 1.0, 0, tcfg) == pytest.approx(lr_factor(t_e, tcfg))  # continuous at the growth step
    assert fn(t_e + tau, 1.0, 0, tcfg) == pytest.approx(rho * lr_factor(t_e, tcfg))  # peak rho * eta(t_e)
    assert fn(tcfg.steps - 1, 1.0, 0, tcfg) == pytest.approx(0.1) == pytest.approx(lr_factor(tcfg.steps - 1, tcfg))


def _grown(optimizer: str, rewarmup_key: str = "rewarmup", schedule: str = "cosine"):
    torch.manual_seed(0)
    cfg = RunConfig(
        model=ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48, vocab_size=64),
        train=TrainConfig(
            optimizer=optimizer,
            steps=200,
            warmup_steps=10,
            lr=3e-3,
            weight_decay=0.1,
            schedule=schedule,
            decay_fraction=0.5,
        ),
    )
    model = build_model(cfg.model)
    opt = build_optimizer(model, cfg.train)
    x = torch.randint(0, 64, (4, 16))
    for step in range(6):
        set_lr(opt, step, cfg.train)
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    spec = {"family": "width", "ffn": 80, "hidden": 48, "init": "copy,copy", rewarmup_key: [1.3, 20]}
    new_model, new_cfg, new_opt, res = grow(model, cfg, spec, opt.state_dict(), step=6)
    return new_model, new_cfg, new_opt, res, x


def _one_step(model, opt, x, step, tcfg, rewarmup):
    """One optimizer step from a copy of (model, opt); returns {name: (before, after)}."""
    model, opt_sd = copy.deepcopy(model), opt.state_dict()
    from nexus.optim.param_groups import build_optimizer as build

    opt2 = build(model, tcfg)
    opt2.load_state_dict(opt_sd)
    set_lr(opt2, step, tcfg, rewarmup)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(x, labels=x).loss.backward()
    opt2.step()
    return {n: (before[n], p.detach().clone()) for n, p in model.named_parameters()}, opt2


@pytest.mark.parametrize(
    "optimizer,schedule",
    [("adamw", "cosine"), ("muon", "cosine"), ("adamw", "wsd"), ("adamw", "linear_warmdown"), ("adamw", "constant")],
)
def test_old_entries_bitwise_baseline_new_entries_on_the_curve(optimizer, schedule):
    """The per-parameter lr seen through real updates: old entries on eta(t), new ones on the formula."""
    from test_rewarmup_schedules import paper_new_lr

    model, cfg, opt, res, x = _grown(optimizer, schedule=schedule)
    rw = make_rewarmup(cfg.growth_history[-1])
    tc = cfg.train
    for step in (6, 16, 26, 120, 180):
        with_rw, opt_rw = _one_step(model, opt, x, step, tc, rw)
        without, opt_base = _one_step(model, opt, x, step, tc, None)
        for g_rw, g_base in zip(opt_rw.param_groups, opt_base.param_groups):
            assert g_rw["lr"] == g_base["lr"] == g_base["base_lr"] * lr_factor(step, tc)  # baseline, exactly
        ratio_want = paper_new_lr(step, 6, 1.3, 20, tc, lr_factor(6, tc)) / lr_factor(step, tc)
        checked = 0
        for name, (p0, p1) in with_rw.items():
            q1 = without[name][1]
            new = res.param_maps[name].new_mask(p0.shape).bool()
            assert torch.equal(p1[~new], q1[~new]), f"{name}: old entries left the baseline schedule"
            if new.any():
                d_rw, d_base = (p1 - p0)[new], (q1 - p0)[new]
                big = d_base.abs() > 2e-5  # float32 differences of ~0.02-sized weights: keep rounding < 1e-3
                torch.testing.assert_close(
                    d_rw[big] / d_base[big], torch.full_like(d_rw[big], ratio_want), rtol=3e-3, atol=1e-4
                )
                checked += 1
        assert checked >= 5


def test_rewarmup_all_moves_every_entry():
    model, cfg, opt, res, x = _grown("adamw", "rewarmup_all")
    rec = cfg.growth_history[-1]
    assert rec["rewarmup_all"] is True
    rw = make_rewarmup(rec)
    step = 16
    with_rw, _ = _one_step(model, opt, x, step, cfg.train, rw)
    without, _ = _one_step(model, opt, x, step, cfg.train, None)
    ratio_want = rw(step, 1.0, None, cfg.train) / lr_factor(step, cfg.train)
    assert abs(ratio_want - 1) > 0.05  # a step where the two schedules differ
    for name, (p0, p1) in with_rw.items():
        d_rw, d_base = p1 - p0, without[name][1] - p0
        big = d_base.abs() > 2e-5  # float32 differences of ~0.02-sized weights: keep rounding < 1e-3
        torch.testing.assert_close(
            d_rw[big] / d_base[big], torch.full_like(d_rw[big], ratio_want), rtol=3e-3, atol=1e-4
        )


def test_new_entries_get_their_own_adam_step_count():
    model, cfg, opt, res, x = _grown("adamw")
    st = opt.state_for("layers.0.mlp.down_proj.weight")
    assert st["step"].shape == (48, 80)
    assert float(st["step"][:32, :48].min()) == 6 and float(st["step"][:, 48:].max()) == 0
    assert float(st["exp_avg"][:, 48:].abs().max()) == 0  # asymmetric reset: new slices start at zero


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_scaled_state_policy_scales_only_rescaled_fan_in_tensors(optimizer):
    """SPARKLING Fig. 2 "asymmetric reset + scaled opt.": the old moments of each fan-in tensor get the
    parameter's factor (m by alpha, v by alpha^2); fan-out tensors and gains keep their state; new
    entries start at zero. alpha from eq. 16 (both sides copied, c = n'/n - 1 <= 1): 1/sqrt(1 + 3c)."""
    torch.manual_seed(0)
    cfg = RunConfig(
        model=ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48, vocab_size=64),
        train=TrainConfig(optimizer=optimizer, steps=200, warmup_steps=10, lr=3e-3),
    )
    model = build_model(cfg.model)
    opt = build_optimizer(model, cfg.train)
    x = torch.randint(0, 64, (4, 16))
    for step in range(4):
        set_lr(opt, step, cfg.train)
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    spec = {"family": "width", "hidden": 64, "ffn": 80, "init": "copy,copy", "preserve": "rms"}
    _, _, asym, _ = grow(model, cfg, {**spec, "optimizer_state": "asymmetric"}, opt.state_dict(), step=4)
    _, _, scaled, _ = grow(model, cfg, {**spec, "optimizer_state": "scaled"}, opt.state_dict(), step=4)
    a_h, a_f = 1 / math.sqrt(1 + 3 * (64 / 32 - 1)), 1 / math.sqrt(1 + 3 * (80 / 48 - 1))
    first, second = ("momentum_buffer", None) if optimizer == "muon" else ("exp_avg", "exp_avg_sq")
    # (parameter, slice of its old entries, factor growth applied to them)
    cases = [
        ("layers.0.attn.q_proj.weight", (slice(0, 32), slice(0, 32)), a_h),  # fan-in on hidden
        ("layers.0.mlp.gate_proj.weight", (slice(0, 48), slice(0, 32)), a_h),  # fan-out ffn, fan-in hidden
        ("layers.0.mlp.down_proj.weight", (slice(0, 32), slice(0, 48)), a_f),  # fan-out hidden, fan-in ffn
        ("layers.0.attn.o_proj.weight", (slice(0, 32), slice(0, 32)), 1.0),  # fan-out only: untouched
        ("embed.weight", (slice(0, 64), slice(0, 32)), 1.0),
        ("layers.0.attn_norm.weight", (slice(0, 32),), 1.0),
    ]
    checked = 0
    for name, old, alpha in cases:
        sa, ss = asym.state_for(name), scaled.state_for(name)
        if first not in sa:
            continue  # Muon leaves 1-D gains / embeddings to its AdamW side
        checked += 1
        # moments are ~1e-4 (first) and ~1e-9 (second): a default atol of 1e-5 would hide a factor of
        # two, so the tolerance is relative only
        torch.testing.assert_close(ss[first][old], alpha * sa[first][old], atol=0, rtol=1e-5)
        assert float(sa[first][old].abs().max()) > 0  # a real state, so the factor is seen
        new = torch.ones_like(ss[first], dtype=torch.bool)
        new[old] = False
        assert float(ss[first][new].abs().sum()) == 0  # new entries still start at zero
        if second and second in sa:
            torch.testing.assert_close(ss[second][old], alpha**2 * sa[second][old], atol=0, rtol=1e-5)
    assert checked >= 4
