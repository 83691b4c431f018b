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


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
