"""Trainer hooks: everything the training loop does besides taking optimizer steps.

Modelled on OLMo-core's trainer callbacks. A hook subclasses `Hook` and overrides the events it needs;
each gets the trainer first. The trainer calls every hook, in descending `priority` (ties: the order
they were given), at these events:

    on_fit_start(trainer)                        fit() begins: \
before the run directory is written or a step taken (checks)
    on_checkpoint_load(trainer)                  a checkpoint's state was restored (after load_state_dict)
    on_step_start(trainer, step)                 before the step's forward passes
    before_optimizer_step(trainer, step)         gradients reduced and clipped, before optimizer.step
    after_optimizer_step(trainer, step)          after optimizer.step, gradients still present
    on_log(trainer, step, metrics)               a logged step's record (host floats), already written
    on_step_end(trainer, step, metrics)          after each step; `step` counts it (1 after the first)
    on_eval(trainer, step, val_loss)             after a validation pass (periodic and final)
    on_checkpoint_save(trainer, path)            after a checkpoint was written
    on_fit_end(trainer, result)                  after the last step: add to / read the result dict

`needs_host_metrics(trainer, step)` asks for the step's numbers on the host outside log steps (they stay
on the device otherwise: reading them waits for the step). A hook with a `state_key` has `state_dict()`
(None: nothing to keep) saved in every checkpoint's trainer_state.pt (plain tensors, numbers, lists,
dicts: it is loaded weights_only); on resume `load_state_dict(state)` gets it back, None when the
checkpoint holds none for it, before `on_checkpoint_load`.

A run config turns hooks on by kind: `train.hooks: [{kind: growth, at: 150, spec: {...}}, ...]`. A kind
is a Hook subclass registered in `HOOK_KINDS` by the file that defines it, anywhere in nexus/train,
nexus/growth or nexus/experiments or in a plugin (found by name: a new kind is a new file). Its options
are a typed dataclass, `Options` (torch-free, each field an `option(default, reason)`, rules beyond the
types in its `check`), parsed from the entry like a config section: a wrong type or an unknown option is
one ConfigError naming `train.hooks[i].<option>`. `from_options` builds the hook from them, `check`
refuses a config the hook cannot serve (before anything is written), and the trainer builds them itself
(`configured_hooks`), so a configured feature never depends on the caller remembering its hook. A kind
may also be implied by the config without an entry (`implied_by`: a grown model needs its re-warmup back
on resume). A hook's saved state is its own: the format of `state_dict` is defined by its class only.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import typing

from ..config import ConfigError, from_dict
from ..plugins import Registry


class Hook:
    """Base class of trainer hooks: every event does nothing until overridden."""

    # Higher runs first. The built-in writer, evaluation, sampling and checkpointing run before the
    # default 0 (a hook sees the step record written and the final result filled in), the console after.
    priority = 0
    state_key: str | None = None  # where state_dict() is kept in trainer_state.pt (None: stateless)
    Options: typing.ClassVar[type | None] = None  # a registered kind's options dataclass (None: it takes none)

    @classmethod
    def from_config(cls, entry: dict, cfg, where: str) -> Hook:
        """A registered kind's hook from its `train.hooks` entry ({kind, **options}); `where` names the
        entry in errors."""
        return cls.from_options(parse_hook_options(cls, entry, cfg, where), cfg, where)

    @classmethod
    def from_options(cls, options, cfg, where: str) -> Hook:
        """The hook from its parsed options (None: a kind without options); by default the options'
        fields are its keyword arguments."""
        if options is None:
            return cls()
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)})

    @classmethod
    def implied_by(cls, cfg) -> bool:
        """For a registered kind: whether this run config needs one even without a `train.hooks` entry."""
        return False

    def check(self, cfg) -> None:
        """Raise ConfigError when this hook cannot serve `cfg`; runs when the trainer is built."""

    def state_dict(self) -> dict | None:
        return None

    def load_state_dict(self, state: dict | None) -> None:
        pass

    def needs_host_metrics(self, trainer, step: int) -> bool:
        return False

    def on_fit_start(self, trainer) -> None:
        pass

    def on_checkpoint_load(self, trainer) -> None:
        pass

    def on_step_start(self, trainer, step: int) -> None:
        pass

    def before_optimizer_step(self, trainer, step: int) -> None:
        pass

    def after_optimizer_step(self, trainer, step: int) -> None:
        pass

    def on_log(self, trainer, step: int, metrics: dict) -> None:
        pass

    def on_step_end(self, trainer, step: int, metrics: dict) -> None:
        pass

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        pass

    def on_checkpoint_save(self, trainer, path) -> None:
        pass

    def on_fit_end(self, trainer, result: dict) -> None:
        pass


# Hook kinds a run config can ask for. Their modules live in these packages (and plugins), imported on
# the first lookup by name (the trainer never imports them: growth and experiments sit above it).
HOOK_KINDS: Registry[type[Hook]] = Registry("train.hooks[].kind", ("nexus.train", "nexus.growth", "nexus.experiments"))


def parse_hook_options(kind: type[Hook], entry: dict, cfg, where: str):
    """The options of a `train.hooks` entry as `kind.Options` (None for a kind without options): types
    coerced as a config section's are, an unknown option or a broken rule one ConfigError naming it."""
    given = {k: v for k, v in entry.items() if k != "kind"}
    names = [f.name for f in dataclasses.fields(kind.Options)] if kind.Options is not None else []
    unknown = sorted(set(given) - set(names))
    if unknown:
        valid = (
            f"options of hook kind {entry['kind']!r}: {', '.join(names)}"
            if names
            else f"hook kind {entry['kind']!r} takes no options"
        )
        raise ConfigError(f"{where}.{unknown[0]}={given[unknown[0]]!r} (valid: {valid})")
    if kind.Options is None:
        return None
    options = from_dict(kind.Options, given, f"{where}.")
    errors: list[str] = []
    check = getattr(options, "check", None)
    if check is not None:
        check(errors, where, cfg)
    if errors:
        raise ConfigError("; ".join(errors))
    return options


