"""Optimizers against references: AdamW vs torch.optim.AdamW, per-element steps vs a separate tensor,
Muon orthogonalization, schedules, parameter-group rules."""

import pytest
import torch
from tolerance_guard import atol_for
from torch.utils._python_dispatch import TorchDispatchMode

from nexus.config import ModelConfig, TrainConfig
from nexus.models import build_model
from nexus.optim.optimizers import AdamW, Muon, orthogonalize
from nexus.optim.param_groups import build_optimizer, classify
from nexus.optim.schedule import lr_factor


def test_adamw_matches_torch():
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(5, 7))
    b = torch.nn.Parameter(a.detach().clone())
    ours = AdamW([a], lr=1e-2, betas=(0.9, 0.999), weight_decay=0.1)
    ref = torch.optim.AdamW([b], lr=1e-2, betas=(0.9, 0.999), weight_decay=0.1, eps=1e-8)
    _step_both_on_the_same_gradients((a, b), (ours, ref), 20)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _step_both_on_the_same_gradients(params, opts, steps):
    for _ in range(steps):
        g = torch.randn(params[0].shape)
        for p in params:
            p.grad = g.clone()
        for o in opts:
            o.step()


def test_per_element_steps_equal_a_fresh_tensor():
    """Entries with step 0 inside an old tensor must move exactly like a fresh Adam tensor."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4, 6))
    fresh = torch.nn.Parameter(p.detach()[:, 3:].clone())
    opt = AdamW([p], lr=1e-2, betas=(0.9, 0.999))
    ref = torch.optim.AdamW([fresh], lr=1e-2, betas=(0.9, 0.999), weight_decay=0.0)
    step = torch.full((4, 6), 100.0)
    step[:, 3:] = 0
    m = torch.randn(4, 6) * 0.1
    v = torch.rand(4, 6) * 0.01
    m[:, 3:], v[:, 3:] = 0, 0
    opt.state[p] = {"step": step, "exp_avg": m, "exp_avg_sq": v}
    for _ in range(5):
        g = torch.randn(4, 6)
        p.grad, fresh.grad = g.clone(), g[:, 3:].clone()
        opt.step()
        ref.step()
    torch.testing.assert_close(p[:, 3:], fresh, atol=1e-6, rtol=1e-5)


def test_new_mask_uses_lr_new():
    p = torch.nn.Parameter(torch.zeros(2, 3))
    opt = AdamW([p], lr=1.0)
    opt.param_groups[0]["lr_new"] = 0.25
    opt.state[p] = {
        "step": torch.tensor(0.0),
        "exp_avg": torch.zeros(2, 3),
        "exp_avg_sq": torch.zeros(2, 3),
        "new_mask": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
    }
    p.grad = torch.ones(2, 3)
    opt.step()
    expected = -torch.tensor([[1.0, 0.25, 1.0], [1.0, 1.0, 0.25]])
    torch.testing.assert_close(p.detach(), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("method,steps,tol", [("newton_schulz", 5, 0.35), ("polar_express", 8, 0.05)])
def test_orthogonalize_flattens_singular_values(method, steps, tol):
    torch.manual_seed(0)
    g = torch.randn(32, 64) @ torch.diag(torch.logspace(-2, 1, 64))
    s = torch.linalg.svdvals(orthogonalize(g, steps, method))
    assert (s - 1).abs().max() < tol, s
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    cos = torch.nn.functional.cosine_similarity(orthogonalize(g, steps, method).flatten(), (u @ vh).flatten(), 0)
    assert cos > 0.9


def test_muon_splits_fused_blocks():
    torch.manual_seed(0)
    top, bottom = torch.randn(8, 8), torch.randn(8, 8) * 100
    p = torch.nn.Parameter(torch.zeros(16, 8))
    p._muon_blocks = 2
    opt = Muon([p], lr=1.0, nesterov=False, momentum=0.0)
    d = opt.direction(p, torch.cat([top, bottom]), opt.param_groups[0])
    torch.testing.assert_close(d[:8], orthogonalize(top))
    torch.testing.assert_close(d[8:], orthogonalize(bottom))


def test_cautious_weight_decay_only_where_signs_agree():
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    from nexus.optim.optimizers import _apply_update

    with torch.no_grad():
        _apply_update(p, torch.tensor([1.0, -1.0]), 0.1, 0.5, cautious=True)
    torch.testing.assert_close(p.detach(), torch.tensor([1 - 0.1 * (1 + 0.5), 1 + 0.1]))


def test_param_group_rules():
    m = build_model(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, qk_norm=True, tie_embeddings=False))
    t = TrainConfig(optimizer="muon")
    kinds = {n: classify(n, p, t) for n, p in m.named_parameters()}
    assert kinds["embed.weight"] == "no_decay" and kinds["lm_head.weight"] == "no_decay"
    assert kinds["layers.0.attn.q_proj.weight"] == "muon"
    assert kinds["layers.0.attn_norm.weight"] == "no_decay"
    opt = build_optimizer(m, t)
    assert set(opt.optimizers) == {"adamw", "muon"}
    assert classify("layers.0.attn.q_proj.weight", m.layers[0].attn.q_proj.weight, TrainConfig()) == "decay"


@pytest.mark.parametrize("schedule", ["cosine", "wsd", "linear_warmdown", "constant"])
def test_schedules(schedule):
    t = TrainConfig(steps=100, warmup_steps=10, schedule=schedule, min_lr_ratio=0.1, decay_fraction=0.2)
    f = [lr_factor(s, t) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a <= b + 1e-12 for a, b in zip(f[:10], f[1:10]))
    if schedule == "constant":
        assert f[-1] == 1.0
    else:
        assert f[-1] == pytest.approx(0.1)
    if schedule in ("wsd", "linear_warmdown"):
        assert f[79] == 1.0 and f[80] < 1.0


# ----------------------------------------------------------------------------- torch AdamW vs hand-written
def _tiny_model(seed=0):
    torch.manual_seed(seed)
    return build_model(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, max_seq_len=16))


def _train(model, opt, steps=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, 50, (2, 16), generator=g)
        opt.zero_grad()
        model(x, labels=x).loss.backward()
        opt.step()


def test_ordinary_runs_use_torch_adamw_fused_and_match_the_hand_written_one():
    tcfg = TrainConfig(lr=3e-3, weight_decay=0.1)
    a, b = _tiny_model(), _tiny_model()
    fast = build_optimizer(a, tcfg)
    assert isinstance(fast.optimizers["adamw"], torch.optim.AdamW)
    assert fast.optimizers["adamw"].defaults["fused"]  # the CPU has the fused kernel
    slow = build_optimizer(b, tcfg)
    slow.use_elementwise_adamw()
    assert type(slow.optimizers["adamw"]) is AdamW
    assert [g["weight_decay"] for g in slow.param_groups] == [g["weight_decay"] for g in fast.param_groups]
    _train(a, fast)
    _train(b, slow)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=2e-6, rtol=1e-5, msg=n)
    sa, sb = fast.state_dict()["state"], slow.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for name in sa:
        for k in ("step", "exp_avg", "exp_avg_sq"):
            want = sb[name][k].float()  # second moments are ~1e-9: atol scaled to each, never 1e-7
            torch.testing.assert_close(sa[name][k].float(), want, atol=atol_for(want, 1e-3), rtol=1e-5)


def test_cautious_wd_keeps_the_hand_written_adamw():
    opt = build_optimizer(_tiny_model(), TrainConfig(cautious_wd=True))
    assert type(opt.optimizers["adamw"]) is AdamW


def test_state_moves_between_torch_and_hand_written_adamw_by_name():
    """A checkpoint of a plain run resumes into a grown run's optimizer and the other way round."""
    tcfg = TrainConfig()
    a = _tiny_model()
    fast = build_optimizer(a, tcfg)
    _train(a, fast, steps=3)
    sd = fast.state_dict()
    b = _tiny_model()
    b.load_state_dict(a.state_dict())
    slow = build_optimizer(b, tcfg)
    slow.use_elementwise_adamw()
    slow.load_state_dict(sd)
    again = build_optimizer(a, tcfg)
    again.load_state_dict(slow.state_dict())
    assert isinstance(again.optimizers["adamw"], torch.optim.AdamW)  # no masks: stays on torch's AdamW
    _train(a, again, steps=2, seed=5)
    _train(b, slow, steps=2, seed=5)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=2e-6, rtol=1e-5)
    # per-element steps in a loaded state switch to the hand-written optimizer
    name = next(iter(sd["state"]))
    sd["state"][name]["step"] = torch.full_like(sd["state"][name]["exp_avg"], 3.0)
    c = build_optimizer(_tiny_model(), tcfg)
    c.load_state_dict(sd)
    assert type(c.optimizers["adamw"]) is AdamW


