"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for `train.parallel: fsdp2`, and activation checkpointing.

Each block of `model.layers` is one FSDP unit (its parameters are gathered just before it runs and
freed after), the root holds the embeddings, final norm and head. Parameters, gradients and
optimizer state are Shard(0) DTensors, so every rank keeps 1/world of them.

Growth under FSDP2 gathers the full model and optimizer state on every rank, grows the plain model
with the ordinary (single-process) growth code, then shards the grown model and its transplanted
optimizer state again (`regather`, `shard_state`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn


def is_dtensor(t) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def local(t):
    """The local shard of a DTensor (a view: in-place updates reach the DTensor), else t itself."""
    return t.to_local() if is_dtensor(t) else t


def make_mesh(device: torch.device, world: int):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (world,))


def shard_model(model: nn.Module, mesh) -> nn.Module:
    """fully_shard every block, then the root (in place; the module's class becomes FSDP<cls>)."""
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if is_dtensor(t) else t


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer as a full tensor on every rank (a collective: all ranks call it)."""
    return {k: full_tensor(v).detach().clone() for k, v in model.state_dict().items()}


def full_optimizer_state(sd: dict) -> dict:
    """An OptimizerSet.state_dict() with every DTensor gathered to a full tensor (collective)."""
    out = dict(sd)
    out["state"] = {
        name: {k: (full_tensor(v) if torch.is_tensor(v) else v) for k, v in st.items()}
        for name, st in sd.get("state", {}).items()
    }
    return out


def shard_state(sd: dict, model: nn.Module) -> dict:
    """Full optimizer state -> the same state with every param-shaped tensor sharded like its
    parameter (a scalar step stays a plain tensor). Every rank holds the full state."""
    from torch.distributed.tensor import distribute_tensor

    params = dict(model.named_parameters())
    out = dict(sd)
    out["state"] = {}
    for name, st in sd.get("state", {}).items():
        p = params.get(name)
        new = {}
        for k, v in st.items():
            if torch.is_tensor(v) and p is not None and is_dtensor(p) and tuple(v.shape) == tuple(p.shape):
                v = distribute_tensor(v.to(p.device), p.device_mesh, p.placements)
            new[k] = v
        out["state"][name] = new
    return out


# ----------------------------------------------------------------------------- activation checkpointing
def apply_activation_checkpointing(model: nn.Module) -> int:
    """Recompute each block's activations during backward instead of storing them (torch.utils.checkpoint,
    non-reentrant). The block's `forward` is replaced on the instance, so parameter names (checkpoints,
    optimizer state, growth) are unchanged and FSDP2's hooks, which run in __call__, still wrap it.
    Returns the number of blocks wrapped."""
    n = 0
    for block in model.layers:
        if getattr(block, "_nexus_checkpointed", False):
            continue
        block.forward = functools.partial(_checkpointed, block.forward)
        block._nexus_checkpointed = True
        n += 1
    return n


def _checkpointed(forward, *args, **kwargs):
    if not torch.is_grad_enabled():  # eval / generation: nothing to save for backward
        return forward(*args, **kwargs)
    from torch.utils.checkpoint import checkpoint

    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
