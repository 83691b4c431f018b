"""Muon (Jordan et al., 2024) for 2-D hidden matrices, AdamW for the rest (embeddings, head, norms)."""

from __future__ import annotations

import typing
from dataclasses import dataclass

from ...config import AdamWOptions


@dataclass
class MuonOptions(AdamWOptions, kind="muon"):
    """Muon's own settings are still train.muon_* (lr, momentum, weight decay, orthogonalization); the options
    here are the AdamW half's (the parameters Muon does not take)."""

    builder: typing.ClassVar[str] = "nexus.optim.param_groups:build_muon"
    elementwise: typing.ClassVar[bool] = False  # orthogonalizes whole matrices: an FSDP2 row shard is not one
