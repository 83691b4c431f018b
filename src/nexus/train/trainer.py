"""The training loop. It knows nothing about architectures: it builds whatever `build_model`
returns, feeds it (input_ids, labels) and minimizes `out.loss`.

Extension points (the trainer imports none of their users):
  * hooks (`train/hooks.py:Hook`), given as `Trainer(..., hooks=[...])` or `trainer.add_hook(h)`: every
    event of a run besides the optimizer step itself. Console progress, metric writing, evaluation,
    sampling and checkpointing are built-in hooks; the hooks a run config turns on (`train.hooks`, kinds
    found by name in `hooks.HOOK_KINDS`) are built here.
  * `trainer.swap(model, optimizer, lr_rule=..., cfg=...)`: the only way a hook replaces the model,
    its optimizer or the per-parameter lr rule mid-run (re-wraps DDP/FSDP2; step, data cursor and RNG stay)
  * `self.lr_rule`: callable(step, base_lr, factor, tcfg) -> lr of the entries an optimizer marks new
    (`new_mask`, SPARKLING's re-warmup), or None
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import CheckpointError, NonFiniteWeightsError, load_checkpoint, load_trainer_state, save_checkpoint
from ..config import ConfigError, RunConfig
from ..data.loader import DataModule
from ..models import build_model, count_parameters
from ..models.lm_loss import IGNORE_INDEX
from ..optim.param_groups import build_optimizer
from ..optim.schedule import set_lr
from . import distributed as D
from . import run_dir as R
from .health import StepHealth
from .hooks import Hook, builtin_hooks, configured_hooks
from .memory import check_training_memory
from .precision import autocast_context, resolve_precision, resume_note


class TrainingAborted(RuntimeError):
    """Raised when training cannot continue (e.g. too many non-finite losses in a row)."""


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT / SIGTERM stopped the run at a step boundary after saving `checkpoint` (the command line
    exits 128 + signum and prints the message: where the checkpoint is and how to resume it)."""

    def __init__(self, signum: int, step: int, checkpoint):
        import signal

        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.signal_name = signal.Signals(signum).name
        super().__init__(self.message())

    def message(self, resume: str | None = None) -> str:
        """What happened and how to resume (`resume`: the command, default `nexus train --resume CKPT`)."""
        return (
            f"stopped by {self.signal_name} at step {self.step}; checkpoint saved: {self.checkpoint}; resume with: "
            f"{resume or f'nexus train --resume {self.checkpoint}'}"
        )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={name!r} but CUDA is not available (valid: auto|cpu)")
    return torch.device(name)