@pytest.mark.parametrize("kind", ["torch_fused", "hand_adamw", "muon", "torch_foreach"])
def test_found_inf_skips_the_step_entirely(kind):
    """A non-finite step must leave weights, moments and step counts untouched; for the fused and
    hand-written optimizers the decision is a device tensor (no host read)."""
    tcfg = TrainConfig(optimizer="muon" if kind == "muon" else "adamw")
    model = _tiny_model()
    opt = build_optimizer(model, tcfg)
    if kind == "hand_adamw":
        opt.use_elementwise_adamw()
    if kind == "torch_foreach":
        from nexus.optim.optimizers import OptimizerSet

        groups = opt.optimizers["adamw"].param_groups
        opt = OptimizerSet(
            {
                "adamw": torch.optim.AdamW(
                    [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in groups], foreach=True
                )
            },
            opt.param_names,
        )
    _train(model, opt, steps=2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {k: {kk: vv.clone() for kk, vv in v.items()} for k, v in opt.state_dict()["state"].items()}
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    opt.step(found_inf=torch.ones(()))
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    for name, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            assert torch.equal(v, state[name][k]), (name, k)
    # and found_inf = 0 is an ordinary step
    _train(model, opt, steps=1)
    x = torch.randint(0, 50, (2, 16))
    opt.zero_grad()
    model(x, labels=x).loss.backward()
    opt.step(found_inf=torch.zeros(()))
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_loaded_and_swapped_state_lives_with_its_parameter():
    """Placement, on torch's `meta` device (shape and device, no data; it has no fused AdamW kernel, so
    torch's foreach AdamW runs there): a CPU checkpoint's state loads with its parameters, except the
    0-d step that torch's foreach AdamW reads on the CPU by design; the swap to the hand-written AdamW
    (growth) moves that step to the parameter too, since the hand-written one keeps every tensor there."""
    a = _tiny_model()
    fast = build_optimizer(a, TrainConfig())
    _train(a, fast, steps=2)
    sd = fast.state_dict()
    meta = build_optimizer(_tiny_model().to("meta"), TrainConfig())
    assert not meta.optimizers["adamw"].defaults["fused"]
    meta.load_state_dict(sd)
    states = list(meta.optimizers["adamw"].state.values())
    assert len(states) == len(sd["state"])
    for st in states:
        assert st["step"].device.type == "cpu" and st["step"].ndim == 0
        assert st["exp_avg"].device.type == st["exp_avg_sq"].device.type == "meta"
    meta.use_elementwise_adamw()
    for st in meta.optimizers["adamw"].state.values():
        assert {v.device.type for v in st.values()} == {"meta"}
    hand = build_optimizer(_tiny_model().to("meta"), TrainConfig(cautious_wd=True))  # the hand-written one
    hand.load_state_dict(sd)
    for st in hand.optimizers["adamw"].state.values():
        assert {v.device.type for v in st.values()} == {"meta"}


def test_muon_runs_nesterov_momentum_unless_told_otherwise():
    """build_optimizer gives Muon the config's lr, momentum ("Muon Nesterov momentum") and iterations but
    no nesterov flag: Muon's own default must be Nesterov's look-ahead (Jordan et al., 2024). Reference
    from the definition: buf <- mu buf + (1 - mu) g, direction orthogonalize(g + mu (buf - g)), scaled by
    sqrt(max(1, rows / cols)), three steps."""
    import math

    tcfg = TrainConfig(optimizer="muon").optimizer  # the muon kind's own options
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8, 4))
    ref, buf, mu = w.detach().clone(), torch.zeros(8, 4), tcfg.momentum
    opt = Muon([w], lr=tcfg.lr, momentum=mu)
    for _ in range(3):
        g = torch.randn(8, 4)
        w.grad = g.clone()
        opt.step()
        buf = mu * buf + (1 - mu) * g
        ref -= tcfg.lr * orthogonalize(g + mu * (buf - g)) * math.sqrt(max(1.0, 8 / 4))
    torch.testing.assert_close(w.detach(), ref, atol=1e-5, rtol=1e-5)


