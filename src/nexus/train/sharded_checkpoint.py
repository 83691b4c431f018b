"""Sharded checkpoints for FSDP2 runs, written with torch.distributed.checkpoint (DCP).

Every rank writes its own shards of the model and optimizer state into `<dir>/sharded/`; rank 0
writes config.json, the tokenizer, trainer_state.pt (step, RNG, counters; the optimizer is in the
shards) and meta.json. All of it goes into a temporary sibling directory that rank 0 renames into
place after every rank has finished, so a crash never leaves a half checkpoint under the final name.

Reading needs no process group and no particular world size (`nexus.checkpoint.load_sharded`):
resume at another world size, `nexus export --format consolidated` (one safetensors file), or
generate/eval/export straight from the sharded directory.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch.distributed as dist

from ..checkpoint import SHARDED_DIR, move_into_place, write_checkpoint_files


def save_sharded(path, model, optimizer, cfg, tokenizer, trainer_state: dict) -> Path:
    """Collective: every rank calls it with its FSDP2 model and optimizer."""
    import torch.distributed.checkpoint as dcp

    final = Path(path)
    tmp = final.parent / f".{final.name}.tmp-sharded"
    rank = dist.get_rank()
    if rank == 0:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run that died while saving
        tmp.mkdir()
    dist.barrier()
    try:
        dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, checkpoint_id=str(tmp / SHARDED_DIR))
        if rank == 0:
            state = {k: v for k, v in trainer_state.items() if k != "optimizer"}
            write_checkpoint_files(tmp, cfg, tokenizer, state)
            move_into_place(tmp, final)
    except BaseException:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    dist.barrier()
    return final
