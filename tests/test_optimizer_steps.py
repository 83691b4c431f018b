"""The hand-written AdamW's and Muon's `step` as a whole: the closure, parameters without a gradient, and every
tensor the step touches placed with the parameter (checked on `meta`, where a misplaced tensor is visible)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nexus.optim.optimizers import AdamW, Muon


class _Devices(TorchDispatchMode):
    """The device of every tensor handed to or returned by an aten op inside the block."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves((args, kwargs or {}, out)):
            if isinstance(t, torch.Tensor):
                self.seen.add((func.overloadpacket.__name__, t.device.type))
        return out


def _build(kind: str, params, **kw):
    if kind == "muon":
        return Muon(params, weight_decay=0.1, **kw)
    return AdamW(params, lr=1e-2, weight_decay=0.1, cautious_wd=kind == "cautious_adamw", **kw)


# plain AdamW without a skip flag is torch's foreach AdamW, which reads its step on the host (not on meta)
@pytest.mark.parametrize(
    "kind, skip",
    [("adamw", True), ("cautious_adamw", False), ("cautious_adamw", True), ("muon", False), ("muon", True)],
)
def test_every_tensor_of_a_step_lives_on_the_parameters_device(kind, skip):
    """On an accelerator a CPU temporary (a 0-d zero, a fresh step count) is a host->device copy or a sync; on
    meta it is simply a CPU tensor, so the log names it. A per-element step (grown tensor) included."""
    p, q = (torch.nn.Parameter(torch.empty(6, 4, device="meta")) for _ in range(2))
    opt = _build(kind, [p, q])
    for x in (p, q):
        x.grad = torch.empty_like(x)
    if skip:
        opt.found_inf = torch.zeros((), device="meta")
    with _Devices() as log:
        opt.step()
        if kind != "muon":
            opt.state[q]["step"] = torch.ones(6, 4, device="meta")
        opt.step()
    assert {dev for _, dev in log.seen} == {"meta"}, sorted(log.seen)
    assert all(t.device.type == "meta" for st in opt.state.values() for t in st.values() if torch.is_tensor(t))


@pytest.mark.parametrize("kind", ["adamw", "cautious_adamw", "muon"])
def test_step_calls_the_closure_once_and_returns_its_loss(kind):
    p = torch.nn.Parameter(torch.ones(3, 2))
    opt = _build(kind, [p])
    calls = []

    def closure():
        calls.append(1)
        p.grad = torch.ones_like(p)
        return torch.tensor(7.0)

    assert opt.step(closure) == 7.0 and calls == [1]
    assert not torch.equal(p.detach(), torch.ones(3, 2))  # the gradient the closure set was used
    assert opt.step() is None


@pytest.mark.parametrize("kind", ["adamw", "cautious_adamw", "muon"])
def test_a_closure_that_runs_backward_gets_its_gradients(kind):
    """torch's closure contract (LBFGS, `optimizer.step(closure)`): the closure re-evaluates the loss and calls
    backward itself, so it runs with grad mode on even though the step's update runs without it."""
    p = torch.nn.Parameter(torch.full((3, 2), 2.0))
    opt = _build(kind, [p])

    def closure():
        opt.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 24.0
    assert torch.equal(p.grad, torch.full((3, 2), 4.0)) and (p.detach() < 2.0).all()
    assert torch.is_grad_enabled()  # the caller's grad mode is back after the step
    with torch.no_grad():
        assert opt.step(closure).item() < 24.0 and not torch.is_grad_enabled()


@pytest.mark.parametrize("kind", ["adamw", "cautious_adamw", "muon"])
def test_a_parameter_without_a_gradient_is_left_alone_and_the_next_one_still_steps(kind):
    a, b = torch.nn.Parameter(torch.ones(3, 2)), torch.nn.Parameter(torch.ones(3, 2))
    b.grad = torch.ones(3, 2)
    opt = _build(kind, [a, b])
    opt.step()
    assert torch.equal(a.detach(), torch.ones(3, 2)) and a not in opt.state
    assert not torch.equal(b.detach(), torch.ones(3, 2))


