"""Muon (Jordan et al., 2024) for 2-D hidden matrices, AdamW for the rest (embeddings, head, norms)."""

from __future__ import annotations

import typing
from dataclasses import dataclass

from ...config import AdamWOptions
from ...config_base import _check, _positive, option


@dataclass
class MuonOptions(AdamWOptions, kind="muon"):
    """Muon's own options (lr, momentum, weight decay, orthogonalization: --train.optimizer.lr 0.02, each named as
    the Muon param group's key it sets), with the defaults of Keller Jordan's Muon; betas and eps are the AdamW
    half's (the parameters Muon does not take, trained at train.lr with train.weight_decay). Written before
    issue 49 as train.muon_lr / muon_wd / muon_momentum / muon_ns / muon_ns_steps (config_migration moves them)."""

    builder: typing.ClassVar[str] = "nexus.optim.param_groups:build_muon"
    elementwise: typing.ClassVar[bool] = False  # orthogonalizes whole matrices: an FSDP2 row shard is not one
    lr: float = option(0.02, "Muon's peak learning rate for the 2-D hidden matrices (the AdamW half's: train.lr)")
    momentum: float = option(0.95, "Muon's Nesterov momentum (the paper's 0.95)")
    weight_decay: float = option(
        0.0, "Muon's decoupled weight decay on its matrices (0: the paper's none; the AdamW half's: train.weight_decay)"
    )
    ns_method: typing.Literal["newton_schulz", "polar_express"] = option(
        "newton_schulz", "how the update is orthogonalized: the paper's Newton-Schulz quintic or Polar Express"
    )
    ns_steps: int = option(5, "orthogonalization iterations (the paper's 5)")

    def check(self, errors: list[str], p: str, model) -> None:
        super().check(errors, p, model)  # the AdamW half's betas and eps
        _positive(errors, f"{p}.lr", self.lr)
        m = self.momentum
        _check(
            errors,
            isinstance(m, (int, float)) and not isinstance(m, bool) and 0 <= m < 1,
            f"{p}.momentum",
            m,
            "a number in [0, 1)",
        )
        wd = self.weight_decay
        _check(
            errors,
            isinstance(wd, (int, float)) and not isinstance(wd, bool) and wd >= 0,
            f"{p}.weight_decay",
            wd,
            "a number >= 0",
        )
        n = self.ns_steps
        _check(errors, isinstance(n, int) and not isinstance(n, bool) and n > 0, f"{p}.ns_steps", n, "an integer > 0")