def memory_stats(device: torch.device) -> dict:
    if device.type == "cuda":
        return {
            "cuda_alloc_mb": torch.cuda.memory_allocated(device) / 2**20,
            "cuda_reserved_mb": torch.cuda.memory_reserved(device) / 2**20,
        }
    try:
        with open("/proc/self/statm") as f:
            rss_pages = int(f.read().split()[1])
        return {"rss_mb": rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20}
    except (OSError, ValueError):
        import resource

        return {"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


class Trainer:
    def __init__(
        self,
        cfg: RunConfig | None,
        resume: str | None = None,
        quiet: bool = False,
        init_model=None,
        init_tokenizer=None,
        hooks=(),
        resize_vocab: bool = False,
        notes=(),
        configured=None,
    ):
        """cfg: the finished run config; for `resume` the one `train.resume.resume_config` gives (None:
        that of the checkpoint unchanged); validated here unless it was validated unchanged before.
        init_model / init_tokenizer: a new run starts from these weights; a tokenizer of another
        vocabulary is refused unless `resize_vocab`. notes: what planning the run changed, printed when it
        starts. configured: the hooks the front door built from cfg (`configured_hooks`; None: built here)."""
        self.quiet = quiet
        self.hooks: list[Hook] = []
        self.lr_rule = None
        tstate = None
        self.notes: list[str] = list(notes)  # what start-up changed or repaired, printed by fit()
        if resume:
            if cfg is None:
                from .resume import resume_config

                cfg, more = resume_config(resume)
                self.notes += more
            tstate = load_trainer_state(resume)
            if tstate is None:
                raise CheckpointError(
                    f"--resume={str(resume)!r} has no trainer_state.pt (valid: a training checkpoint)"
                )
            init_model, _, init_tokenizer = load_checkpoint(
                resume, flag="--resume", model_cfg=cfg.model, stored_config=False
            )
        cfg.validated()  # a config from the front door (cli/train.py) or resume_config is not checked twice
        from .loggers import check_log_targets

        check_log_targets(cfg.train.log_to)  # a missing tensorboard / wandb fails before anything is written
        self.cfg = cfg
        tc = cfg.train
        self.device = resolve_device(tc.device)
        check_training_memory(cfg, self.device)  # refuse a run that cannot fit before allocating any of it
        self.rank, self.world = D.init_if_launched(self.device, tc.dist_timeout_s, tc.dist_init_timeout_s)
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(self.device)
        self.is_main = self.rank == 0
        # train.dtype (auto: decided here, once, from the device and the model the run starts with; a model
        # changed mid-run keeps it): nexus.train.precision
        self.precision = resolve_precision(tc.dtype, self.device, cfg.model.d_model, cfg.model.hd)
        self.out_dir = Path(tc.out_dir)
        self._seed_everything(tc.seed)
        self.data = DataModule(cfg.data, seed=tc.seed, tokenizer=init_tokenizer)
        if init_model is None:
            cfg.model.vocab_size = self.data.vocab_size  # the tokenizer decides the vocabulary
            torch.manual_seed(tc.seed)
            init_model = build_model(cfg.model)
        else:
            self._fit_vocab(init_model, init_tokenizer is not None, resize_vocab and tstate is None)
        self.mesh = None
        self.model = self._prepare(init_model)
        self.optimizer = build_optimizer(self.model, tc)
        self.step = 0
        self.health = StepHealth(self.device)
        self._metric_log = None  # metrics.jsonl + optional TensorBoard / W&B, opened at the first record
        # records logged before fit() has prepared the run directory (a hook's event from a model change made
        # before training starts): held until then, so the resume's cut of metrics.jsonl cannot drop them or
        # change the file under an open sink, and nothing is written before on_fit_start's checks have passed
        self._early_records: list[dict] | None = []
        self.tokens_seen = 0
        self.elapsed_before = 0.0  # wall seconds of the run before this process (a resumed run's earlier parts)
        self._t0: float | None = None  # when this process's fit() began (time.perf_counter)
        self.resumed_step = None
        self.resumed_from = resume  # the checkpoint this run continues (None: a fresh run)
        self.resumed_hook_states: dict = {}  # {hook.state_key: state} read from that checkpoint
        self._n_params = (None, 0)  # (model, its parameter count): recounted only after a swap
        if tstate is not None:
            base_lrs = [g["base_lr"] for g in self.optimizer.param_groups]
            self._restore(tstate)
            R.apply_base_lrs(self.optimizer, base_lrs)  # this run's train.lr, not the stored one
            self.resumed_step = self.step
            # checkpoints from before issue 51 recorded no dtype: theirs was their config's (float32 | bfloat16)
            changed = resume_note(tstate.get("dtype"), self.precision)
            if changed:
                self.notes.append(changed)
        self._wrap()
        if self.cfg.train.parallel == "fsdp2" and self.world == 1:  # asked for, not done: say so
            self.notes.append(
                "train.parallel=fsdp2 at world size 1: training unsharded (FSDP2 shards across ranks; "
                "launch with torchrun --nproc_per_node N to shard)"
            )
        # what the config turns on, whoever built the trainer; checked before anything is written
        for hook in [*builtin_hooks(), *configured_hooks(self.cfg, hooks, built=configured), *hooks]:
            self.add_hook(hook)

    def _fit_vocab(self, model, own_tokenizer: bool, resize: bool) -> None:
        """A model from a checkpoint and this run's tokenizer: the vocabulary must match, or be resized
        when asked (`--resize-vocab`)."""
        from ..models.vocab import needs_resize, resize_vocab

        n_model, n_tok = model.cfg.vocab_size, self.data.vocab_size
        if needs_resize(n_model, n_tok, self.cfg.data, own_tokenizer, resize):
            resize_vocab(model, n_tok)
            self.cfg.model.vocab_size = n_tok
            self.notes.append(f"--resize-vocab: model.vocab_size {n_model} -> {n_tok} (the tokenizer's)")

    # ------------------------------------------------------------------ hooks
    def add_hook(self, hook: Hook) -> None:
        """Register a hook (train/hooks.py); on a resumed trainer it gets its stored state and
        on_checkpoint_load at once."""
        if not isinstance(hook, Hook):
            raise TypeError(f"Trainer hooks subclass nexus.train.hooks.Hook (got {type(hook).__name__})")
        self.hooks.append(hook)
        self.hooks.sort(key=lambda h: -h.priority)  # stable: equal priorities keep the order given
        if self.resumed_step is not None:
            if hook.state_key is not None:
                hook.load_state_dict(self.resumed_hook_states.get(hook.state_key))
            hook.on_checkpoint_load(self)

    def call_hooks(self, event: str, *args) -> None:
        for hook in list(self.hooks):
            getattr(hook, event)(self, *args)

    # ------------------------------------------------------------------ set-up
    def _seed_everything(self, seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    @property
    def _fsdp(self) -> bool:
        return self.world > 1 and self.cfg.train.parallel == "fsdp2"

    def _prepare(self, model):
        """Move to the device, add activation checkpointing, and shard under FSDP2 (before the
        optimizer is built: it must see the sharded parameters)."""
        model = model.to(self.device)
        if self.cfg.train.activation_checkpointing:
            from .fsdp import apply_activation_checkpointing

            apply_activation_checkpointing(model)
        if self._fsdp:
            from .fsdp import make_mesh, shard_model

            if self.mesh is None:
                self.mesh = make_mesh(self.device, self.world)
            shard_model(model, self.mesh)
        return model

    def _wrap(self) -> None:
        self.train_model = self.model
        self._ddp = False
        if self.world > 1 and not self._fsdp:
            self._ddp = True
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.train_model = DDP(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if self.cfg.train.compile:
            self.train_model = torch.compile(self.train_model, mode=self.cfg.train.compile_mode)

    def release_parallel_wrapper(self) -> None:
        """Drop the DDP (or compiled) wrapper while the process group still exists. Freed after
        `destroy_process_group`, DDP's reducer holds the last reference to the gloo group, whose
        destructor joins worker threads that need the GIL the freeing thread holds: the rank then
        hangs at exit (seen in about one run in five of the two-rank test)."""
        self.train_model = self.model
        gc.collect()

    _KEEP = object()

    def swap(self, model=None, optimizer=None, *, lr_rule=_KEEP, cfg: RunConfig | None = None) -> None:
        """Replace the model and its optimizer, the per-parameter lr rule and/or the run config mid-run:
        the only way a hook changes them. `cfg` is the config that describes the new model. Under FSDP2
        `model` is a plain (unsharded) model and `optimizer` its optimizer with full state: the model is
        sharded here and the state sharded like it. \
Step, tokens seen, the data cursor (batches are drawn by step) and the RNG streams stay."""
        if (model is None) != (optimizer is None):
            raise RuntimeError("Trainer.swap: a new model needs its own optimizer (give both or neither)")
        rng = torch.get_rng_state()
        if cfg is not None:
            self.cfg = cfg
        if model is not None:
            if self._fsdp:
                from .fsdp import shard_state

                full = optimizer.state_dict()
                self.model = self._prepare(model)
                optimizer = build_optimizer(self.model, self.cfg.train)
                optimizer.load_state_dict(shard_state(full, self.model))
            else:
                self.model = self._prepare(model)
            self.optimizer = optimizer
            self._wrap()
        if lr_rule is not Trainer._KEEP:
            self.lr_rule = lr_rule
        torch.set_rng_state(rng)

    def full_model_and_optimizer_state(self):
        """(model, optimizer state dict) as a single process would hold them: under FSDP2 an unsharded
        copy of the model and the gathered optimizer state (collective), else the live objects."""
        if not self._fsdp:
            return self.model, self.optimizer.state_dict()
        from .fsdp import full_model_state, full_optimizer_state

        plain = build_model(self.cfg.model)
        plain.load_state_dict(full_model_state(self.model))
        return plain, full_optimizer_state(self.optimizer.state_dict())

    def trainer_state(self, with_optimizer: bool = True) -> dict:
        rng = {
            "torch": torch.get_rng_state(),
            "numpy": torch.from_numpy(np.frombuffer(json.dumps(_np_state()).encode(), dtype=np.uint8).copy()),
        }
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        st = {
            "step": self.step,
            "tokens_seen": self.tokens_seen,
            "nonfinite_total": int(self.health.total),
            "rng": rng,
            "elapsed_s": self.elapsed(),
            "world": self.world,
            "dtype": self.precision.dtype,  # what the steps ran in (train.dtype auto resolved): a resume compares
        }  # a resume at another world size keeps the global batch (train/resume.py)
        tc = self.cfg.train
        st["data"] = self.data.state_dict(self.step, tc.batch_size * self.world, tc.grad_accum)  # the loader's position
        if with_optimizer:
            st["optimizer"] = self.optimizer.state_dict()
        hooks = {h.state_key: h.state_dict() for h in self.hooks if h.state_key is not None}
        hooks = {k: v for k, v in hooks.items() if v is not None}
        if hooks:
            st["hooks"] = hooks
        return st

    def _restore(self, st: dict) -> None:
        try:
            opt_state = st["optimizer"]
            if self._fsdp:  # the stored state is full (any world size): keep this rank's shards
                from .fsdp import shard_state

                opt_state = shard_state(opt_state, self.model)
            left_out = self.optimizer.load_state_dict(opt_state)
            if left_out:  # nothing silent: a parameter frozen since the save loses its moments
                self.notes.append(
                    f"optimizer state of {len(left_out)} parameter(s) this run does not train was "
                    f"left out: {', '.join(left_out[:5])}" + (" ..." if len(left_out) > 5 else "")
                )
            self.step = int(st["step"])
            self.tokens_seen = int(st.get("tokens_seen", 0))
            self.elapsed_before = float(st.get("elapsed_s", 0.0))  # checkpoints before it was kept: 0
            self.health = StepHealth(self.device, int(st.get("nonfinite_total", 0)))
            self.resumed_hook_states = dict(st.get("hooks") or {})  # checkpoints before hook state have none
            if "data" in st:  # checkpoints before the loader position: the position follows from the step
                self.notes += [n for n in [self.data.load_state_dict(st["data"])] if n]
            torch.set_rng_state(st["rng"]["torch"])
            _np_restore(json.loads(bytes(st["rng"]["numpy"].tolist()).decode()))
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(
                f"trainer_state.pt does not match this run ({type(e).__name__}: {str(e)[:100]})"
            ) from None

    # ------------------------------------------------------------------ loop pieces
    def _micro_batches(self, step: int):
        """This rank's slices of the step's global micro-batches. Every rank draws the whole global
        batch, so the global valid-token count is known here without a collective."""
        tc = self.cfg.train
        out, total = [], 0
        for m in range(tc.grad_accum):
            x, y = self.data.global_train_batch(step, m, tc.batch_size * self.world, tc.grad_accum)
            total += _valid_targets(y)
            mine = slice(self.rank * tc.batch_size, (self.rank + 1) * tc.batch_size)
            out.append((x[mine], y[mine]))
        self._global_tokens = total
        return out

    def train_step(self, step: int) -> dict:
        """One optimizer step without host syncs. Returns device tensors ("loss", "grad_norm",
        "finite") and host numbers ("step", "lr_factor", "tokens"); `read_step_metrics` turns them into
        floats at log steps. A step whose loss or gradient norm is not finite changes nothing: the
        optimizer skips it on the device (found_inf), and the streak counters live on the device."""
        tc = self.cfg.train
        lr_factor = set_lr(self.optimizer, step, tc, self.lr_rule)
        batches = self._micro_batches(step)
        local_tokens = sum(_valid_targets(y) for _, y in batches)
        total_tokens = local_tokens if self.world == 1 else self._global_tokens
        loss_sum = torch.zeros((), dtype=torch.float32, device=self.device)
        for i, (x, y) in enumerate(batches):
            if self.device.type == "cuda":  # page-locked: the copy runs asynchronously instead of blocking the host
                x, y = x.pin_memory(), y.pin_memory()
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            sync = i == len(batches) - 1
            ctx = (
                self.train_model.no_sync() if (self.world > 1 and not sync and self._ddp) else contextlib.nullcontext()
            )
            if self._fsdp:  # FSDP2: reduce-scatter gradients only after the last micro-batch
                self.train_model.set_requires_gradient_sync(sync)
            if tc.compile and tc.compile_mode == "reduce-overhead":
                # CUDA graphs: a new step begins, so the previous replay's outputs (already read) may be overwritten
                torch.compiler.cudagraph_mark_step_begin()
            with ctx, self._autocast():
                out = self.train_model(x, labels=y)
                # Weight each micro-batch by its share of all valid tokens in the global step; DDP / FSDP
                # then average over ranks, so multiply by world to get sum/total.
                scaled = out.loss * (out.n_valid / max(total_tokens, 1)) * self.world
            scaled.backward()
            loss_sum = loss_sum + out.loss.detach().float() * out.n_valid
        if self.world > 1:
            D.all_reduce_tensor(loss_sum)
        loss = loss_sum / max(total_tokens, 1)
        # The norm is taken even without clipping: a finite loss can still come with NaN/inf gradients,
        # and applying them would poison every weight.
        gn = D.clip_grad_norm(self.model.parameters(), tc.grad_clip)
        finite = torch.isfinite(loss) & torch.isfinite(gn)
        self.call_hooks("before_optimizer_step", step)
        self.optimizer.step(found_inf=(~finite).float())
        self.call_hooks("after_optimizer_step", step)
        self.optimizer.zero_grad(set_to_none=True)
        self.health.update(finite)
        return {
            "step": step + 1,
            "loss": loss,
            "grad_norm": gn,
            "finite": finite,
            "lr_factor": lr_factor,
            "tokens": total_tokens,
        }

    def read_step_metrics(self, m: dict) -> dict:
        """Host copy of one step's metrics (one device->host transfer), and the non-finite check: aborts
        when some streak of skipped steps since the last read reached train.max_nonfinite."""
        vals = torch.stack([m["loss"].float(), m["grad_norm"].float(), m["finite"].float()]).tolist()
        out = {k: v for k, v in m.items() if k not in ("loss", "grad_norm", "finite")}
        out.update(loss=vals[0], grad_norm=vals[1])
        total, worst = self.health.read()
        if not vals[2]:
            out.update(skipped=True)
        if total:
            out["nonfinite_total"] = total
        if worst >= self.cfg.train.max_nonfinite:
            raise TrainingAborted(
                f"loss or gradient norm was non-finite for {worst} steps in a row "
                f"(train.max_nonfinite={self.cfg.train.max_nonfinite}); lower train.lr or check the data"
            )
        return out

    @property
    def nonfinite_total(self) -> int:
        return int(self.health.total)

    def _autocast(self):
        return autocast_context(self.precision, self.device)

    @torch.no_grad()
    def evaluate(self, n_batches: int | None = None) -> float:
        tc = self.cfg.train
        self.model.eval()
        tot, n = 0.0, 0
        # Under DDP each rank scores its slice of the global validation batch, so the validation set
        # (and loss) equals one process with batch_size * world; every rank must call evaluate().
        mine = slice(self.rank * tc.batch_size, (self.rank + 1) * tc.batch_size)
        for x, y in self.data.val_batches(n_batches or tc.eval_batches, tc.batch_size * self.world):
            with self._autocast():
                out = self.model(x[mine].to(self.device), labels=y[mine].to(self.device))
            tot += float(out.ce_loss) * out.n_tokens
            n += out.n_tokens
        self.model.train()
        tot, n = D.all_reduce_sum(tot, self.device), D.all_reduce_sum(n, self.device)
        return tot / max(n, 1)

    def sample(self) -> str:
        if self.data.task is not None:
            return ""
        tc = self.cfg.train
        tok = self.data.tokenizer
        ids = torch.tensor([tok.encode(tc.sample_prompt) or [tok.eos_id]], device=self.device)
        g = torch.Generator(device=self.device).manual_seed(tc.seed)
        rng = torch.get_rng_state()
        out = self.model.generate(ids, max_new_tokens=tc.sample_tokens, temperature=0.8, top_k=40, generator=g)
        torch.set_rng_state(rng)  # sampling must not perturb the training RNG (exact resume)
        return tok.decode(out[0].tolist())

    def log(self, record: dict) -> None:
        if not self.is_main:
            return
        if self._early_records is not None:
            self._early_records.append(record)
            return
        if self._metric_log is None:
            from .loggers import MetricLog

            tc = self.cfg.train
            self._metric_log = MetricLog(self.out_dir, tc.log_to, self.cfg.to_dict(), tc.wandb_project)
        self._metric_log.write(record)

    def close_logs(self) -> None:
        if self._metric_log is not None:
            self._metric_log.close()
            self._metric_log = None

    def say(self, msg: str) -> None:
        if self.is_main and not self.quiet:
            from tqdm import tqdm

            tqdm.write(msg)

    def save(self, path: Path) -> Path:
        """Rank 0 writes a safetensors checkpoint; under FSDP2 every rank must call this and each
        writes its shards (torch.distributed.checkpoint)."""
        try:
            if self._fsdp:
                from .sharded_checkpoint import save_sharded

                path = save_sharded(
                    path,
                    self.model,
                    self.optimizer,
                    self.cfg,
                    self.data.tokenizer,
                    self.trainer_state(with_optimizer=False),
                )
            else:
                path = save_checkpoint(path, self.model, self.cfg, self.data.tokenizer, self.trainer_state())
        except NonFiniteWeightsError as e:
            last = R.latest_checkpoint(self.out_dir)
            raise TrainingAborted(
                f"weights became non-finite by step {self.step} ({e}); last finite checkpoint: "
                f"{last or 'none'}; lower train.lr"
            ) from None
        self.call_hooks("on_checkpoint_save", path)
        return path

    @property
    def writes_checkpoints(self) -> bool:
        return self.is_main or self._fsdp  # FSDP2: a collective save on every rank

    def save_periodic(self) -> None:
        """A step checkpoint, then prune complete step checkpoints older than it down to train.keep_last;
        every saved checkpoint is finite (save refuses NaN/inf weights), so the newest finite one is kept."""
        self.save(self.out_dir / f"step_{self.step:07d}")
        if not self.is_main:
            return
        R.prune_step_checkpoints(self.out_dir, self.step, self.cfg.train.keep_last)

    def due(self, every: int) -> bool:
        """Whether a periodic action (every `every` steps, 0: never) falls on the step just taken. The
        last step never is: the run's end evaluates, samples and saves it once."""
        return bool(every) and self.step % every == 0 and self.step < self.cfg.train.steps

    @property
    def n_params(self) -> int:
        if self._n_params[0] is not self.model:
            self._n_params = (self.model, count_parameters(self.model))
        return self._n_params[1]

    # ------------------------------------------------------------------ main loop
    def fit(self) -> dict:
        """Train to train.steps holding the run directory's one-writer lock (rank 0; re-entrant when the
        command that built the trainer holds it). A collective that timed out because a rank stopped
        answering ends the run as TrainingAborted naming that rank."""
        lock = R.run_lock(self.out_dir) if self.is_main else None
        self.notes += getattr(lock, "notes", [])  # a dead run's lock taken over, its saves recovered
        try:
            with self._stop_signals():
                return self._fit()
        except RuntimeError as e:
            lost = D.unresponsive_rank_message(e)
            if lost is None:
                raise
            raise TrainingAborted(lost) from None
        finally:
            self.close_logs()  # flush TensorBoard / finish the W&B run, also when training fails
            if lock is not None:
                if self.out_dir.is_dir():
                    R.record_run_files(self.out_dir)
                lock.release()

    @contextlib.contextmanager
    def _stop_signals(self):
        """SIGINT / SIGTERM during fit(): finish the step, save a checkpoint, raise TrainingInterrupted
        (a second SIGINT stops at once, without saving). One process only: under torchrun the ranks
        would stop at different steps and the save is a collective, so there the signals keep their
        default effect (the last periodic checkpoint is the one to resume)."""
        import signal
        import threading

        self._stop_signal = None
        if self.world > 1 or threading.current_thread() is not threading.main_thread():
            yield
            return

        def stop(signum, frame):
            if self._stop_signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt  # asked twice: stop now
            self._stop_signal = signum
            if not self.quiet:  # a quiet caller (a study's worker) says what stopped once, itself
                # no step named: a signal during a save stops at the step being saved, one during a step after it
                print(
                    f"nexus: {signal.Signals(signum).name}: stopping at the next step boundary with a checkpoint "
                    "(Ctrl-C again stops at once, without one)",
                    file=sys.stderr,
                    flush=True,
                )

        before = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)

    def _stop_if_signalled(self) -> None:
        """At a step boundary after SIGINT / SIGTERM: save this step's checkpoint (unless the periodic
        save just wrote it) and stop with TrainingInterrupted."""
        if getattr(self, "_stop_signal", None) is None:  # None also when fit() is not the caller
            return
        path = self.out_dir / f"step_{self.step:07d}"
        if not path.is_dir():
            self.save_periodic()
        raise TrainingInterrupted(self._stop_signal, self.step, path)

    def _say_epochs(self, tc) -> None:
        """The data summary, and how many times the run will read its training tokens (above one, the
        corpus repeats)."""
        self.say(f"data: {self.data.summary()}")
        if self.data.task is not None:
            return
        leak = self.data.overlap_note()
        if leak:
            self.say(f"data: {leak}")
        n = len(self.data.train)
        planned = self.data.epochs(
            self.tokens_seen
            + (tc.steps - self.step) * tc.grad_accum * tc.batch_size * self.world * self.cfg.data.seq_len
        )
        repeat = f": the corpus repeats ~{planned:.1f} times (epoch is in metrics.jsonl)" if planned > 1 else ""
        self.say(f"data: {n:,} training tokens; by step {tc.steps} the run will have read {planned:.3f} epochs{repeat}")

    def _fit(self) -> dict:
        self.call_hooks("on_fit_start")  # checks that must fail before anything is written
        self._announce()
        result: dict = {"params": self.n_params, "dtype": self.precision.dtype}  # dtype: train.dtype as resolved
        self._start_clock()
        while self.step < self.cfg.train.steps:
            self.run_step()
        # params again: a hook may have swapped the model during the run; the result describes the one it ends with
        result.update(step=self.step, tokens_seen=self.tokens_seen, params=self.n_params)
        self.call_hooks("on_fit_end", result)  # the final evaluation, sample and checkpoint fill it in
        return result

    def _start_clock(self) -> None:
        """Throughput and ETA count from here; skipped steps are reported from here on."""
        self._t0, self._start_step = time.perf_counter(), self.step
        # (when, loss-bearing tokens, processed tokens) since the last logged step: throughput
        self._since_log = (self._t0, 0, 0)
        self._skipped_before = int(self.health.total)

    def run_step(self) -> dict:
        """One optimizer step exactly as fit() takes it, the public single-step API: on_step_start, the step
        (train_step at self.step), the step counter and tokens_seen advanced, the metrics read to the host when
        the step logs or a hook asks, on_log at log steps, on_step_end, then a pending SIGINT/SIGTERM honoured.
        fit() is this in a loop between on_fit_start and on_fit_end, so N calls train exactly as fit() does for
        N steps (tests/test_trainer_run_step.py). Returns the step's metrics: host numbers when they were read,
        else train_step's device tensors. Outside fit() the first call starts the throughput clock; records
        logged before fit() has prepared the run directory wait for it (as any early record)."""
        if self._t0 is None:
            self._start_clock()
        self.call_hooks("on_step_start", self.step)
        m = self.train_step(self.step)
        tc = self.cfg.train  # read after on_step_start: a hook there may have swapped the config
        self.step += 1
        self.tokens_seen += int(m["tokens"])
        processed = tc.batch_size * tc.grad_accum * self.world * self.cfg.data.seq_len  # every input position
        self._since_log = (self._since_log[0], self._since_log[1] + int(m["tokens"]), self._since_log[2] + processed)
        log_now = self.step % tc.log_every == 0 or self.step >= tc.steps
        if log_now or any(h.needs_host_metrics(self, self.step) for h in self.hooks):
            m = self._host_metrics(m)  # the only places a step's numbers reach the host
        if log_now:
            self.call_hooks("on_log", self.step, self._log_record(m))
        self.call_hooks("on_step_end", self.step, m)
        self._stop_if_signalled()
        return m

    def _announce(self) -> None:
        """Write the run directory's config and say what the run is (rank 0)."""
        if self.is_main:
            self.notes += R.prepare_run_dir(self.out_dir, self.resumed_step)
            import yaml

            from ..atomic import write_text_atomic

            # the run's from now on, entered in its manifest as it is renamed: a restart may replace it, nothing else
            write_text_atomic(
                self.out_dir / "config.yaml", yaml.safe_dump(self.cfg.to_dict(), sort_keys=False), enter=True
            )
            early, self._early_records = self._early_records or [], None
            for record in early:  # the run directory is ready: what was logged before fit() goes in now
                self.log(record)
            for note in self.notes:  # what changed from what the user asked: shown even with quiet
                print(f"note: {note}", file=sys.stderr, flush=True)
        self.say(
            f"nexus: {self.cfg.preset or 'custom'} | {self.n_params / 1e6:.2f}M params | {self.device} | "
            f"world {self.world} | steps {self.step}->{self.cfg.train.steps} | out {self.out_dir}"
        )
        if self.precision.worth_saying:
            self.say(self.precision.line())  # what auto chose and why (or an explicit bf16 that is slow here)
        self._say_epochs(self.cfg.train)
        if self.cfg.train.compile:  # the first step waits for the compiler: say so instead of looking hung
            self.say("torch.compile: the first step compiles the model (often a minute or more; later steps are fast)")

    def _host_metrics(self, m: dict) -> dict:
        """read_step_metrics, plus how many steps were skipped since the previous read."""
        m = self.read_step_metrics(m)
        new_skips = m.get("nonfinite_total", 0) - self._skipped_before
        self._skipped_before = m.get("nonfinite_total", 0)
        if new_skips:
            m["skipped_since_last_log"] = new_skips
        return m

    def _log_record(self, m: dict) -> dict:
        """The logged step's record: its metrics plus throughput since the last log, lr, size and memory."""
        dt = time.perf_counter() - self._since_log[0]
        # tokens_per_s and tokens_seen count loss-bearing tokens (labels scored); processed_tokens_per_s every
        # input position the model ran on (the two differ on chat, synthetic and padded data)
        m.update(
            tokens_per_s=self._since_log[1] / max(dt, 1e-9),
            tokens_seen=self.tokens_seen,
            processed_tokens_per_s=self._since_log[2] / max(dt, 1e-9),
            elapsed_s=round(self.elapsed(), 3),
            epoch=self.data.epochs(self.tokens_seen),  # above 1: the corpus has repeated
            lr=self.optimizer.param_groups[0]["lr"],
            **group_lrs(self.optimizer),
            params=self.n_params,
            **memory_stats(self.device),
        )
        self._since_log = (time.perf_counter(), 0, 0)
        return m

    def elapsed(self) -> float:
        """Wall seconds of the run so far, across resumes (this process's part counted from fit())."""
        return self.elapsed_before + (0.0 if self._t0 is None else time.perf_counter() - self._t0)

    def eta(self) -> float | None:
        """Seconds to the last step at this process's pace so far (None before a step has finished)."""
        done = self.step - self._start_step
        if self._t0 is None or done <= 0:
            return None
        return (time.perf_counter() - self._t0) / done * (self.cfg.train.steps - self.step)


def _valid_targets(labels: torch.Tensor) -> int:
    """Scored targets of a batch's labels, read while they are still the loader's CPU tensor (before any copy
    to the device): the step's only host reads between log steps, and no device sync."""
    return int((labels != IGNORE_INDEX).sum())


def group_lrs(optimizer) -> dict[str, float]:
    """{"lr/<group>": lr} of every parameter group, and {"lr/<group>_new": lr} for the entries a hook (a model swap)
    marked new while they follow their own lr (the re-warmup): recorded beside `lr` (the first group's),
    flat so TensorBoard and W&B get them as scalars too."""
    out = {}
    for i, g in enumerate(optimizer.param_groups):
        name = g.get("name") or f"group{i}"
        out[f"lr/{name}"] = g["lr"]
        if g.get("lr_new") is not None:
            out[f"lr/{name}_new"] = g["lr_new"]
    return out


def _np_state() -> list:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def _np_restore(s: list) -> None:
    np.random.set_state((s[0], np.asarray(s[1], dtype=np.uint32), s[2], s[3], s[4]))
