"""A trainer hook that logs the gradient norm of each layer: `train.hooks: [{kind: grad_norm, every: 10}]`.

Each logged record is `{step, event: grad_norm, grad_norm/<group>: L2 norm}`, one group per entry of a
module list (`layers.0`, `layers.1`, ...) and one per other top-level module (`embed`, `norm`, ...),
taken from the parameter names, so it needs no knowledge of the architecture. The norms are of the
gradients the optimizer applies: after reduction across ranks and after train.grad_clip (the hook runs
at before_optimizer_step; with grad_clip 0 they are the raw gradients). They are computed on the device
and read to the host once per logged step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import option
from .hooks import HOOK_KINDS, Hook

WRAPPERS = ("module.", "_orig_mod.")  # DDP and torch.compile prefix parameter names with these


@dataclass
class GradNormOptions:
    """The options of a `{kind: grad_norm}` entry in train.hooks."""

    every: int = option(0, "log the per-layer gradient norms every N optimizer steps (0: every train.log_every)")

    def check(self, errors: list[str], where: str, cfg) -> None:
        if self.every < 0:
            errors.append(f"{where}.every={self.every!r} (valid: an integer >= 0; 0 = every train.log_every steps)")


def group_of(name: str) -> str:
    """The layer a parameter belongs to, from its name: `layers.3.attn.q_proj.weight` -> `layers.3`,
    `embed.weight` -> `embed` (a wrapper's prefix dropped)."""
    for prefix in WRAPPERS:
        while name.startswith(prefix):
            name = name[len(prefix) :]
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 and parts[1].isdigit() else parts[0]


@HOOK_KINDS.register("grad_norm")
class GradNormHook(Hook):
    """Logs the L2 norm of each layer's gradient every `every` steps."""

    Options = GradNormOptions

    def __init__(self, every: int = 0):
        self.every = every

    def before_optimizer_step(self, trainer, step: int) -> None:
        every = self.every or trainer.cfg.train.log_every
        if (step + 1) % every:  # `step` is 0-based here; the record names the step it completes (step + 1)
            return
        import torch

        squares: dict[str, list] = {}
        for name, p in trainer.model.named_parameters():
            if p.grad is None:
                continue
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad  # an FSDP2 shard: the whole
            squares.setdefault(group_of(name), []).append(g.detach().float().pow(2).sum())
        if not squares:
            return
        norms = torch.stack([torch.stack(s).sum() for s in squares.values()]).sqrt().tolist()  # one host read
        trainer.log({"step": step + 1, "event": "grad_norm", **{f"grad_norm/{k}": v for k, v in zip(squares, norms)}})