def test_muon_orthogonalizes_unequal_fused_blocks_each_with_the_groups_method():
    """A fused matrix with unequal row blocks (`_muon_split`, e.g. an anchor under GQA) is orthogonalized
    block by block with the group's method and iterations, each block scaled by sqrt(max(1, rows / cols))."""
    import math

    torch.manual_seed(0)
    g = torch.randn(8, 4)
    p = torch.nn.Parameter(torch.zeros(8, 4))
    p._muon_split = (6, 2)
    opt = Muon([p], ns_method="polar_express", ns_steps=6)
    want = torch.cat(
        [orthogonalize(g[:6], 6, "polar_express") * math.sqrt(6 / 4), orthogonalize(g[6:], 6, "polar_express")]
    )
    torch.testing.assert_close(opt.direction(p, g, opt.param_groups[0]), want, atol=1e-6, rtol=1e-6)


# Polar Express (Amsel et al., 2025), degree-5 coefficients per iteration as published; the last repeats.
# Written here from the paper, not imported from nexus: a changed constant there must not move the reference.
PAPER_POLAR_EXPRESS = [
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
]


def _reference_orthogonalize(g, steps, method):
    """In float64 from the definitions. Muon (Jordan et al., 2024): X0 = G / (||G||_F + 1e-7), then
    X <- a X + (b A + c A^2) X, A = X X^T, (a, b, c) = (3.4445, -4.7750, 2.0315). Polar Express: the
    published coefficients with the paper's 1.01 safety factor (a / 1.01, b / 1.01^3, c / 1.01^5;
    X0 = G / (1.01 ||G||_F + 1e-7)). Computed on the wide orientation."""
    x = g.double()
    tall = x.shape[0] > x.shape[1]
    x = x.t() if tall else x
    pe = method == "polar_express"
    x = x / (x.norm() * (1.01 if pe else 1.0) + 1e-7)
    for i in range(steps):
        if pe:
            a, b, c = PAPER_POLAR_EXPRESS[min(i, 7)]
            a, b, c = a / 1.01, b / 1.01**3, c / 1.01**5
        else:
            a, b, c = 3.4445, -4.7750, 2.0315
        s = x @ x.t()
        x = a * x + (b * s + c * s @ s) @ x
    return x.t() if tall else x


