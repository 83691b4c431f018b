"""Optimizers: AdamW and Muon that understand grown tensors.

Written by hand rather than taken from torch.optim because growth needs two things torch's
optimizers cannot express:
  * per-element step counts: torch's AdamW keeps one step per tensor, so new entries inside an old
    tensor would skip Adam's bias correction and take 3-6x too large steps (beta2 = 0.999);
  * a per-element learning rate applied to the *update* (SPARKLING's asymmetric re-warmup), which
    must act after Adam's normalization / Muon's orthogonalization, not on the gradient.
Both live in optimizer state: `state["step"]` may be a scalar or a per-element tensor, and
`state["new_mask"]` (float 0/1, param-shaped) selects entries that follow `group["lr_new"]`.
"""
from __future__ import annotations

import math

import torch


def _bias_correction(t: torch.Tensor, beta: float):
    """1 - beta**t for a per-element step tensor, with beta**t computed as exp(t * log(beta)).

    torch.pow(scalar, tensor) costs ~7x an exp on CPU (and expm1 ~2x) and runs on every grown tensor
    at every step: it made a grown run's optimizer step 3-4x the plain one. The two agree to float32
    rounding of the exponent."""
    if beta <= 0.0:
        return 1.0  # t >= 1 after the increment, so 1 - 0**t = 1
    return (t * math.log(beta)).exp_().neg_().add_(1.0)


def _effective_lr(group: dict, state: dict, p: torch.Tensor):
    """Scalar lr, or (lr, lr_new, mask) where a growth re-warmup mask is present."""
    lr = group["lr"]
    mask = state.get("new_mask")
    if mask is None or group.get("lr_new") is None:
        return lr
    return lr, group["lr_new"], mask


def _apply_update(p: torch.Tensor, update: torch.Tensor, lr, wd: float, cautious: bool) -> None:
    """p <- p - lr*update - lr*wd*p (decoupled decay; cautious: only where update and p agree in sign)."""
    if wd:
        decay = p * wd
        if cautious:
            decay = decay * ((update * p) > 0).to(p.dtype)
        update = update + decay
    if isinstance(lr, tuple):
        # Baseline step for every entry, then an extra (lr_new - lr) step on the new entries only:
        # old entries add exactly 0 and stay bitwise on the baseline schedule (SPARKLING re-warmup).
        lr, lr_new, mask = lr
        p.add_(update, alpha=-lr)
        p.addcmul_(update, mask, value=-(lr_new - lr))  # fused update*mask: mask is 0/1, so bitwise the same
    elif isinstance(lr, torch.Tensor):
        p.sub_(lr * update)
    else:
        p.add_(update, alpha=-lr)


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, cautious_wd=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      cautious_wd=cautious_wd, lr_new=None))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                st = self.state[p]
                if "exp_avg" not in st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                m, v, t = st["exp_avg"], st["exp_avg_sq"], st["step"]
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                if t.ndim == 0:
                    bc1, bc2 = 1 - b1 ** t.item(), 1 - b2 ** t.item()
                    update = (m / bc1) / ((v / bc2).sqrt() + group["eps"])
                else:  # per-element step counts after growth
                    bc1, bc2 = _bias_correction(t, b1), _bias_correction(t, b2)
                    update = (m / bc1).div_((v / bc2).sqrt_().add_(group["eps"]))
                _apply_update(p, update, _effective_lr(group, st, p), group["weight_decay"], group["cautious_wd"])
        return loss


# Polar Express (Amsel et al., 2025) degree-5 polynomial coefficients per iteration, each divided by a
# 1.01 safety factor so the first iterations never overshoot; the last pair repeats.
_POLAR_EXPRESS = [
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
]
_POLAR_EXPRESS = [(a / 1.01, b / 1.01 ** 3, c / 1.01 ** 5) for a, b, c in _POLAR_EXPRESS]


def orthogonalize(g: torch.Tensor, steps: int = 5, method: str = "newton_schulz") -> torch.Tensor:
    """Approximate the orthogonal polar factor U V^T of a 2-D matrix."""
    x = g.float()
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.t()
    x = x / (x.norm() * (1.01 if method == "polar_express" else 1.0) + 1e-7)
    for i in range(steps):
        if method == "polar_express":
            a, b, c = _POLAR_EXPRESS[min(i, len(_POLAR_EXPRESS) - 1)]
        else:  # Muon's quintic Newton-Schulz (Jordan et al., 2024)
            a, b, c = 3.4445, -4.7750, 2.0315
        s = x @ x.t()
        x = a * x + (b * s + c * s @ s) @ x
    if transposed:
        x = x.t()
    return x.to(g.dtype)


