"""The contract a hand-written optimizer meets to train, skip a step, grow and resume under nexus
(`GrowableOptimizer`); AdamW and Muon (optim/optimizers.py) meet it, and so does a new kind's optimizer.

What nexus asks of an optimizer beyond torch.optim.Optimizer:
  * `state_growth`: every parameter-shaped tensor it keeps in `self.state[p]`, with the power of the weight's
    scale it carries (1: a first moment such as Adam's exp_avg or a momentum buffer; 2: a second moment such as
    exp_avg_sq; 0: grown, never rescaled). Growth's state surgery (growth/optimizer_surgery.py) extends each
    declared tensor to the grown parameter's shape (old entries keep their state, new entries start at zero, or
    copy their source under --optimizer-state copy) and, under `scaled`, multiplies old entries by alpha**power.
    A state tensor it does not declare is refused there, in one line, instead of guessed from its name.
    `step` is handled by the surgery itself (it becomes per-element where old and new entries share a tensor):
    an optimizer that keeps one reads it with `_bias_correction`-style code that accepts a tensor.
  * `state["new_mask"]` (float 0/1, parameter-shaped, set by growth) marks freshly grown entries, which step with
    `group["lr_new"]` (the re-warmup's lr, set by optim/schedule.set_lr) instead of `group["lr"]`, applied to the
    *update* after its normalization: `apply_update` does it (and decoupled, optionally cautious, weight decay).
  * `self.found_inf` (a 0-d device tensor, 1 = skip; set by OptimizerSet.step for the duration of `step()` when
    the gradients are not finite): the step must leave the weights, the state and any step count unchanged,
    decided on the device (no host sync). `skip_flags(p)` gives (keep 0/1, finite bool) or (None, None).
  * Hyperparameters in its param_groups are plain values (lists for tuples): a checkpoint saves and restores them
    by name (OptimizerSet.state_dict), so save and resume are bitwise.
tests/test_optimizer_kinds.py runs these checks over every registered kind.
"""

from __future__ import annotations

import typing

import torch


class GrowableOptimizer(torch.optim.Optimizer):
    """Base of nexus's hand-written optimizers (the contract in the module docstring)."""

    state_growth: typing.ClassVar[dict[str, int]] = {}  # state key -> power of the weight's scale it carries

    @staticmethod
    def run_closure(closure):
        """The closure's loss (None without one), run with grad mode on inside the step's no_grad block."""
        return _closure_loss(closure)

    @staticmethod
    def local(t: torch.Tensor) -> torch.Tensor:
        """The local shard of an FSDP2 DTensor (a view: in-place updates land in it), else t."""
        return _local(t)

    def skip_flags(self, p: torch.Tensor):
        """(keep 0/1 float, finite bool) on p's device while a non-finite step is being skipped, else (None, None)."""
        return _skip_flags(getattr(self, "found_inf", None), p)

    def apply_update(self, p: torch.Tensor, update: torch.Tensor, group: dict, state: dict, keep=None) -> None:
        """p <- p - lr * (update + decoupled weight decay), with the re-warmup lr on entries `new_mask` marks and
        nothing changed where `keep` is 0 (a skipped step)."""
        _apply_update(
            _local(p),
            update,
            _effective_lr(group, state),
            group.get("weight_decay", 0.0),
            group.get("cautious_wd", False),
            keep,
        )


# torch's own AdamW (the fast path of runs that never grew) keeps these; growth swaps it for optim.optimizers.AdamW
# before its surgery (OptimizerSet.use_elementwise_adamw), which declares the same
TORCH_ADAMW_STATE_GROWTH = {"exp_avg": 1, "exp_avg_sq": 2, "max_exp_avg_sq": 2}


def state_growth_of(optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """The state tensors `optimizer` declares, {key: power} (GrowableOptimizer.state_growth)."""
    if isinstance(optimizer, GrowableOptimizer):
        return type(optimizer).state_growth
    if isinstance(optimizer, torch.optim.AdamW):
        return TORCH_ADAMW_STATE_GROWTH
    return {}


def _local(t):
    """The local shard of an FSDP2 DTensor (a view, so in-place updates land in the DTensor), else t.
    Every AdamW operation is elementwise and the parameter, its gradient and its state share one
    sharding, so the hand-written optimizers run on the shards unchanged."""
    return t.to_local() if hasattr(t, "to_local") else t


def _effective_lr(group: dict, state: dict):
    """Scalar lr, or (lr, lr_new, mask) where a growth re-warmup mask is present."""
    lr = group["lr"]
    mask = state.get("new_mask")
    if mask is None or group.get("lr_new") is None:
        return lr
    return lr, group["lr_new"], _local(mask)


def _apply_update(p: torch.Tensor, update: torch.Tensor, lr, wd: float, cautious: bool, keep=None) -> None:
    """p <- p - lr*update - lr*wd*p (decoupled decay; cautious: only where update and p agree in sign).
    keep: optional 0/1 device scalar; 0 leaves p unchanged (a skipped non-finite step, no host sync)."""
    if wd:
        decay = p * wd
        if cautious:
            # the signs' product, not update * p: that product underflows to 0 for tiny entries (in float16
            # already at |update|, |p| ~ 1e-4) and would drop the decay where the signs agree
            decay = decay * ((update.sign() * p.sign()) > 0).to(p.dtype)
        update = update + decay
    if keep is not None:
        update = update * keep
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


def _closure_loss(closure):
    """The closure's loss, run with grad mode on inside the step's no_grad block: torch's contract is that
    the closure re-runs the model and calls backward itself."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _skip_flags(found_inf, p: torch.Tensor):
    """found_inf (device 0-d float, 1 = skip) -> (keep 0/1 float, finite bool) on p's device, or (None, None)."""
    if found_inf is None:
        return None, None
    keep = 1.0 - found_inf.to(device=p.device, dtype=torch.float32)
    return keep, keep > 0