def test_a_fresh_step_count_is_float32_whatever_the_default_dtype():
    """torch's fused AdamW kernel reads float32 step counts, and the state moves between it and this AdamW by
    name: a float64 default dtype must not make the hand-written AdamW write a float64 count."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        p = torch.nn.Parameter(torch.ones(3, 2, dtype=torch.float32))
        p.grad = torch.ones_like(p)
        opt = AdamW([p], weight_decay=0.1, cautious_wd=True)
        opt.step()
    finally:
        torch.set_default_dtype(previous)
    assert opt.state[p]["step"].dtype == torch.float32 and opt.state[p]["step"].shape == ()


@pytest.mark.parametrize("per_element", [False, True])
def test_bias_correction_takes_pow_for_one_step_count_and_exp_for_per_element_counts(per_element):
    """1 - beta^t: torch.pow(beta, t) for a tensor's single count (as torch's AdamW computes it); for a grown
    tensor's per-element counts exp(t log beta), ~7x cheaper than pow on CPU (see `_bias_correction`)."""
    p = torch.nn.Parameter(torch.ones(3, 2))
    p.grad = torch.ones_like(p)
    opt = AdamW([p], weight_decay=0.1, cautious_wd=True)
    opt.step()
    if per_element:
        opt.state[p]["step"] = torch.full((3, 2), 1.0)
    with _Ops() as log:
        opt.step()
    assert ("pow" in log.ops, "exp" in log.ops) == ((False, True) if per_element else (True, False))


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.overloadpacket.__name__.rstrip("_"))
        return func(*args, **(kwargs or {}))


def test_muon_with_plain_momentum_cautious_decay_and_fused_blocks_follows_its_definition():
    """Muon (Jordan et al., 2024) without Nesterov: buf <- mu buf + (1 - mu) g, O = orthogonalize(buf) per
    fused block, each scaled by sqrt(max(1, rows / cols)); decoupled decay lr wd p only where sign(O) =
    sign(p) (cautious); p <- p - lr (O + decay). `orthogonalize` is checked against the published iteration
    in test_core_optim.py."""
    import math

    from nexus.optim.optimizers import orthogonalize

    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(12, 3))
    w._muon_blocks = 2
    ref, buf, mu, lr, wd = w.detach().clone(), torch.zeros(12, 3), 0.9, 0.05, 0.3
    opt = Muon([w], lr=lr, momentum=mu, nesterov=False, weight_decay=wd, cautious_wd=True)
    for _ in range(3):
        g = torch.randn(12, 3)
        w.grad = g.clone()
        opt.step()
        buf = mu * buf + (1 - mu) * g
        o = torch.cat([orthogonalize(b) * math.sqrt(6 / 3) for b in buf.chunk(2)])
        agree = (torch.sign(o) == torch.sign(ref)).float()
        ref = ref - lr * (o + wd * ref * agree)
    torch.testing.assert_close(w.detach(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("flag", [None, torch.zeros(())])
def test_adamw_with_cautious_decay_follows_its_definition(flag):
    """AdamW (Loshchilov & Hutter, 2019) on Adam's moments (Kingma & Ba, 2015): m <- b1 m + (1 - b1) g,
    v <- b2 v + (1 - b2) g^2, u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps); cautious decay lr wd p only
    where sign(u) = sign(p); p <- p - lr (u + decay). A large eps so its sign counts; with and without a zero
    skip flag (the two code paths). float64 weights; the step count is float32, hence rtol 1e-6."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5, 3, dtype=torch.float64))
    lr, (b1, b2), eps, wd = 0.1, (0.8, 0.9), 0.5, 0.3
    ref, m, v = w.detach().clone(), torch.zeros(5, 3, dtype=torch.float64), torch.zeros(5, 3, dtype=torch.float64)
    opt = AdamW([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, cautious_wd=True)
    if flag is not None:
        opt.found_inf = flag
    for t in range(1, 4):
        g = torch.randn(5, 3, dtype=torch.float64)
        w.grad = g.clone()
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
        decay = wd * ref * (torch.sign(u) == torch.sign(ref))
        ref = ref - lr * (u + decay)
    torch.testing.assert_close(w.detach(), ref, rtol=1e-6, atol=1e-9)