def configured_hooks(cfg, present=(), built=None) -> list[Hook]:
    """The hooks `cfg` turns on (its `train.hooks` entries, then the kinds it implies and `present` lacks),
    built and checked: a bad entry is a ConfigError before anything is written. An entry of a kind the
    caller also passed in `present` is refused: one of the two would be ignored. built: what an earlier
    call made from this same config (the front door's, cli/train.py), taken as it is instead of parsing
    and checking the entries again."""
    kinds = []
    for i, entry in enumerate(cfg.train.hooks):
        where = f"train.hooks[{i}]"
        kind = HOOK_KINDS.get(entry["kind"]) if isinstance(entry, dict) else None
        if kind is None:
            raise ConfigError(
                f"{where}={entry!r} (valid: a mapping with a kind, e.g. {{kind: growth, at: 150, spec: ...}})"
            )
        if kind in kinds:
            raise ConfigError(f"{where}: a second {entry['kind']!r} hook (valid: one entry per kind)")
        if any(type(h) is kind for h in present):
            raise RuntimeError(
                f"{where} configures a {entry['kind']!r} hook and the trainer was given one too (valid: one of them)"
            )
        kinds.append(kind)
    if built is not None:
        return [h for h in built if not any(type(p) is type(h) for p in present)]
    hooks = [
        kind.from_config(entry, cfg, f"train.hooks[{i}]") for i, (kind, entry) in enumerate(zip(kinds, cfg.train.hooks))
    ]
    hooks += [
        kind()
        for _, kind in HOOK_KINDS.items()
        if kind.implied_by(cfg) and not any(type(h) is kind for h in [*present, *hooks])
    ]
    for h in hooks:
        h.check(cfg)
    return hooks


# ----------------------------------------------------------------------------- built-in hooks
class MetricsWriter(Hook):
    """Writes each logged step's record (metrics.jsonl and the chosen sinks) before any hook reads it."""

    priority = 100

    def on_log(self, trainer, step, metrics):
        trainer.log(metrics)


class Evaluation(Hook):
    """Validation loss every train.eval_every steps and at the end of the run (the final record)."""

    priority = 30

    def needs_host_metrics(self, trainer, step):
        return trainer.due(trainer.cfg.train.eval_every)

    def on_step_end(self, trainer, step, metrics):
        if trainer.due(trainer.cfg.train.eval_every):
            val = trainer.evaluate()
            trainer.log(
                {
                    "step": step,
                    "val_loss": val,
                    "tokens_seen": trainer.tokens_seen,
                    "elapsed_s": round(trainer.elapsed(), 3),
                }
            )
            trainer.say(f"step {step}: train loss {metrics['loss']:.4f} | val loss {val:.4f}")
            trainer.call_hooks("on_eval", step, val)

    def on_fit_end(self, trainer, result):
        val = trainer.evaluate()
        trainer.log(
            {
                "step": trainer.step,
                "val_loss": val,
                "tokens_seen": trainer.tokens_seen,
                "elapsed_s": round(trainer.elapsed(), 3),
                "final": True,
            }
        )
        result.update(val_loss=val, val_ppl=math.exp(min(val, 50)))
        trainer.call_hooks("on_eval", trainer.step, val)


