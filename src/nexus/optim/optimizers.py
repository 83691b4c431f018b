"""Optimizers: torch's AdamW for ordinary runs; a hand-written AdamW and Muon that understand grown tensors.

Every run whose parameters carry no per-element step counts or re-warmup masks uses
`torch.optim.AdamW` (fused where the device has the kernel, else foreach): it is several times faster
than a Python loop over tensors. The hand-written `AdamW` below is used only where growth needs two
things torch's optimizers cannot express (and for cautious weight decay, which torch lacks):
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
from torch.optim.adamw import adamw as functional_adamw
from torch.optim.optimizer import _get_capturable_supported_devices

from .base import GrowableOptimizer, _apply_update, _closure_loss, _effective_lr, _local, _skip_flags

# Hyperparameters that say *how* torch's AdamW runs (not what it computes); never copied between
# optimizers or restored from a checkpoint written on another device.
_IMPLEMENTATION_KEYS = ("foreach", "fused", "capturable", "differentiable")


def _bias_correction(t: torch.Tensor, beta: float):
    """1 - beta**t for a per-element step tensor, with beta**t computed as exp(t * log(beta)).

    torch.pow(scalar, tensor) costs ~7x an exp on CPU (and expm1 ~2x) and runs on every grown tensor
    at every step: it made a grown run's optimizer step 3-4x the plain one. The two agree to float32
    rounding of the exponent."""
    if beta <= 0.0:
        return 1.0  # t >= 1 after the increment, so 1 - 0**t = 1
    return (t * math.log(beta)).exp_().neg_().add_(1.0)


class AdamW(GrowableOptimizer):
    """AdamW with per-element step counts and re-warmup masks (see the module docstring).

    Like torch's fused AdamW it honours `self.found_inf` (a 0-d tensor, 1 = skip this step): the
    update, the moments and the step counts are left unchanged, decided on the device."""

    state_growth = {"exp_avg": 1, "exp_avg_sq": 2}  # first moment scales like the weight, second like its square

    def __init__(self, params, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, cautious_wd=False):
        super().__init__(
            params,
            dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, cautious_wd=cautious_wd, lr_new=None),
        )

    def step(self, closure=None):
        # a with block, not @torch.no_grad(): mutmut 3.8.1 does not mutate decorated functions
        with torch.no_grad():
            loss = _closure_loss(closure)
            for group in self.param_groups:
                b1, b2 = group["betas"]
                plain = []
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self.state[p]
                    if "exp_avg" not in st:
                        st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                        st["exp_avg"] = torch.zeros_like(p)
                        st["exp_avg_sq"] = torch.zeros_like(p)
                    if self._is_plain(group, st):
                        plain.append(p)
                        continue
                    g = _local(p.grad)
                    keep, finite = _skip_flags(getattr(self, "found_inf", None), g)
                    step = _local(st["step"])
                    if keep is None:
                        step += 1
                        b1_eff, b2_eff = 1 - b1, b2
                    else:  # a skipped step: zero gradient, no moment decay, no step count, no update
                        g = torch.where(finite, g, torch.zeros((), dtype=g.dtype, device=g.device))
                        step += keep
                        b1_eff, b2_eff = (1 - b1) * keep, torch.where(finite, b2, 1.0)
                    m, v, t = _local(st["exp_avg"]), _local(st["exp_avg_sq"]), step
                    m.lerp_(g, b1_eff)
                    v.mul_(b2_eff).addcmul_(g, g, value=1 - b2)
                    # tensor powers: the step count stays on the device (no .item() host sync); a
                    # per-element step tensor after growth takes exp(t log b), far cheaper than pow on CPU
                    if t.ndim == 0:
                        bc1, bc2 = 1 - torch.pow(b1, t), 1 - torch.pow(b2, t)
                        update = (m / bc1) / ((v / bc2).sqrt() + group["eps"])
                    else:
                        bc1, bc2 = _bias_correction(t, b1), _bias_correction(t, b2)
                        update = (m / bc1).div_((v / bc2).sqrt_().add_(group["eps"]))
                    _apply_update(
                        _local(p), update, _effective_lr(group, st), group["weight_decay"], group["cautious_wd"], keep
                    )
                if plain:
                    self._plain_step(group, plain)
            return loss

    def _is_plain(self, group: dict, st: dict) -> bool:
        """A tensor torch's own AdamW can step: one step count, no re-warmup mask, plain weight decay,
        no skip flag. In a grown run most tensors are like this (only grown ones carry masks)."""
        return (
            st["step"].ndim == 0
            and "new_mask" not in st
            and not group["cautious_wd"]
            and getattr(self, "found_inf", None) is None
        )

    def _plain_step(self, group: dict, params: list) -> None:
        """torch's multi-tensor AdamW over the plain tensors: the per-tensor loop above costs ~7x more
        per parameter on CPU (it made a grown run's optimizer step 7x a never-grown run's)."""
        states = [self.state[p] for p in params]
        b1, b2 = group["betas"]
        functional_adamw(  # on FSDP2 shards like the loop above: every AdamW operation is elementwise
            [_local(p) for p in params],
            [_local(p.grad) for p in params],
            [_local(s["exp_avg"]) for s in states],
            [_local(s["exp_avg_sq"]) for s in states],
            [],
            [_local(s["step"]) for s in states],
            foreach=True,
            capturable=device_side_steps(params[0].device),
            amsgrad=False,
            beta1=b1,
            beta2=b2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
        )


def device_side_steps(device: torch.device) -> bool:
    """Whether torch's foreach AdamW can read its step counts on `device` (`capturable`). Without it torch
    `.item()`s every tensor's step on every step: one host sync per parameter on a GPU. The CPU reads its own
    memory, so there the plain path stays torch's default. The device list is torch's own for this kernel."""
    return device.type in _get_capturable_supported_devices(supports_xla=False)


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
_POLAR_EXPRESS = [(a / 1.01, b / 1.01**3, c / 1.01**5) for a, b, c in _POLAR_EXPRESS]


def orthogonalize(g: torch.Tensor, steps: int = 5, method: str = "newton_schulz") -> torch.Tensor:
    """Approximate the orthogonal polar factor U V^T of a 2-D matrix."""
    if method not in ("newton_schulz", "polar_express"):
        raise ValueError(f"orthogonalize: method {method!r} is not one of newton_schulz, polar_express")
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


# Hand-written rather than torch.optim.Muon (torch 2.13, torch/optim/_muon.py): that one applies one scalar lr
# per group (`param.add_(update, alpha=-adjusted_lr)`), so it cannot carry the per-element re-warmup lr of
# the entries growth marks new (`new_mask`); it also has no device-side skip of a non-finite step
# (found_inf), no per-block orthogonalization of fused matrices, no polar-express iteration and no
# cautious weight decay.
class Muon(GrowableOptimizer):
    """Momentum + orthogonalized update for 2-D hidden matrices. A parameter with attribute
    `_muon_blocks = n` (a fused matrix) is split along dim 0 into n blocks orthogonalized separately."""

    state_growth = {"momentum_buffer": 1}  # a first moment: scales like the weight

    def __init__(
        self,
        params,
        lr=0.02,
        momentum=0.95,
        nesterov=True,
        weight_decay=0.0,
        ns_steps=5,
        ns_method="newton_schulz",
        cautious_wd=False,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                nesterov=nesterov,
                weight_decay=weight_decay,
                ns_steps=ns_steps,
                ns_method=ns_method,
                cautious_wd=cautious_wd,
                lr_new=None,
            ),
        )

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

    def step(self, closure=None):
        # a with block, not @torch.no_grad(): mutmut 3.8.1 does not mutate decorated functions
        with torch.no_grad():
            loss = _closure_loss(closure)
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self.state[p]
                    if "momentum_buffer" not in st:
                        st["momentum_buffer"] = torch.zeros_like(p)
                    buf = st["momentum_buffer"]
                    g = p.grad
                    keep, finite = _skip_flags(getattr(self, "found_inf", None), p)
                    weight = 1 - group["momentum"]
                    if keep is not None:  # a skipped step leaves the buffer and the weights as they were
                        g = torch.where(finite, g, torch.zeros((), dtype=g.dtype, device=g.device))
                        weight = weight * keep
                    buf.lerp_(g, weight)
                    g = g.lerp(buf, group["momentum"]) if group["nesterov"] else buf
                    update = self.direction(p, g, group)
                    _apply_update(
                        p, update, _effective_lr(group, st), group["weight_decay"], group["cautious_wd"], keep
                    )
            return loss


def torch_adamw(param_groups: list[dict], lr: float, betas, eps: float) -> torch.optim.AdamW:
    """torch.optim.AdamW, fused where every parameter's device has the fused kernel, else foreach."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    params = [p for g in param_groups for p in g["params"]]
    fused = bool(params) and all(
        p.device.type in _get_fused_kernels_supported_devices() and p.is_floating_point() for p in params
    )
    return torch.optim.AdamW(param_groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused, foreach=not fused)