class Muon(torch.optim.Optimizer):
    """Momentum + orthogonalized update for 2-D hidden matrices. A parameter with attribute
    `_muon_blocks = n` (a fused matrix) is split along dim 0 into n blocks orthogonalized separately."""

    def __init__(self, params, lr=0.02, momentum=0.95, nesterov=True, weight_decay=0.0, ns_steps=5,
                 ns_method="newton_schulz", cautious_wd=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                                      ns_steps=ns_steps, ns_method=ns_method, cautious_wd=cautious_wd, lr_new=None))

    @staticmethod
    def blocks_of(p: torch.Tensor) -> int:
        return int(getattr(p, "_muon_blocks", 1))

    def direction(self, p: torch.Tensor, g: torch.Tensor, group: dict) -> torch.Tensor:
        n = self.blocks_of(p)
        pieces = g.chunk(n, dim=0) if n > 1 else (g,)
        split = getattr(p, "_muon_split", None)  # unequal fused blocks (row counts), e.g. an anchor with GQA
        if split is not None:
            pieces, n = g.split(list(split), dim=0), len(split)
        out = []
        for piece in pieces:
            o = orthogonalize(piece, group["ns_steps"], group["ns_method"])
            out.append(o * math.sqrt(max(1.0, piece.shape[0] / piece.shape[1])))
        return torch.cat(out, dim=0) if n > 1 else out[0]

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "momentum_buffer" not in st:
                    st["momentum_buffer"] = torch.zeros_like(p)
                buf = st["momentum_buffer"]
                buf.lerp_(p.grad, 1 - group["momentum"])
                g = p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf
                update = self.direction(p, g, group)
                _apply_update(p, update, _effective_lr(group, st, p), group["weight_decay"], group["cautious_wd"])
        return loss


class OptimizerSet:
    """Several optimizers stepped together (Muon for hidden matrices + AdamW for the rest), with one
    state_dict keyed by parameter *name* so growth and resume pair states with parameters by name."""

    def __init__(self, named: dict[str, torch.optim.Optimizer], param_names: dict[int, str]):
        self.optimizers = named
        self.param_names = param_names  # id(param) -> name

    @property
    def param_groups(self):
        return [g for o in self.optimizers.values() for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True):
        for o in self.optimizers.values():
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.optimizers.values():
            o.step()

    def state_dict(self) -> dict:
        """{"groups": {opt: [hyperparams without params]}, "state": {param_name: {key: tensor}},
        "membership": {param_name: [opt, group_index]}} -- tensors and plain data only."""
        out = {"groups": {}, "state": {}, "membership": {}}
        for oname, o in self.optimizers.items():
            out["groups"][oname] = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
                                    for g in o.param_groups]
            for gi, g in enumerate(o.param_groups):
                for p in g["params"]:
                    name = self.param_names[id(p)]
                    out["membership"][name] = [oname, gi]
                    if p in o.state:
                        out["state"][name] = {k: v.clone() if torch.is_tensor(v) else v for k, v in o.state[p].items()}
        return out

    def load_state_dict(self, sd: dict) -> None:
        by_name = {}
        for oname, o in self.optimizers.items():
            for gi, g in enumerate(o.param_groups):
                saved = sd["groups"].get(oname, [])
                if gi < len(saved):
                    for k, v in saved[gi].items():
                        g[k] = tuple(v) if k == "betas" else v
                for p in g["params"]:
                    by_name[self.param_names[id(p)]] = (o, p)
        for name, st in sd["state"].items():
            if name not in by_name:
                continue
            o, p = by_name[name]
            o.state[p] = {k: (v.to(p.device) if torch.is_tensor(v) else v) for k, v in st.items()}

    def state_for(self, name: str) -> dict | None:
        for o in self.optimizers.values():
            for g in o.param_groups:
                for p in g["params"]:
                    if self.param_names[id(p)] == name:
                        return o.state.get(p)
        return None
