"""Growth inside a training run, as a trainer hook: the trainer knows nothing about growth.

A run config turns it on with a `train.hooks` entry, `{kind: growth, at: 150, spec: {family: width,
hidden: 128}}`, and the trainer builds it (the spec is parsed once, here); `nexus train --grow-at
--growth` writes that entry. At step `at` (`on_step_start`) the hook grows the model with its spec and
hands the grown model, its optimizer (state transplanted), the re-warmup rule and the grown config to
`trainer.swap`, the one way a hook replaces them; the trainer re-wraps DDP/FSDP2 and keeps its step, data
cursor and RNG. A grown model's config implies the hook even without an entry: on resume
(`on_checkpoint_load`) it rebuilds the re-warmup rule the checkpoint's growth record asks for. When the
trainer is built (`check`) it checks the spec against the model, so a bad spec of any family fails
before any training step. After a growth it logs the post-growth diagnostics (`on_log`); their monitor
(probe ids, pre-growth RMS, copy sources) is saved with every checkpoint (`state_dict`) and rebuilt on
resume, so a resumed run logs the values the uninterrupted run would have.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ..config import ConfigError, option
from ..train.hooks import HOOK_KINDS, Hook
from .generic_grow import grow, jsonable
from .registry import parse_growth_spec
from .spec import GrowthSpec


def rewarmup_rule(cfg):
    """The per-parameter lr rule a (grown) run's growth history asks for: the newest growth record with a
    re-warmup or a re-planned horizon (growth/rewarmup.py), else None (every entry on the baseline schedule)."""
    rec = next((r for r in reversed(cfg.growth_history) if r.get("rewarmup") or r.get("lr_replan")), None)
    if rec is None:
        return None
    from .rewarmup import make_rewarmup

    return make_rewarmup(rec)


def already_grown(cfg, step: int) -> bool:
    return any(rec.get("step") == step for rec in cfg.growth_history)


@dataclass
class GrowthOptions:
    """The options of a `{kind: growth}` entry in train.hooks."""

    at: int = option(0, "the step at which the model grows (0: never)")
    spec: dict | None = option(None, "the growth spec, e.g. {family: width, hidden: 128} (`nexus grow --help`)")

    def check(self, errors: list[str], where: str, cfg) -> None:
        at, steps = self.at, cfg.train.steps
        if not 0 <= at < steps:
            errors.append(
                f"{where}.at={at!r} (valid: the step at which the model grows, below train.steps "
                f"({steps}), or 0 for no growth)"
            )
        elif at and not self.spec:
            errors.append(
                f"{where}.spec is missing (valid: a growth spec mapping, e.g. {{family: width, hidden: 128}})"
            )


@HOOK_KINDS.register("growth")
class GrowthHook(Hook):
    """Grows the trainer's model at step `at`; restores the re-warmup rule of a grown run on resume."""

    state_key = "growth"  # where the trainer keeps state_dict() in trainer_state.pt
    Options = GrowthOptions

    def __init__(self, at: int = 0, spec: GrowthSpec | None = None):
        self.at, self.spec = at, spec  # grow at step `at` (0: never) with the parsed spec
        self.monitor = None  # PostGrowthMonitor of the latest growth (in this process or restored on resume)
        self.monitor_growths = 0  # len(growth_history) when the monitor was built: it belongs to that growth
        self.report: dict | None = None
        self.loaded: dict | None = None  # the state a resumed checkpoint held for this hook
        self.idle_note: str | None = None  # a configured spec that never applies (at 0): said at start, not silent
        self.checked_model = None  # the model config `spec` was checked against (check)

    @classmethod
    def from_options(cls, options: GrowthOptions, cfg, where: str) -> GrowthHook:
        at, spec = options.at, options.spec or None
        hook = cls(at, parse_growth_spec(spec, f"{where}.spec") if spec is not None else None)
        if not at and spec is not None:  # kept, not refused: an upgraded train.grow_at 0 + train.growth is this entry
            hook.idle_note = (
                f"{where} has a spec but at=0: this run never grows (valid: at N with 0 < N < "
                f"train.steps ({cfg.train.steps}) to grow at step N)"
            )
        return hook

    @classmethod
    def implied_by(cls, cfg) -> bool:
        return bool(cfg.growth_history)  # a grown model: its re-warmup and monitor come back on resume

    def pending(self, cfg) -> bool:
        return bool(self.at) and not already_grown(cfg, self.at)

    def check(self, cfg) -> None:
        if self.pending(cfg):
            self.spec.applies_to(cfg.model)  # before the run directory is written and before step 0
            self.checked_model = copy.deepcopy(cfg.model)  # growing that model, grow() need not check again

    def load_state_dict(self, state: dict | None) -> None:
        self.loaded = state

    def state_dict(self) -> dict | None:
        if self.monitor is None:
            return None
        return self.saved_state(self.monitor, self.monitor_growths)

    @staticmethod
    def saved_state(monitor, n_growths: int) -> dict:
        """What this hook keeps in trainer_state.pt: the post-growth monitor of growth number `n_growths`
        (also written by `nexus grow` into a grown checkpoint, so its continued run logs the diagnostics)."""
        return {"n_growths": n_growths, "monitor": monitor.state_dict()}

    def on_fit_start(self, trainer) -> None:
        cfg = trainer.cfg
        if self.idle_note:
            trainer.notes.append(self.idle_note)
        if self.pending(cfg) and trainer.step > self.at:  # a resumed run past its growth step would never grow
            raise ConfigError(
                f"growth at step {self.at} (--grow-at / train.hooks) but the run resumes at step "
                f"{trainer.step}, past it, so it would never grow (valid: --grow-at N with "
                f"{trainer.step} <= N < train.steps ({cfg.train.steps}); at {trainer.step} it grows at the "
                "resumed run's first step)"
            )
        if self.pending(cfg):  # the spec was checked against the model when the trainer was built
            record = {"step": self.at, "rewarmup": getattr(self.spec, "rewarmup", None)}
        elif cfg.growth_history:
            record = cfg.growth_history[-1]
        else:
            return
        from .rewarmup import lr_plan

        # the lr the run will use around its growth, before any step: a schedule that ended is seen now
        plan, at_floor = lr_plan(cfg.train, trainer.step, record)
        trainer.say(plan)
        if at_floor:
            trainer.say(
                f"note: the lr stays at its floor (train.min_lr_ratio={cfg.train.min_lr_ratio} x lr) for every "
                f"remaining step: the schedule's horizon ended (valid: --train.schedule_steps N to re-plan it)"
            )

    def on_checkpoint_load(self, trainer) -> None:
        trainer.swap(lr_rule=rewarmup_rule(trainer.cfg))
        self.monitor, n = None, len(trainer.cfg.growth_history)
        if not n:
            return
        st = self.loaded
        if st is None or (isinstance(st, dict) and st.get("n_growths") != n):  # older, or grown since (`nexus grow`)
            trainer.notes.append(
                "the checkpoint holds no post-growth monitor for its latest growth (written before "
                "nexus saved it, or grown outside training): symmetry_lock_* and rms_ratio_* are "
                "not logged after this resume"
            )
            return
        from ..checkpoint import CheckpointError
        from .diagnostics import PostGrowthMonitor

        try:
            self.monitor = PostGrowthMonitor.from_state_dict(st["monitor"])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointError(
                f"--resume={str(trainer.resumed_from)!r}: the post-growth monitor state in its "
                f"trainer_state.pt is malformed ({type(e).__name__}: {str(e)[:100]}) (valid: a "
                "state written by GrowthHook.state_dict)"
            ) from None
        self.monitor_growths = n

    def on_step_start(self, trainer, step: int) -> None:
        if step == self.at and self.pending(trainer.cfg):
            self.report = self.grow(trainer, self.spec)

    def on_log(self, trainer, step: int, metrics: dict) -> None:
        if self.monitor is not None:
            self.monitor(trainer, step, metrics)

    def grow(self, trainer, spec) -> dict:
        """Grow the trainer's model now, carrying optimizer state, schedule and RNG. Returns the report."""
        rng = torch.get_rng_state()
        # Under FSDP2 the model and optimizer state are gathered whole on every rank first; the growth
        # itself is the single-process code, and trainer.swap shards the grown model again.
        old_model, old_state = trainer.full_model_and_optimizer_state()
        new_model, new_cfg, new_opt, result = grow(
            old_model,
            trainer.cfg,
            spec,
            old_state,
            trainer.step,
            checked_against=self.checked_model if spec is self.spec else None,
        )
        torch.set_rng_state(rng)  # growth's random init must not shift the training RNG stream
        from .diagnostics import monitor_after_growth

        batch = next(iter(trainer.data.val_batches(1, trainer.cfg.train.batch_size)))
        self.monitor, rms_report = monitor_after_growth(
            old_model, new_model, trainer.cfg.model.max_seq_len, new_cfg.model, result.param_maps, batch
        )
        result.report.update(rms_report)
        self.monitor_growths = len(new_cfg.growth_history)
        trainer.swap(new_model, new_opt, lr_rule=rewarmup_rule(new_cfg), cfg=new_cfg)
        trainer.log({"step": trainer.step, "event": "growth", **jsonable(result.report)})
        from .report import growth_summary

        params_before = sum(p.numel() for p in old_model.parameters())
        trainer.say(
            growth_summary(
                trainer.step,
                new_cfg.growth_history[-1],
                result.report,
                params_before,
                sum(p.numel() for p in new_model.parameters()),
            )
        )
        return result.report


def grow_in_training(trainer, spec) -> dict:
    """Grow `trainer`'s model now with `spec` (outside a configured growth step, e.g. a benchmark that resumes a
    checkpoint and grows it): the trainer's GrowthHook (added if missing) keeps the post-growth diagnostics.
    Returns the report."""
    hook = next((h for h in trainer.hooks if isinstance(h, GrowthHook)), None)
    if hook is None:
        hook = GrowthHook()
        trainer.add_hook(hook)
    return hook.grow(trainer, spec)


__all__ = ["GrowthHook", "grow_in_training", "rewarmup_rule"]