class Sampling(Hook):
    """A short generation every train.sample_every steps and at the end (under FSDP2 every rank runs the
    identical generation: it gathers weights)."""

    priority = 20

    def on_step_end(self, trainer, step, metrics):
        if trainer.due(trainer.cfg.train.sample_every) and trainer.writes_checkpoints:
            trainer.say(f"sample @ {step}: {trainer.sample()!r}")

    def on_fit_end(self, trainer, result):
        if trainer.writes_checkpoints:
            result["sample"] = trainer.sample()


class Checkpointing(Hook):
    """A step checkpoint every train.save_every steps (keeping train.keep_last), the final one at the end."""

    priority = 10

    def on_step_end(self, trainer, step, metrics):
        if trainer.due(trainer.cfg.train.save_every) and trainer.writes_checkpoints:
            trainer.save_periodic()

    def on_fit_end(self, trainer, result):
        if trainer.writes_checkpoints:
            result["checkpoint"] = str(trainer.save(trainer.out_dir / "checkpoint"))


class ConsoleProgress(Hook):
    """A tqdm bar on a terminal, else a plain line every ~10% of the run; skipped steps; the final summary."""

    priority = -100

    def __init__(self):
        self.bar = None

    def on_step_start(self, trainer, step):
        if self.bar is None:
            from tqdm import tqdm

            off = not trainer.is_main or trainer.quiet or not sys.stderr.isatty()
            self.bar = tqdm(total=trainer.cfg.train.steps, initial=step, disable=off, dynamic_ncols=True, desc="train")

    def on_log(self, trainer, step, m):
        tc = trainer.cfg.train
        self.bar.set_postfix(loss=f"{m['loss']:.3f}", lr=f"{m['lr']:.2e}", tok_s=f"{m['processed_tokens_per_s']:.0f}")
        if self.bar.disable and step % max(tc.steps // 10, tc.log_every) < tc.log_every:
            # no terminal (CI, pipes, log files): a plain line that carries what the bar would show
            eta = trainer.eta()
            trainer.say(
                f"step {step}/{tc.steps} | loss {m['loss']:.4f} | lr {m['lr']:.2e} | {throughput(m)}"
                + (f" | epoch {m['epoch']:.3f}" if "epoch" in m else "")
                + f" | {clock(m['elapsed_s'])} elapsed"
                + ("" if eta is None else f", ETA {clock(eta)}")
            )
        if m.get("skipped_since_last_log"):
            trainer.say(
                f"step {step}: {m['skipped_since_last_log']} step(s) with a non-finite loss or gradient "
                f"norm skipped since the last log ({m['nonfinite_total']} so far)"
            )

    def on_step_end(self, trainer, step, metrics):
        self.bar.update(1)

    def on_fit_end(self, trainer, result):
        if self.bar is not None:
            self.bar.close()
        if not trainer.is_main:
            return
        trainer.say(
            f"final: val loss {result['val_loss']:.4f} (ppl {result['val_ppl']:.2f}) after {trainer.step} "
            f"steps, {trainer.tokens_seen:,} tokens"
        )
        if result.get("sample"):
            trainer.say(f"sample: {result['sample']!r}")
        trainer.say(f"checkpoint: {result['checkpoint']}")


class CollectiveTimeouts(Hook):
    """torchrun: the long collective timeout through the first step and around every checkpoint save,
    the short one in steady-state training (train/distributed.py). Before the checkpointing hook: a save
    step makes every rank patient, and the next step starts with a barrier that waits for rank 0's save."""

    priority = 40

    def __init__(self):
        self.steady = False
        self.saving = False

    def on_step_start(self, trainer, step):
        if self.saving:
            from . import distributed as D

            D.barrier()
            D.enter_steady_state()
            self.saving = False

    def on_step_end(self, trainer, step, metrics):
        if trainer.world == 1:
            return
        from . import distributed as D

        if not self.steady:  # the first step (and its compilation) is done
            D.enter_steady_state()
            self.steady = True
        if trainer.due(trainer.cfg.train.save_every):
            D.be_patient()
            self.saving = True

    def on_fit_end(self, trainer, result):
        if trainer.world > 1:
            from . import distributed as D

            D.be_patient()  # the final evaluation, sample and save


def throughput(m: dict) -> str:
    """Tokens per second, saying which tokens: every processed input position, and the loss-bearing ones."""
    proc, scored = m["processed_tokens_per_s"], m["tokens_per_s"]
    if abs(proc - scored) <= 0.005 * max(proc, 1.0):
        return f"{proc:,.0f} tok/s (processed; all bear loss)"
    return f"{proc:,.0f} tok/s processed, {scored:,.0f} loss-bearing"


def clock(seconds: float) -> str:
    """12s, 3m05s, 1h02m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def builtin_hooks() -> list[Hook]:
    return [MetricsWriter(), Evaluation(), Sampling(), Checkpointing(), ConsoleProgress(), CollectiveTimeouts()]