# 10 Polar Express steps: past the published table's 8 triples the last one repeats
@pytest.mark.parametrize(
    "method,steps", [("newton_schulz", 5), ("polar_express", 3), ("polar_express", 8), ("polar_express", 10)]
)
@pytest.mark.parametrize("scale", [1.0, 1e-6], ids=["unit", "tiny"])  # tiny: the 1e-7 in X0 matters
def test_orthogonalize_is_the_published_iteration(method, steps, scale):
    torch.manual_seed(0)
    g = torch.randn(12, 5) * scale  # tall: computed on the transpose
    want = _reference_orthogonalize(g, steps, method).float()
    torch.testing.assert_close(orthogonalize(g, steps, method), want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(orthogonalize(g.t(), steps, method), want.t(), atol=1e-5, rtol=1e-4)
    assert orthogonalize(g.bfloat16(), steps, method).dtype == torch.bfloat16  # returned in the input's dtype


@pytest.mark.parametrize("kind", ["hand_adamw", "muon"])
def test_found_inf_zero_is_exactly_an_ordinary_step(kind):
    """found_inf = 0 (all finite) gives the same weights as a step without the flag, bit for bit."""
    tcfg = TrainConfig(optimizer="muon" if kind == "muon" else "adamw", cautious_wd=kind == "hand_adamw")
    a, b = _tiny_model(), _tiny_model()
    oa, ob = build_optimizer(a, tcfg), build_optimizer(b, tcfg)
    _train(a, oa, steps=1)
    _train(b, ob, steps=1)
    x = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(3))
    for model, opt, flag in ((a, oa, torch.zeros(())), (b, ob, None)):
        opt.zero_grad()
        model(x, labels=x).loss.backward()
        opt.step(found_inf=flag)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n


def test_per_element_steps_with_beta1_zero_match_torch():
    """beta1 = 0 (no first-moment averaging) under per-element steps: 1 - 0^t = 1 for every t >= 1."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(3, 4))
    q = torch.nn.Parameter(p.detach().clone())
    ours = AdamW([p], lr=1e-2, betas=(0.0, 0.999))
    ours.state[p] = {"step": torch.zeros(3, 4), "exp_avg": torch.zeros(3, 4), "exp_avg_sq": torch.zeros(3, 4)}
    ref = torch.optim.AdamW([q], lr=1e-2, betas=(0.0, 0.999), weight_decay=0.0)
    _step_both_on_the_same_gradients((p, q), (ours, ref), 3)
    torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_state_dict_is_plain_data_and_loads_hyperparameters_by_optimizer_and_group():
    """state_dict: lists for tuples, no implementation flags, each parameter's [optimizer, group].
    load_state_dict: a saved group's hyperparameters come back (betas as a tuple), a saved
    implementation flag is ignored (it belongs to the device that wrote it), saved groups missing for
    an optimizer or a group are left as built."""
    a = _tiny_model()
    opt = build_optimizer(a, TrainConfig())
    _train(a, opt, steps=1)
    sd = opt.state_dict()
    groups = sd["groups"]["adamw"]
    assert all(
        isinstance(g["betas"], list) and not set(g) & {"foreach", "fused", "capturable", "differentiable"}
        for g in groups
    ) and all("lr" in g for g in groups)
    assert {tuple(v) for v in sd["membership"].values()} == {("adamw", i) for i in range(len(groups))}
    loaded = build_optimizer(_tiny_model(), TrainConfig(optimizer="muon"))  # adamw and muon groups
    n_adamw = len(loaded.optimizers["adamw"].param_groups)
    sd["groups"]["adamw"] = [
        {"fused": not loaded.optimizers["adamw"].defaults["fused"], "lr": 0.5, "betas": [0.8, 0.9]}
    ]
    built = [dict((k, v) for k, v in g.items() if k != "params") for g in loaded.param_groups]
    loaded.load_state_dict(sd)  # no muon groups saved; one adamw group of n_adamw
    g0 = loaded.optimizers["adamw"].param_groups[0]
    assert g0["lr"] == 0.5 and g0["betas"] == (0.8, 0.9) and g0["fused"] == built[0]["fused"]
    rest = [dict((k, v) for k, v in g.items() if k != "params") for g in loaded.param_groups][1:]
    assert n_adamw >= 1 and rest == built[1:]


@pytest.mark.parametrize("entry", ["mask", "1d-step"])
def test_a_loaded_mask_or_per_element_step_switches_to_the_hand_written_adamw(entry):
    a = _tiny_model()
    opt = build_optimizer(a, TrainConfig())
    _train(a, opt, steps=1)
    sd = opt.state_dict()
    name = next(n for n, st in sd["state"].items() if st["exp_avg"].ndim == 1)
    if entry == "mask":
        sd["state"][name]["new_mask"] = torch.ones_like(sd["state"][name]["exp_avg"])
    else:
        sd["state"][name]["step"] = torch.full_like(sd["state"][name]["exp_avg"], 1.0)
    c = build_optimizer(_tiny_model(), TrainConfig())
    c.load_state_dict(sd)
    assert type(c.optimizers["adamw"]) is AdamW


def test_optimizer_set_swaps_with_its_defaults_clears_grads_and_steps_every_optimizer_after_a_foreach_one():
    """The swap to the hand-written AdamW keeps torch's defaults (a group added later gets the run's lr,
    betas, eps); zero_grad() frees the gradients (None); with found_inf = 0, a foreach torch AdamW read on
    the host is followed by the other optimizers' steps (Muon here)."""
    from nexus.optim.optimizers import OptimizerSet

    tcfg = TrainConfig(
        optimizer={"kind": "muon", "betas": [0.85, 0.97], "eps": 1e-7}, lr=2e-3
    )  # none of them AdamW's own default
    model = _tiny_model()
    opt = build_optimizer(model, tcfg)
    torch_defaults = {k: opt.optimizers["adamw"].defaults[k] for k in ("lr", "betas", "eps")}
    groups = opt.optimizers["adamw"].param_groups
    opt = OptimizerSet(
        {
            "adamw": torch.optim.AdamW(
                [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in groups], lr=tcfg.lr, foreach=True
            ),
            "muon": opt.optimizers["muon"],
        },
        opt.param_names,
    )
    _train(model, opt, steps=1)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    muon_params = [p for g in opt.optimizers["muon"].param_groups for p in g["params"]]
    before = [p.detach().clone() for p in muon_params]
    x = torch.randint(0, 50, (2, 16))
    model(x, labels=x).loss.backward()
    opt.step(found_inf=torch.zeros(()))
    assert all(not torch.equal(p, b) for p, b in zip(muon_params, before))
    swapped = build_optimizer(_tiny_model(), tcfg)
    swapped.use_elementwise_adamw()
    new = swapped.optimizers["adamw"]
    assert {k: new.defaults[k] for k in torch_defaults} == torch_defaults
    extra = torch.nn.Parameter(torch.zeros(3))
    new.add_param_group({"params": [extra]})
    assert {k: new.param_groups[-1][k] for k in torch_defaults} == torch_defaults


