"""A branch: a run planned whole from step 0 (its own config) that starts from another run's checkpoint at step S,
because that run trained exactly what this one would have up to S (issue 47 item 4: decays branched from one
stable-phase run at several horizons).

The branch's config is the single run it stands for; the checkpoint supplies the state at S. Two things make the
branch that single run, bit for bit, and `branch_config` holds it to both (one line refused otherwise):
  * the model: the checkpoint's. Where the checkpoint's run grew before S as this run's own growth hook plans
    (the same `train.hooks`, the growth at the hook's step), its model and growth history are taken as they are, so
    the hook sees the growth done and the re-warmup rule is rebuilt from its record; any other difference of model
    is refused (load_checkpoint would refuse its shape; a same-shape other model would be silently another run).
  * the steps before S: the seed, data, batch and numerics are the checkpoint run's, and on every step before S
    both configs give every entry the same lr multiplier (old entries: the schedule, `optim.schedule.lr_factor`;
    entries a growth marked new: its re-warmup, growth/rewarmup.py). A WSD run whose decay starts at D >= S and one
    planned over a longer horizon are equal there; a cosine over another horizon is not, and is refused.
The branch's own base lr (`train.lr`) applies from S on, as on resume (the lr-matched arms of a study move it at
the branch point). No re-plan bridge is used (train/resume.py re-plans a grown checkpoint's horizon for a
continuation of *that* run; a branch is not one).
"""

from __future__ import annotations

import copy

from ..config import ConfigError, RunConfig

# the fields that fix a run's steps before the branch point besides its lr (compared whole)
TRAJECTORY_FIELDS = ("train.seed", "train.batch_size", "train.grad_accum", "train.dtype", "data")


def _field(cfg: RunConfig, dotted: str):
    node = cfg.to_dict()
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def first_lr_difference(stored_train, train, record: dict | None, step: int) -> tuple[int, str, float, float] | None:
    """(t, which entries, stored multiplier, this run's) of the first step t < `step` where the two train configs
    give an entry a different lr multiplier under growth `record` (None: no growth), or None where every step
    agrees exactly."""
    from ..growth.rewarmup import planned_factors

    old, new = planned_factors(record)
    rw = isinstance((record or {}).get("rewarmup"), dict)
    for t in range(step):
        for which, f in (("entries", old), ("new entries", new)) if rw else (("entries", old),):
            a, b = f(t, stored_train), f(t, train)
            if a != b:
                return t, which, a, b
    return None


def branch_config(ckpt, cfg: RunConfig, flag: str = "--start-from") -> tuple[RunConfig, list[str]]:
    """(the config a run planned as `cfg` trains with from checkpoint `ckpt`, notes). ConfigError (one line)
    where the checkpoint is not this run's state at its step (module docstring)."""
    from ..checkpoint import load_trainer_state, read_config

    stored = read_config(ckpt, flag=flag)
    step = int((load_trainer_state(ckpt, with_optimizer=False) or {}).get("step", 0))
    where = f"{flag}={str(ckpt)!r} (step {step})"
    for f in TRAJECTORY_FIELDS:
        if _field(stored, f) != _field(cfg, f):
            raise ConfigError(
                f"{where}: its run has {f}={_field(stored, f)!r}, this run {_field(cfg, f)!r}: the branch would not "
                f"be this run (valid: a checkpoint of a run with the same {f})"
            )
    out = copy.deepcopy(cfg)
    notes = []
    done = stored.growth_history[len(cfg.growth_history) :]
    if stored.growth_history[: len(cfg.growth_history)] != cfg.growth_history:
        raise ConfigError(f"{where}: its growth history is not this run's (valid: a checkpoint of this run's model)")
    if done:
        planned = cfg.train.hook("growth")
        at = (planned or {}).get("at")
        if stored.train.hooks != cfg.train.hooks or [r.get("step") for r in done] != [at]:
            raise ConfigError(
                f"{where}: its model grew at step(s) {[r.get('step') for r in done]}, and this run's growth hook "
                f"is {planned!r} (valid: a checkpoint of a run with this run's train.hooks, grown by them)"
            )
        out.model, out.growth_history = copy.deepcopy(stored.model), copy.deepcopy(stored.growth_history)
        notes.append(f"branched at step {step}: the model as grown at step {at} by this run's growth hook")
    elif stored.to_dict()["model"] != cfg.to_dict()["model"]:
        raise ConfigError(f"{where}: its model is not this run's (valid: a checkpoint of this run's model)")
    record = out.growth_history[-1] if out.growth_history else None
    diff = first_lr_difference(stored.train, out.train, record, step)
    if diff is not None:
        t, which, a, b = diff
        raise ConfigError(
            f"{where}: at step {t} its run gave the {which} lr multiplier {a!r} and this run's schedule gives {b!r}: "
            f"the branch would not be this run (valid: a checkpoint taken before this run's schedule departs from "
            f"that run's, e.g. a WSD decay starting at or after step {step})"
        )
    return out, notes


__all__ = ["branch_config", "first_lr_difference"]
