"""torch.distributed set-up for `torchrun`: gloo on CPU, nccl on CUDA; rank 0 does all I/O.

Collective timeouts follow torchtitan's split: `train.dist_init_timeout_s` (long) through set-up, the
first step (which compiles) and every checkpoint save, `train.dist_timeout_s` (short) in steady-state
training, set on the process group with torch's own `_set_pg_timeout`. When a collective times out
(a rank stopped, hung or died), `unresponsive_rank_message` names the ranks that stopped answering,
found through the launcher's key-value store, so the job ends with one readable line; at exit, silent
ranks on the same host are killed, since a stopped process never acts on the launcher's SIGTERM.
"""

from __future__ import annotations

import atexit
import datetime
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist

from ..config import ConfigError

_TIMEOUTS = {"steady": 60, "patient": 600}  # seconds, set by init_if_launched


def world() -> tuple[int, int]:
    """(rank, world_size); (0, 1) when not launched by torchrun."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _env_int(environ, name: str, default: str | None = None, low: int = 0, high: int | None = None) -> int:
    raw = environ.get(name, default)
    if raw is None:
        raise ConfigError(
            f"{name} is not set with WORLD_SIZE={environ.get('WORLD_SIZE')} (valid: launch with torchrun, "
            "which sets WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT)"
        )
    try:
        v = int(raw)
    except ValueError:
        v = None
    if v is None or v < low or (high is not None and v > high):
        rng = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
        raise ConfigError(f"{name}={raw!r} (valid: {rng}; torchrun sets it)")
    return v


def launch_env(environ=None) -> tuple[int, int, int] | None:
    """(rank, world size, local rank) from torchrun's environment, None when not launched; a malformed
    or incomplete environment is one ConfigError line naming the variable."""
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" not in environ:
        return None
    ws = _env_int(environ, "WORLD_SIZE", low=1)
    if ws == 1:
        return 0, 1, 0
    rank = _env_int(environ, "RANK", None, 0, ws - 1)
    local = _env_int(environ, "LOCAL_RANK", "0", 0, ws - 1)
    if not environ.get("MASTER_ADDR"):
        raise ConfigError(
            f"WORLD_SIZE={ws} without MASTER_ADDR (valid: launch with torchrun, or set MASTER_ADDR and "
            "MASTER_PORT to rank 0's address and a free port)"
        )
    _env_int(environ, "MASTER_PORT", None, 1, 65535)
    return rank, ws, local


def init_if_launched(device: torch.device, timeout_s: int = 60, init_timeout_s: int = 600) -> tuple[int, int]:
    """Join the torchrun process group with the long (set-up) timeout; `enter_steady_state` switches to
    the short one after the first step. NEXUS_DIST_TIMEOUT (seconds) overrides the short one for every
    run on a machine."""
    env = launch_env()
    if env is None or env[1] <= 1 or dist.is_initialized():
        return world()
    backend = "nccl" if device.type == "cuda" else "gloo"
    steady = _env_int(os.environ, "NEXUS_DIST_TIMEOUT", str(timeout_s), low=1)
    _TIMEOUTS.update(steady=steady, patient=max(init_timeout_s, steady))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=_TIMEOUTS["patient"]))
    _record_where_this_rank_runs()
    return world()


def _process_identity(pid: int) -> str | None:
    """host:pid:start-time, which tells this process from a later one that reuses its pid (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    return f"{socket.gethostname()}:{pid}:{start}"


def _record_where_this_rank_runs() -> None:
    from torch.distributed.distributed_c10d import _get_default_store

    ident = _process_identity(os.getpid())
    if ident is not None:
        _get_default_store().set(f"nexus/where/{world()[0]}", ident)


def _set_timeout(seconds: int) -> None:
    if world()[1] > 1:
        from torch.distributed.distributed_c10d import _set_pg_timeout

        _set_pg_timeout(datetime.timedelta(seconds=seconds))


def enter_steady_state() -> None:
    """From here on a collective that waits train.dist_timeout_s ends the job."""
    _set_timeout(_TIMEOUTS["steady"])


def be_patient() -> None:
    """Until the next `enter_steady_state`: the long timeout (a checkpoint save on rank 0, the end of the run)."""
    _set_timeout(_TIMEOUTS["patient"])


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()


_SIGNS_OF_A_LOST_PEER = ("timed out", "timeout", "connection closed", "connection reset", "broken pipe")


def unresponsive_rank_message(exc: BaseException) -> str | None:
    """One line for a collective that failed because a peer stopped answering, naming the ranks that did
    not check in on the store within a few seconds; None for any other error."""
    rank, ws = world()
    if ws <= 1 or not isinstance(exc, RuntimeError):
        return None
    if not any(s in str(exc).lower() for s in _SIGNS_OF_A_LOST_PEER):
        return None
    silent = _ranks_not_answering(rank, ws)
    who = (
        ("rank " + str(silent[0]) if len(silent) == 1 else "ranks " + ", ".join(map(str, silent)))
        if silent
        else "a rank (which one could not be told)"
    )
    return (
        f"{who} stopped answering: rank {rank} waited for it in a collective past the timeout "
        f"(train.dist_timeout_s={_TIMEOUTS['steady']} s in training, train.dist_init_timeout_s="
        f"{_TIMEOUTS['patient']} s through set-up and saves); ending every rank"
    )


def _ranks_not_answering(rank: int, ws: int, wait_s: float = 3.0) -> list[int]:
    """Every rank still running checks in on the launcher's store; those that do not within `wait_s`."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
        store.set_timeout(datetime.timedelta(seconds=wait_s))
        store.set(f"nexus/answering/{rank}", "1")
        deadline = time.monotonic() + wait_s
        while True:
            silent = [r for r in range(ws) if not store.check([f"nexus/answering/{r}"])]
            if not silent or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    except Exception:  # the store lived in the stopped process, or is gone: say so without a name
        return []
    if silent:  # at exit, once this rank has said which ranks stopped: ending them first would let the
        # launcher tear this rank down before its line is out
        atexit.register(_end_silent_ranks_on_this_host, store, silent)
    return silent


def _end_silent_ranks_on_this_host(store, silent: list[int]) -> None:
    """SIGKILL the silent ranks that run on this host. A stopped process cannot act on the launcher's
    SIGTERM, and on a failed worker torchrun waits a fixed 30 s before killing it; the job
    is ending anyway, and ending the peer now keeps the whole job within the steady timeout plus a few
    seconds under a plain `torchrun`. Only a process whose host, pid and start time match what the rank
    recorded at set-up is signalled, never a later process that reuses the pid."""
    sys.stderr.flush()
    host = socket.gethostname()
    for r in silent:
        try:
            key = f"nexus/where/{r}"
            recorded = store.get(key).decode() if store.check([key]) else None
        except Exception:  # the store is gone
            recorded = None
        if recorded is None:  # the rank recorded nothing (no /proc)
            continue
        rec_host, pid, _ = recorded.rsplit(":", 2)
        if rec_host == host and _process_identity(int(pid)) == recorded:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:  # it ended on its own meanwhile
                pass


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