def test_optimizer_classes_built_directly_default_to_a_default_run():
    """AdamW and Muon built directly (a library user, a plugin) step like a default `nexus train`: each default is
    the TrainConfig field `build_optimizer` passes for it (AdamW's weight decay is per group there)."""
    tc = TrainConfig()
    p = [torch.nn.Parameter(torch.zeros(2, 2))]
    a = AdamW(p).defaults
    assert (a["lr"], a["betas"], a["eps"], a["cautious_wd"]) == (
        tc.lr,
        tuple(tc.optimizer.betas),
        tc.optimizer.eps,
        tc.cautious_wd,
    )
    m, mo = Muon(p).defaults, TrainConfig(optimizer="muon").optimizer
    assert (m["lr"], m["momentum"], m["weight_decay"], m["ns_steps"], m["ns_method"], m["cautious_wd"]) == (
        mo.lr,
        mo.momentum,
        mo.weight_decay,
        mo.ns_steps,
        mo.ns_method,
        tc.cautious_wd,
    )
    assert m["nesterov"] is True  # "Muon's Nesterov momentum" (train.optimizer.momentum); no field turns it off


def test_a_step_with_a_tensor_lr_and_cautious_decay_follows_its_formula():
    """p <- p - lr * (update + wd * p * [update * p > 0]) (decoupled decay, cautious: only where update and p agree
    in sign; an entry whose update is 0 is not decayed), here with the lr as a 0-d tensor (the scheduled lr on the
    device), in float64 against the formula written out."""
    from nexus.optim.optimizers import _apply_update

    p = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0], dtype=torch.float64)
    update = torch.tensor([0.5, 0.25, -1.0, -0.5, 0.0], dtype=torch.float64)
    lr, wd = 0.1, 0.2
    agree = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)  # signs of update * p: +, -, -, +, 0
    want = p - lr * (update + wd * p * agree)
    got = p.clone()
    _apply_update(got, update, torch.tensor(lr, dtype=torch.float64), wd, cautious=True)
    torch.testing.assert_close(got, want, atol=0, rtol=1e-15)
    plain = p.clone()
    _apply_update(plain, update, torch.tensor(lr, dtype=torch.float64), wd, cautious=False)
    torch.testing.assert_close(plain, p - lr * (update + wd * p), atol=0, rtol=1e-15)


# ----------------------------------------------------------------------------- what each optimizer hands torch
class _OpLog(TorchDispatchMode):
    """Every aten op that runs inside the block, with whether any argument was a DTensor (an FSDP2 shard
    not yet unwrapped to its local tensor)."""

    def __init__(self):
        super().__init__()
        self.ops, self.on_dtensors = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops.append(name)
        leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        if any(type(t).__name__ == "DTensor" for t in leaves):
            self.on_dtensors.append(name)
        return func(*args, **(kwargs or {}))


HOST_READ = "_local_scalar_dense"  # the op behind bool(t) / t.item(): a device -> host sync on an accelerator


