"""torch.distributed set-up for `torchrun`: gloo on CPU, nccl on CUDA; rank 0 does all I/O."""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world_size); (0, 1) when not launched by torchrun."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_if_launched(device: torch.device, timeout_s: int = 60) -> tuple[int, int]:
    """Join the torchrun process group. A collective that waits `timeout_s` (a rank hung, stopped or
    dead) raises on every other rank, so the whole job ends instead of hanging; NEXUS_DIST_TIMEOUT
    (seconds) overrides it for every run on a machine."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return world()
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = int(os.environ.get("NEXUS_DIST_TIMEOUT", timeout_s))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    return world()


def all_reduce_sum(x: float | int, device) -> float:
    if world()[1] == 1:
        return x
    t = torch.tensor([float(x)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item()


def all_reduce_tensor(t: torch.Tensor) -> torch.Tensor:
    """Sum a device tensor over ranks in place; the host does not wait for it (nccl) -- no .item()."""
    if world()[1] > 1:
        dist.all_reduce(t)
    return t


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """Global gradient norm as a 0-d device tensor, clipping to max_norm when > 0 (no host sync).
    Under FSDP2 the gradients are sharded DTensors: the norm of the shards is reduced to the full norm
    before clipping, as torch's own clip_grad_norm_ does not do for DTensors."""
    params = [p for p in parameters if p.grad is not None]
    grads = [p.grad for p in params]
    if not grads:
        return torch.zeros(())
    norm = torch.nn.utils.get_total_norm(grads, 2.0, error_if_nonfinite=False, foreach=True)
    if hasattr(norm, "full_tensor"):  # DTensor (FSDP2): a partial norm until reduced over the mesh
        norm = norm.full_tensor()
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
    return norm


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