def needs_elementwise_adamw(state: dict) -> bool:
    """True when an optimizer state (one parameter's dict) holds what only the hand-written AdamW can
    apply: a per-element step tensor or a re-warmup mask (both written by growth)."""
    step = state.get("step")
    return "new_mask" in state or (torch.is_tensor(step) and step.ndim > 0)


class OptimizerSet:
    """Several optimizers stepped together (Muon for hidden matrices + AdamW for the rest), with one
    state_dict keyed by parameter *name* so growth and resume pair states with parameters by name.

    `step(found_inf)` skips the whole update when the 0-d device tensor `found_inf` is 1, decided on
    the device (no host sync) for fused torch AdamW and the hand-written optimizers. torch's foreach
    AdamW has no such input; only there the flag is read on the host first."""

    def __init__(self, named: dict[str, torch.optim.Optimizer], param_names: dict[int, str]):
        self.optimizers = named
        self.param_names = param_names  # id(param) -> name

    @property
    def param_groups(self):
        return [g for o in self.optimizers.values() for g in o.param_groups]

    @property
    def uses_torch_adamw(self) -> bool:
        return isinstance(self.optimizers.get("adamw"), torch.optim.AdamW)

    def use_elementwise_adamw(self) -> None:
        """Swap torch's AdamW for the hand-written one (same groups, same state): growth is about to
        install per-element steps or re-warmup masks that torch's AdamW cannot apply."""
        o = self.optimizers.get("adamw")
        if not isinstance(o, torch.optim.AdamW):
            return
        groups = [{k: v for k, v in g.items() if k not in _IMPLEMENTATION_KEYS} for g in o.param_groups]
        d = o.defaults
        new = AdamW([dict(g) for g in groups], lr=d["lr"], betas=d["betas"], eps=d["eps"])
        for g_new, g_old in zip(new.param_groups, groups):
            g_new.update(g_old)
        for p, st in o.state.items():
            new.state[p] = {k: (v.to(p.device) if torch.is_tensor(v) else v) for k, v in st.items()}
        self.optimizers["adamw"] = new

    def zero_grad(self, set_to_none: bool = True):
        for o in self.optimizers.values():
            o.zero_grad(set_to_none=set_to_none)

    def step(self, found_inf: torch.Tensor | None = None):
        for o in self.optimizers.values():
            if found_inf is not None and isinstance(o, torch.optim.AdamW) and not o.defaults.get("fused"):
                if not bool(found_inf):  # foreach has no found_inf input: the one host read, on this path only
                    o.step()
                continue
            if found_inf is not None:
                o.found_inf = found_inf
            try:
                o.step()
            finally:
                if found_inf is not None:
                    del o.found_inf

    def state_dict(self) -> dict:
        """{"groups": {opt: [hyperparams without params]}, "state": {param_name: {key: tensor}},
        "membership": {param_name: [opt, group_index]}} -- tensors and plain data only."""
        out: dict[str, dict] = {"groups": {}, "state": {}, "membership": {}}
        for oname, o in self.optimizers.items():
            out["groups"][oname] = [
                {
                    k: (list(v) if isinstance(v, tuple) else v)
                    for k, v in g.items()
                    if k != "params" and k not in _IMPLEMENTATION_KEYS
                }
                for g in o.param_groups
            ]
            for gi, g in enumerate(o.param_groups):
                for p in g["params"]:
                    name = self.param_names[id(p)]
                    out["membership"][name] = [oname, gi]
                    if p in o.state:
                        out["state"][name] = {k: v.clone() if torch.is_tensor(v) else v for k, v in o.state[p].items()}
        return out

    def load_state_dict(self, sd: dict) -> list[str]:
        """Load a saved state; returns the names whose saved state was left out because no optimizer here holds
        that parameter (frozen since it was saved), for the caller to say so."""
        if any(needs_elementwise_adamw(st) for st in sd["state"].values()):
            self.use_elementwise_adamw()
        by_name = {}
        for oname, o in self.optimizers.items():
            for gi, g in enumerate(o.param_groups):
                saved = sd["groups"].get(oname, [])
                if gi < len(saved):
                    for k, v in saved[gi].items():
                        if k in _IMPLEMENTATION_KEYS:
                            continue
                        g[k] = tuple(v) if k == "betas" else v
                for p in g["params"]:
                    by_name[self.param_names[id(p)]] = (o, p)
        left_out = []
        for name, st in sd["state"].items():
            if name not in by_name:
                left_out.append(name)
                continue
            o, p = by_name[name]
            o.state[p] = {k: (v.to(_state_device(o, k, v, p)) if torch.is_tensor(v) else v) for k, v in st.items()}
        return left_out

    def state_for(self, name: str) -> dict | None:
        for o in self.optimizers.values():
            for g in o.param_groups:
                for p in g["params"]:
                    if self.param_names[id(p)] == name:
                        return o.state.get(p)
        return None


def _state_device(o: torch.optim.Optimizer, key: str, v: torch.Tensor, p: torch.Tensor) -> torch.device:
    """torch's foreach AdamW keeps a scalar step on the CPU (reading it there is free); everything else
    lives with its parameter."""
    if key == "step" and v.ndim == 0 and isinstance(o, torch.optim.AdamW) and not o.defaults.get("fused"):
        return torch.device("cpu")
    return p.device