def _small_set(adamw: str):
    """An OptimizerSet over three small parameters: AdamW (torch's fused or foreach, or the hand-written one)
    for a vector and a matrix, Muon for a matrix; each with a gradient."""
    from nexus.optim.optimizers import OptimizerSet, torch_adamw

    torch.manual_seed(0)
    params = {
        "gain": torch.nn.Parameter(torch.randn(4)),
        "embed": torch.nn.Parameter(torch.randn(5, 4)),
        "hidden": torch.nn.Parameter(torch.randn(6, 4)),
    }
    for p in params.values():
        p.grad = torch.randn_like(p)
    groups = [{"params": [params["gain"], params["embed"]]}]
    adam = {
        "torch_fused": lambda: torch_adamw(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8),
        "torch_foreach": lambda: torch.optim.AdamW(groups, lr=1e-2, foreach=True),
        "hand_adamw": lambda: AdamW(groups, lr=1e-2),
    }[adamw]()
    return params, OptimizerSet(
        {"adamw": adam, "muon": Muon([params["hidden"]])}, {id(p): n for n, p in params.items()}
    )


@pytest.mark.parametrize("adamw", ["torch_fused", "hand_adamw"])
def test_a_skip_flag_is_never_read_on_the_host_except_by_a_foreach_torch_adamw(adamw):
    """`OptimizerSet.step(found_inf)` hands the flag to fused torch AdamW, the hand-written AdamW and Muon as a
    device tensor: no host read (a sync per step on an accelerator). Only torch's foreach AdamW, which has no
    found_inf input, reads it (positive control: the log sees that read)."""
    _, opt = _small_set(adamw)
    assert opt.optimizers["adamw"].defaults.get("fused", False) == (adamw == "torch_fused")
    opt.step()
    for flag in (torch.zeros(()), torch.ones(())):
        with _OpLog() as log:
            opt.step(found_inf=flag)
        assert HOST_READ not in log.ops, flag
    _, foreach = _small_set("torch_foreach")
    with _OpLog() as log:
        foreach.step(found_inf=torch.zeros(()))
    assert HOST_READ in log.ops


def test_the_hand_written_adamw_steps_plain_tensors_with_torchs_multi_tensor_kernels():
    """Tensors without per-element steps or masks go to torch's foreach (multi-tensor) AdamW, asked for
    explicitly: left to torch's default, the CPU and any device without foreach support would take the
    per-tensor loop."""
    _, opt = _small_set("hand_adamw")
    with _OpLog() as log:
        opt.optimizers["adamw"].step()
    assert any(op.startswith("_foreach_") for op in log.ops)


