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

from ..atomic import output_lock, swap_into_place
from ..checkpoint import SHARDED_DIR, checksums_in_meta, enters_run, write_checkpoint_files
from ..outdir import CHECKPOINT
from ..outdir.manifest import manifest_of_tree, write_manifest


def _rank0_tag() -> str:
    """Rank 0's "PID-NS" on every rank: the temporary name follows nexus.atomic's pattern
    (.NAME.tmp-PID-N), so a save interrupted by a crash is recovered or cleaned up like any other."""
    import os
    import time

    tag = [f"{os.getpid()}-{time.monotonic_ns()}"]
    dist.broadcast_object_list(tag, src=0)
    return str(tag[0])


def save_sharded(path, model, optimizer, cfg, tokenizer, trainer_state: dict) -> Path:
    """Collective: every rank calls it with its FSDP2 model and optimizer."""
    import torch
    import torch.distributed.checkpoint as dcp

    from ..checkpoint import NonFiniteWeightsError, nonfinite_tensors
    from .fsdp import local

    final = Path(path)
    # every rank checks its own shards; the verdict is shared so all ranks refuse together
    bad = nonfinite_tensors({k: local(v) for k, v in model.state_dict().items()})
    flag = torch.tensor([float(len(bad))], device=next(iter(model.parameters())).device)
    dist.all_reduce(flag)
    if flag.item():
        raise NonFiniteWeightsError(
            f"not saving {path}: weight tensors hold NaN/inf" + (f" (first {bad[0]})" if bad else "")
        )
    tag = _rank0_tag()
    tmp = final.parent / f".{final.name}.tmp-{tag}"
    rank = dist.get_rank()
    lk = None
    if rank == 0:
        final.parent.mkdir(parents=True, exist_ok=True)
        lk = output_lock(final)  # journals into the run's lock; a dead writer's recorded saves are finished first
        lk.pending(tmp)
        tmp.mkdir()
    dist.barrier()
    try:
        dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, checkpoint_id=str(tmp / SHARDED_DIR))
        if rank == 0:
            state = {k: v for k, v in trainer_state.items() if k != "optimizer"}
            write_checkpoint_files(tmp, cfg, tokenizer, state)
            write_manifest(tmp, manifest_of_tree(tmp, CHECKPOINT, checksums_in_meta(tmp)))
            swap_into_place(tmp, final, tag, lk, enter=enters_run(final))
    except BaseException:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lk is not None:
            lk.release()
    dist.barrier()
    return final
