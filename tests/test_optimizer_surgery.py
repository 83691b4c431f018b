"""Optimizer-state surgery beyond one float32 growth: a second growth (a per-element step already in
the state), a step stored as a plain number, float64 and bfloat16 states, a dim grown without a copy
source, and the default policy. Each expectation comes from the definition of the policy
(growth/optimizer_surgery.py): an entry's step counts the optimizer steps *that entry* has taken, old
entries keep their state, new ones start at zero (asymmetric) or take their copy source's (copy)."""

import pytest
import torch
import torch.nn as nn

from nexus.config import TrainConfig
from nexus.growth import ParamMap, transplant_optimizer_state
from nexus.optim.optimizers import AdamW
from nexus.optim.param_groups import build_optimizer


class Tiny(nn.Module):
    def __init__(self, rows: int, cols: int = 3, dtype=torch.float32):
        super().__init__()
        self.a = nn.Linear(3, 2, bias=False, dtype=dtype)  # never grows
        self.lin = nn.Linear(cols, rows, bias=False, dtype=dtype)


def _train(opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in (p for group in opt.param_groups for p in group["params"]):
            p.grad = torch.randn(p.shape, generator=g).to(p.dtype)
        opt.step()


TCFG = TrainConfig(optimizer="adamw")


def _trained(steps: int, seed: int, dtype=torch.float32):
    """The optimizer of a Tiny(4) trained `steps` steps (AdamW, default hyperparameters)."""
    torch.manual_seed(0)
    opt = build_optimizer(Tiny(4, dtype=dtype), TCFG)
    _train(opt, steps, seed)
    return opt


def _maps(old_rows: int, old_cols: int = 3, **lin) -> dict:
    return {
        "a.weight": ParamMap("a.weight"),
        "lin.weight": ParamMap("lin.weight", (slice(0, old_rows), slice(0, old_cols)), **lin),
    }


def _grown_pair(steps=(7, 3), policy2="asymmetric", copy_source2=None):
    """Tiny(4) trained steps[0], grown to 6 rows (asymmetric), trained steps[1], grown to 8 rows."""
    o4 = _trained(steps[0], seed=1)
    o6 = build_optimizer(Tiny(6), TCFG)
    transplant_optimizer_state(o4.state_dict(), o6, _maps(4), "asymmetric")
    _train(o6, steps[1], seed=2)
    o8 = build_optimizer(Tiny(8), TCFG)
    transplant_optimizer_state(o6.state_dict(), o8, _maps(6, copy_source=copy_source2), policy2)
    return o6, o8


def test_second_growth_keeps_every_entry_its_own_step_count():
    """After two growths each row's step is the number of steps that row took: 7 + 3 for the first
    rows, 3 for the rows of the first growth, 0 for the rows of the second."""
    o6, o8 = _grown_pair(steps=(7, 3))
    st, before = o8.state_for("lin.weight"), o6.state_for("lin.weight")
    assert before["step"].ndim == 2  # the first growth made it per-element
    want = torch.cat([torch.full((4, 3), 10.0), torch.full((2, 3), 3.0), torch.zeros(2, 3)])
    assert torch.equal(st["step"], want)
    assert torch.equal(st["exp_avg"][:6], before["exp_avg"]) and not st["exp_avg"][6:].any()
    assert torch.equal(st["new_mask"], torch.cat([torch.zeros(6, 3), torch.ones(2, 3)]))


def test_second_growth_copy_policy_copies_each_sources_own_step():
    """Copy policy on a per-element step: row 6 copies row 5 (a first-growth row, 3 steps) and row 7
    copies row 0 (an original row, 7 + 3 steps); each copy takes its own source's count and moments."""
    src = torch.tensor([0, 1, 2, 3, 4, 5, 5, 0])
    o6, o8 = _grown_pair(steps=(7, 3), policy2="copy", copy_source2={0: src})
    st, before = o8.state_for("lin.weight"), o6.state_for("lin.weight")
    assert torch.equal(st["step"], before["step"][src])
    assert torch.equal(st["step"][:, 0], torch.tensor([10.0] * 4 + [3.0, 3.0, 3.0, 10.0]))
    assert torch.equal(st["exp_avg"], before["exp_avg"][src])
    assert torch.equal(st["exp_avg_sq"], before["exp_avg_sq"][src])


@pytest.mark.parametrize("policy", ["asymmetric", "copy"])
def test_a_step_stored_as_a_plain_number_is_grown_like_a_tensor_one(policy):
    """torch before 1.12 (and hand-edited states) kept `step` as a Python number: it is read as that
    count, the same as a 0-d tensor step."""
    old_opt = _trained(5, seed=3)
    sd = old_opt.state_dict()
    for st in sd["state"].values():
        st["step"] = int(st["step"])
    src = {0: torch.tensor([0, 1, 2, 3, 1, 2])}
    new_opt = build_optimizer(Tiny(6), TCFG)
    transplant_optimizer_state(sd, new_opt, _maps(4, copy_source=src if policy == "copy" else None), policy)
    step = new_opt.state_for("lin.weight")["step"]
    new_rows = 5.0 if policy == "copy" else 0.0  # copied rows carry their source's count
    assert torch.equal(step, torch.cat([torch.full((4, 3), 5.0), torch.full((2, 3), new_rows)]))
    assert float(new_opt.state_for("a.weight")["step"]) == 5.0


@pytest.mark.parametrize("policy", ["asymmetric", "copy"])
def test_float64_state_is_moved_exactly_and_stays_float64(policy):
    """A float64 model's moments keep every bit: rounding them through float32 would change them."""
    old_opt = _trained(5, seed=4, dtype=torch.float64)
    src = torch.tensor([0, 1, 2, 3, 1, 2])
    new_opt = build_optimizer(Tiny(6, dtype=torch.float64), TCFG)
    transplant_optimizer_state(
        old_opt.state_dict(), new_opt, _maps(4, copy_source={0: src} if policy == "copy" else None), policy
    )
    st, st_old = new_opt.state_for("lin.weight"), old_opt.state_for("lin.weight")
    for key in ("exp_avg", "exp_avg_sq"):
        assert st[key].dtype == torch.float64
        assert st_old[key].double().float().double().ne(st_old[key]).any()  # float32 would round these
        assert torch.equal(st[key][:4], st_old[key])
        if policy == "copy":
            assert torch.equal(st[key][4:], st_old[key][src[4:]])


def test_copy_policy_leaves_dims_grown_without_a_source_at_zero():
    """Rows are copied (copy_source on dim 0) while the columns grow without a source (random fan-in):
    a copied row's state is its source's in the old columns and zero in the new ones, step included."""
    old_opt = _trained(5, seed=5)
    src = torch.tensor([0, 1, 2, 3, 3, 0])
    new_opt = build_optimizer(Tiny(6, cols=5), TCFG)
    transplant_optimizer_state(old_opt.state_dict(), new_opt, _maps(4, 3, copy_source={0: src}), "copy")
    st, st_old = new_opt.state_for("lin.weight"), old_opt.state_for("lin.weight")
    assert torch.equal(st["exp_avg"][:, :3], st_old["exp_avg"][src]) and not st["exp_avg"][:, 3:].any()
    assert torch.equal(st["step"][:, :3], torch.full((6, 3), 5.0)) and not st["step"][:, 3:].any()


def test_scaled_policy_keeps_a_bfloat16_state_in_bfloat16():
    """SPARKLING's scaled state (m by alpha, v by alpha^2) on a bfloat16 model: the float32 factor must
    not promote the state to float32 (the optimizer keeps states in the parameter's dtype)."""
    old_opt = _trained(3, seed=6, dtype=torch.bfloat16)
    alpha = torch.tensor([0.5, 0.5, 0.5, 0.25, 0.25])  # a fan-in factor per column (dim 1), grown 3 -> 5
    new_opt = build_optimizer(Tiny(6, cols=5, dtype=torch.bfloat16), TCFG)
    transplant_optimizer_state(old_opt.state_dict(), new_opt, _maps(4, 3, fan_in_scale={1: alpha}), "scaled")
    st, st_old = new_opt.state_for("lin.weight"), old_opt.state_for("lin.weight")
    assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.bfloat16
    # powers of two are exact in bfloat16
    assert torch.equal(st["exp_avg"][:4, :3], st_old["exp_avg"] * 0.5)
    assert torch.equal(st["exp_avg_sq"][:4, :3], st_old["exp_avg_sq"] * 0.25)


def test_unchanged_tensor_takes_the_snapshot_itself_not_a_copy():
    """The old state is a snapshot owned by the caller's growth: an unchanged tensor's moments are
    moved, not copied (a second copy would double optimizer memory at growth time)."""
    old_opt = _trained(2, seed=7)
    sd = old_opt.state_dict()
    new_opt = build_optimizer(Tiny(6), TCFG)
    transplant_optimizer_state(sd, new_opt, _maps(4), "asymmetric")
    assert new_opt.state_for("a.weight")["exp_avg"] is sd["state"]["a.weight"]["exp_avg"]


def test_default_policy_is_the_asymmetric_reset():
    """The documented default: old entries keep their state, new entries start at zero."""
    old_opt = _trained(3, seed=8)
    new_opt = build_optimizer(Tiny(6), TCFG)
    maps = _maps(4, copy_source={0: torch.tensor([0, 1, 2, 3, 0, 1])})  # copy would fill rows 4-5
    transplant_optimizer_state(old_opt.state_dict(), new_opt, maps)
    st = new_opt.state_for("lin.weight")
    assert torch.equal(st["exp_avg"][:4], old_opt.state_for("lin.weight")["exp_avg"])
    assert not st["exp_avg"][4:].any() and not st["step"][4:].any()


def test_a_parameter_missing_from_the_maps_is_unchanged_and_keeps_its_state():
    """A growth's maps name only what it touched: any other parameter keeps its whole state."""
    old_opt = _trained(3, seed=9)
    new_opt = build_optimizer(Tiny(6), TCFG)
    transplant_optimizer_state(old_opt.state_dict(), new_opt, {"lin.weight": _maps(4)["lin.weight"]}, "asymmetric")
    st, st_old = new_opt.state_for("a.weight"), old_opt.state_for("a.weight")
    assert torch.equal(st["exp_avg"], st_old["exp_avg"]) and float(st["step"]) == 3.0 and "new_mask" not in st


@pytest.mark.parametrize("old_state", [None, {"groups": {}, "membership": {}}], ids=["none", "no-state-entry"])
def test_no_old_state_starts_every_tensor_fresh_with_its_new_mask(old_state):
    """Growing a run saved without optimizer state: nothing to carry, only the re-warmup masks."""
    new_opt = build_optimizer(Tiny(6), TrainConfig(optimizer="adamw"))
    transplant_optimizer_state(old_state, new_opt, _maps(4), "asymmetric")
    assert set(new_opt.state_for("lin.weight")) == {"new_mask"} and not new_opt.state_for("a.weight")


def test_a_tensor_that_does_not_grow_again_drops_its_old_new_mask_and_keeps_other_entries():
    """`new_mask` marks the entries new in *this* growth: a tensor grown before but not now has none,
    so a re-warmup never re-warms the previous growth's entries. Whatever the order of the saved keys,
    the other entries are carried: scalars (a 0-d tensor, a Python number) as they are."""
    o4 = _trained(3, seed=10)
    o6 = build_optimizer(Tiny(6), TCFG)
    transplant_optimizer_state(o4.state_dict(), o6, _maps(4), "asymmetric")
    sd = o6.state_dict()
    st6 = sd["state"]["lin.weight"]
    assert "new_mask" in st6
    st6 = {
        "new_mask": st6["new_mask"],
        "ema_count": torch.tensor(2.0),
        "lr_scale": 0.5,
        **{k: v for k, v in st6.items() if k != "new_mask"},
    }  # new_mask and scalars first
    sd["state"]["lin.weight"] = st6
    again = build_optimizer(Tiny(6), TCFG)
    transplant_optimizer_state(sd, again, {"lin.weight": ParamMap("lin.weight")}, "asymmetric")
    st = again.state_for("lin.weight")
    assert "new_mask" not in st
    assert st["lr_scale"] == 0.5 and torch.equal(st["ema_count"], torch.tensor(2.0))
    assert torch.equal(st["exp_avg"], st6["exp_avg"]) and torch.equal(st["step"], st6["step"])


def test_scaled_policy_carries_a_power_0_state_unscaled_and_refuses_an_undeclared_one(monkeypatch):
    """Only the moments whose scaling law the optimizer declares are rescaled (first moments by alpha, second by
    alpha^2); a per-element state declared with power 0 is carried unscaled, and one it does not declare at all is
    refused rather than guessed from its name (optim/base.py GrowableOptimizer.state_growth)."""
    import pytest

    old_opt = _trained(3, seed=11)
    sd = old_opt.state_dict()
    extra = torch.rand(4, 3) + 1.0
    sd["state"]["lin.weight"]["grad_ema"] = extra
    alpha = torch.tensor([0.5, 0.5, 0.5, 0.25, 0.25])
    new_opt = build_optimizer(Tiny(6, cols=5), TCFG)
    with pytest.raises(RuntimeError, match="grad_ema"):
        transplant_optimizer_state(sd, new_opt, _maps(4, 3, fan_in_scale={1: alpha}), "scaled")
    from nexus.optim.optimizers import AdamW

    monkeypatch.setattr(AdamW, "state_growth", {**AdamW.state_growth, "grad_ema": 0})
    new_opt = build_optimizer(Tiny(6, cols=5), TCFG)
    transplant_optimizer_state(sd, new_opt, _maps(4, 3, fan_in_scale={1: alpha}), "scaled")
    st = new_opt.state_for("lin.weight")
    assert torch.equal(st["grad_ema"][:4, :3], extra) and not st["grad_ema"][4:].any()
    torch.testing.assert_close(
        st["exp_avg"][:4, :3], 0.5 * old_opt.state_for("lin.weight")["exp_avg"], atol=0, rtol=1e-6
    )


class Gain(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.g = nn.Parameter(torch.ones(n))  # a 1-D parameter (an RMSNorm gain) grown along its only dim


@pytest.mark.parametrize("policy", ["asymmetric", "copy"])
def test_a_one_dimensional_parameter_grown_twice_keeps_per_entry_steps(policy):
    """The per-element step of a 1-D tensor after two growths: 2 + 3 steps for the first entries, 3 for
    the first growth's, and 0 (asymmetric) or the source's count (copy) for the second growth's."""
    opt = build_optimizer(Gain(2), TCFG)
    _train(opt, 2, seed=12)
    o3 = build_optimizer(Gain(3), TCFG)
    transplant_optimizer_state(opt.state_dict(), o3, {"g": ParamMap("g", (slice(0, 2),))}, "asymmetric")
    _train(o3, 3, seed=13)
    src = torch.tensor([0, 1, 2, 2, 0])
    o5 = build_optimizer(Gain(5), TCFG)
    pm = ParamMap("g", (slice(0, 3),), copy_source={0: src} if policy == "copy" else None)
    transplant_optimizer_state(o3.state_dict(), o5, {"g": pm}, policy)
    before = o3.state_for("g")["step"]
    assert torch.equal(before, torch.tensor([5.0, 5.0, 3.0]))
    want = before[src] if policy == "copy" else torch.tensor([5.0, 5.0, 3.0, 0.0, 0.0])
    assert torch.equal(o5.state_for("g")["step"], want)


# Device placement, on torch's `meta` device: a meta tensor has a shape, a dtype and a device but no
# data, so state built on the default CPU device instead of the parameter's either fails to mix with
# meta tensors or shows up in `.device` (the same slips that break a growth on an accelerator).
META = torch.device("meta")


def _old_state_on(layout: str) -> dict:
    """An AdamW state_dict for Tiny(4): `cpu` as read from a checkpoint (every tensor on the CPU);
    `device` as torch's foreach AdamW keeps it on an accelerator (moments with their parameter, here on
    meta, and the 0-d step on the CPU)."""
    sd = _trained(3, seed=14).state_dict()
    if layout == "device":
        for st in sd["state"].values():
            st["exp_avg"], st["exp_avg_sq"] = st["exp_avg"].to(META), st["exp_avg_sq"].to(META)
    return sd


@pytest.mark.parametrize("layout", ["cpu", "device"])
@pytest.mark.parametrize("policy", ["asymmetric", "copy", "scaled"])
def test_grown_state_lives_on_the_parameters_device(layout, policy):
    """Rows grow 4 -> 6 (copied from rows 0, 1 under `copy`) and columns 3 -> 5 (fan-in factors under
    `scaled`, on the CPU like growth's): every moment, per-element step and re-warmup mask of the grown
    tensor, and the moments of the unchanged one, end on the parameters' device with their shape and
    dtype. The unchanged tensor's 0-d step stays where it was (torch's foreach AdamW keeps it on the CPU)."""
    lin = {
        "copy": {"copy_source": {0: torch.tensor([0, 1, 2, 3, 0, 1])}},
        "scaled": {"fan_in_scale": {1: torch.tensor([0.5, 0.5, 0.5, 0.25, 0.25])}},
    }.get(policy, {})
    new_opt = build_optimizer(Tiny(6, cols=5).to(META), TCFG)
    transplant_optimizer_state(_old_state_on(layout), new_opt, _maps(4, 3, **lin), policy)
    st, st_a = new_opt.state_for("lin.weight"), new_opt.state_for("a.weight")
    assert set(st) == {"step", "exp_avg", "exp_avg_sq", "new_mask"}
    for key, want_dtype in (
        ("exp_avg", torch.float32),
        ("exp_avg_sq", torch.float32),
        ("new_mask", None),
        ("step", torch.float32),
    ):
        assert st[key].device == META and st[key].shape == (6, 5), key
        assert want_dtype is None or st[key].dtype == want_dtype, key
    for key in ("exp_avg", "exp_avg_sq"):
        assert st_a[key].device == META and st_a[key].shape == (2, 3), key
    assert st_a["step"].ndim == 0 and "new_mask" not in st_a


@pytest.mark.parametrize("layout", ["cpu", "device"])
def test_the_copy_reads_its_source_and_index_on_the_parameters_device(layout, monkeypatch):
    """The copy policy gathers each state by its copy-source index (`index_select`). An accelerator
    refuses a source or an index on another device; meta accepts the mix and gives the same meta result,
    so the gather itself is watched: every source and index it is handed sits on the parameter's device
    (the old state comes from a CPU checkpoint, the copy sources from growth's CPU plan)."""
    seen = []
    real = torch.Tensor.index_select

    def gather(self, dim, index):
        seen.append((self.device, index.device))
        return real(self, dim, index)

    monkeypatch.setattr(torch.Tensor, "index_select", gather)
    new_opt = build_optimizer(Tiny(6).to(META), TCFG)
    maps = _maps(4, copy_source={0: torch.tensor([0, 1, 2, 3, 0, 1])})
    transplant_optimizer_state(_old_state_on(layout), new_opt, maps, "copy")
    monkeypatch.undo()
    assert len(seen) == 3  # exp_avg, exp_avg_sq and the per-element step of lin.weight
    assert all(devices == (META, META) for devices in seen), seen


def test_grown_step_has_the_optimizers_own_step_dtype_under_another_default_dtype():
    """The hand-written AdamW that steps a grown tensor counts steps in its own fixed dtype, whatever
    torch's default dtype: a grown per-element step must have that dtype too (read here from a fresh
    optimizer's first step), not the float64 a changed default would give."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        probe = nn.Parameter(torch.zeros(2))
        own = AdamW([probe])
        probe.grad = torch.ones(2)
        own.step()
        own_dtype = own.state[probe]["step"].dtype
        old_opt = _trained(2, seed=15, dtype=torch.float64)
        for policy, lin in (("asymmetric", {}), ("copy", {"copy_source": {0: torch.tensor([0, 1, 2, 3, 3, 2])}})):
            new_opt = build_optimizer(Tiny(6, dtype=torch.float64), TCFG)
            transplant_optimizer_state(old_opt.state_dict(), new_opt, _maps(4, **lin), policy)
            assert new_opt.state_for("lin.weight")["step"].dtype == own_dtype, policy
    finally:
        torch.set_default_dtype(before)
    assert own_dtype != torch.float64  # the case only tells the two apart when they differ