def test_torch_adamw_is_built_fused_or_foreach_never_torchs_default():
    """fused where the device has the kernel (CPU), else foreach (meta has no fused kernel), and the other flag
    False: left None, torch would pick its per-tensor loop on every non-CUDA device."""
    from nexus.optim.optimizers import torch_adamw

    cpu = torch_adamw([{"params": [torch.nn.Parameter(torch.zeros(2))]}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    assert (cpu.defaults["fused"], cpu.defaults["foreach"]) == (True, False)
    meta = torch_adamw(
        [{"params": [torch.nn.Parameter(torch.zeros(2, device="meta"))]}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8
    )
    assert (meta.defaults["fused"], meta.defaults["foreach"]) == (False, True)


def test_skip_flags_and_loaded_steps_live_with_the_parameter():
    """Placement, asserted (on `meta` a CPU 0-d tensor mixes with meta tensors, so a step cannot tell): the
    keep/finite flags go to the parameter's device as float32 / bool; a loaded 0-d step goes to the CPU only
    for torch's foreach AdamW (which reads it there), and stays with the parameter for a fused AdamW (its
    kernel reads the step on the device), the hand-written AdamW and Muon."""
    from nexus.optim.optimizers import _skip_flags, _state_device, torch_adamw

    p = torch.empty(3, device="meta")
    keep, finite = _skip_flags(torch.ones((), dtype=torch.float64), p)
    assert (keep.device, keep.dtype, finite.device, finite.dtype) == (p.device, torch.float32, p.device, torch.bool)
    step = torch.tensor(4.0)
    fused = torch_adamw([{"params": [torch.nn.Parameter(torch.zeros(2))]}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    foreach = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], foreach=True)
    hand = AdamW([torch.nn.Parameter(torch.zeros(2))])
    assert fused.defaults["fused"]
    assert _state_device(fused, "step", step, p) == p.device
    assert _state_device(foreach, "step", step, p) == torch.device("cpu")
    assert _state_device(foreach, "exp_avg", step, p) == p.device
    assert _state_device(hand, "step", step, p) == p.device


@pytest.mark.parametrize("flag_dtype", [torch.bfloat16, torch.bool])
@pytest.mark.parametrize("kind", ["hand_adamw", "muon"])
def test_a_zero_skip_flag_of_any_dtype_is_exactly_an_ordinary_step(kind, flag_dtype):
    """found_inf = 0 as a bfloat16 or bool tensor (a caller's own flag) gives the same weights as a step without
    the flag, bit for bit: the flag is read as a 0/1 float32 keep, so its dtype never rounds the moment weights."""
    torch.manual_seed(0)
    w = torch.randn(6, 4)
    grads = [torch.randn(6, 4) for _ in range(2)]
    out = []
    for flag in (torch.zeros((), dtype=flag_dtype), None):
        p = torch.nn.Parameter(w.clone())
        opt = (
            AdamW([p], lr=1e-2, weight_decay=0.1, cautious_wd=True)
            if kind == "hand_adamw"
            else Muon([p], weight_decay=0.1)
        )
        for g in grads:
            p.grad = g.clone()
            if flag is not None:
                opt.found_inf = flag
            opt.step()
        out.append(p.detach())
    assert torch.equal(out[0], out[1])


def test_orthogonalize_works_on_the_wide_orientation():
    """The iteration costs steps x (A = X X^T, A^2, (bA + cA^2) X) = steps x 2 (2 m^2 n + m^3) FLOPs for the
    m x n orientation with m <= n (Jordan et al. transpose a tall matrix for this); on the tall orientation
    the Gram matrix would be n x n. Counted by torch's FLOP counter for a tall and a wide gradient."""
    from torch.utils.flop_counter import FlopCounterMode

    for shape in ((12, 5), (5, 12)):
        with FlopCounterMode(display=False) as flops:
            orthogonalize(torch.randn(shape), 3)
        m, n = min(shape), max(shape)
        assert flops.get_total_flops() == 3 * 2 * (2 * m * m * n + m**3), shape


def test_polar_express_past_its_table_repeats_the_last_triple():
    """Past the 8 published triples the last one, (1.875, -1.25, 0.375) / safety, repeats (not the 7th, which
    differs by ~1e-6). A diagonal gradient keeps every product exact but a * x, and its 1e-14 singular value is
    still far from 1 after 20 steps, where the two triples give values 1e-5 apart (relative); float32 rounding
    of a * x stays below 2e-7 over the 20 steps."""
    g = torch.zeros(2, 3)
    g[0, 0], g[1, 1] = 1.0, 1e-14
    want = _reference_orthogonalize(g, 20, "polar_express").float()
    assert 1e-8 < want[1, 1] < 1e-6  # not yet converged: the factor a of each step shows
    torch.testing.assert_close(orthogonalize(g, 20, "polar_express"), want, atol=0, rtol=2e-6)


def test_an_unknown_orthogonalization_method_is_refused():
    """A misspelt method is an error naming it, not a silent Newton-Schulz."""
    with pytest.raises(ValueError, match="'polar-express'.*newton_schulz, polar_express"):
        orthogonalize(torch.randn(3, 4), 2, "polar-express")


@pytest.mark.parametrize("dtype,tiny", [(torch.float32, 1e-30), (torch.float16, 1e-4)])
def test_cautious_decay_reads_the_signs_even_where_their_product_underflows(dtype, tiny):
    """Cautious weight decay (Chen et al., 2025) decays an entry where update and weight agree in sign. For
    entries whose product update * p underflows to 0 (|update|, |p| ~ 1e-30 in float32, 1e-4 in float16) the
    signs still agree; reference in float64 from the signs."""
    from nexus.optim.optimizers import _apply_update

    p = torch.tensor([tiny, -tiny, tiny, -tiny], dtype=dtype)
    update = torch.tensor([tiny, -tiny, -tiny, tiny], dtype=dtype)  # signs agree, agree, differ, differ
    assert not ((update * p) != 0).any()  # the products underflow
    lr, wd = 0.1, 0.5
    p64, u64 = p.double(), update.double()
    agree = (torch.sign(p64) == torch.sign(u64)).double()
    want = (p64 - lr * (u64 + wd * p64 * agree)).to(dtype)
    got = p.clone()
    _apply_update(got, update, lr, wd, cautious=True)
    torch.testing.assert_close(got, want, atol=0, rtol=2e-3 if dtype == torch.float16 else 1e-6)


def test_a_vectors_per_element_steps_follow_adams_definition():
    """A 1-D parameter with per-element step counts (a grown gain or bias) against Adam written out per
    element in float64: t += 1, m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + lr wd p. Fresh entries (t = 0) beside old ones."""
    torch.manual_seed(0)
    lr, (b1, b2), eps, wd = 1e-2, (0.9, 0.99), 1e-8, 0.1
    t = torch.tensor([0.0, 0.0, 3.0, 7.0, 100.0], dtype=torch.float64)
    m = torch.randn(5, dtype=torch.float64) * 0.1 * (t > 0)
    v = torch.rand(5, dtype=torch.float64) * 0.01 * (t > 0)
    p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
    ref = p.detach().clone()
    opt = AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    opt.state[p] = {"step": t.clone(), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    for _ in range(3):
        g = torch.randn(5, dtype=torch.float64)
        p.grad = g.clone()
        opt.step()
        t, m, v = t + 1, b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        ref = ref - lr * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps) - lr * wd * ref
    torch.testing.assert_close(p.detach(), ref, atol=0, rtol=1e-12)
    torch.testing.assert_close(opt.state[p]["step"], t, atol=0, rtol=0)


def test_loading_a_state_dict_restores_no_rewarmup_in_every_optimizer():
    """A state_dict records each group's re-warmup lr, None before any growth: loading it back after a growth
    set one (lr_new) restores None, for the hand-written AdamW and for Muon."""
    _, opt = _small_set("hand_adamw")
    sd = opt.state_dict()
    assert all(g["lr_new"] is None for gs in sd["groups"].values() for g in gs)
    for g in opt.param_groups:
        g["lr_new"] = 0.5
    opt.load_state_dict(sd)
    assert [g["lr_new"] for g in opt.param_groups] == [None, None]


def test_plain_state_entries_travel_as_they_are_and_a_state_without_its_parameter_is_left_out():
    """state_dict is tensors and plain data: a non-tensor state entry (a number) is saved, loaded and carried
    into the hand-written AdamW unchanged; a saved state for a parameter no optimizer holds any more (frozen
    since) is left out, and the states after it still load."""
    params, opt = _small_set("torch_fused")
    opt.step()
    sd = opt.state_dict()
    sd["state"]["embed"]["grown_at"] = 3
    sd["state"] = {"frozen.weight": {"step": torch.tensor(1.0)}, **sd["state"]}
    _, fresh = _small_set("torch_fused")
    assert fresh.load_state_dict(sd) == ["frozen.weight"]  # named to the caller, which prints it
    for name in ("gain", "embed", "hidden"):
        for k, v in fresh.state_for(name).items():
            assert v == 3 if k == "grown_at" else torch.equal(v, sd["state"][name][k]), (name, k)
    assert "frozen.weight" not in fresh.state_dict()["state"]
    assert fresh.state_dict()["state"]["embed"]["grown_at"] == 3
    fresh.use_elementwise_adamw()
    assert fresh.state_for("embed")["grown_at"] == 3


def test_the_hand_written_adamw_steps_fsdp2_shards_as_local_tensors():
    """Under FSDP2 a parameter, its gradient and its state are DTensors sharded alike; every AdamW operation is
    elementwise, so the hand-written AdamW steps their local shards (`to_local()` views). Checked on a real
    DTensor over a one-process gloo group: the same values as plain tensors, bit for bit (cautious decay, a
    re-warmup mask, a plain tensor through torch's foreach kernels), and no operation of the step runs on a
    DTensor once the state exists (each would pay DTensor's sharding dispatch, per op and per step)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    torch.manual_seed(0)
    w, b = torch.randn(6, 4), torch.randn(4)
    grads = [(torch.randn(6, 4), torch.randn(4)) for _ in range(2)]
    mask = torch.zeros(6, 4)
    mask[3:] = 1

    def run(shard):
        ps = [torch.nn.Parameter(shard(w.clone())), torch.nn.Parameter(shard(b.clone()))]
        opt = AdamW([{"params": ps[:1], "weight_decay": 0.1, "cautious_wd": True}, {"params": ps[1:]}], lr=0.1)
        logs = []
        for i, gs in enumerate(grads):
            for p, g in zip(ps, gs):
                p.grad = shard(g.clone())
            if i == 1:  # growth marked the second half of the matrix new
                opt.state[ps[0]]["new_mask"] = shard(mask.clone())
                opt.param_groups[0]["lr_new"] = 0.05
            with _OpLog() as log:
                opt.step()
            logs.append(log)
        full = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in ps]
        return full, logs

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        mesh = init_device_mesh("cpu", (1,))
        sharded, logs = run(lambda t: distribute_tensor(t, mesh, [Shard(0)]))
    finally:
        dist.destroy_process_group()
    plain, _ = run(lambda t: t)
    for s, p in zip(sharded, plain):
        assert torch.equal(s, p)
    # the state is created like its parameter (zeros_like: a DTensor sharded alike, as FSDP2 checkpoints it)
    stepped_on_dtensors = [[op for op in log.on_dtensors if op != "zeros_like"] for log in logs]
    assert all(log.ops for log in logs) and stepped_on_dtensors == [[], []], stepped_on_dtensors


def test_the_plain_adamw_path_reads_its_device_step_counts_on_the_device_where_torch_can(monkeypatch):
    """On a GPU torch's foreach AdamW without `capturable` `.item()`s each tensor's step: a host sync per
    parameter per step. The plain path asks for the device-side steps exactly where torch supports them."""
    import nexus.optim.optimizers as optimizers

    # xla is in torch's capturable list for other optimizers but not for the foreach AdamW kernel
    assert [optimizers.device_side_steps(torch.device(d)) for d in ("cuda", "xpu", "cpu", "meta", "xla")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    seen = []
    real = optimizers.functional_adamw

    def spy(*args, **kwargs):
        seen.append(kwargs["capturable"])
        return real(*args, **{**kwargs, "capturable": False})  # the CPU cannot run the capturable kernel

    monkeypatch.setattr(optimizers, "functional_adamw", spy)
    for answer in (False, True):
        monkeypatch.setattr(optimizers, "device_side_steps", lambda device, answer=answer: answer)
        _, opt = _small_set("hand_adamw")
        opt.optimizers["adamw"].step()
    assert seen == [False, True]
