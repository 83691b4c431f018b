"""Learning-rate schedule kinds (`train.schedule`): each is one object that *is* its shape, registered with
`register_schedule` in its own module of this package (torch-free, so a config is checked without torch).

A schedule is a multiplier of the peak lr. Every kind shares the linear warmup (`factor`), then gives
  * `after_warmup(step, tcfg)`: the multiplier after the warmup, ending at `tcfg.min_lr_ratio` on the last step
    of the horizon (T_last = horizon - 1; horizon = train.schedule_steps, or train.steps when 0) and staying there;
  * `decay(step, start, tcfg)`: the schedule's decay *shape* d, 1 up to `start` (and through the kind's stable
    phase), falling to 0 at T_last. SPARKLING's re-warmup (growth/rewarmup.py) runs freshly grown entries on it
    from the end of their re-warmup, so the new entries end where the old ones do, under every kind.
A new kind writes `decay` only: `after_warmup` is then `floor + (1 - floor) * decay(step, warmup_steps)`. The
built-in kinds also write `after_warmup` as the expression they always computed, so their lr stays bitwise
what it was (the two are equal up to rounding: tests/test_schedule_kinds.py holds both to the formulas).
`lr_factor`, `set_lr` (optim/schedule.py), the re-warmup and the progressive experiment's description all
read this table; nothing else names a kind. An unknown name, or one declared without a shape, is refused at
validation in one line (config_base.choice with implemented=True).
"""

from __future__ import annotations

from ...config_base import declare_choice

SETTING = "train.schedule"


class Schedule:
    """One `train.schedule` kind. Subclass, set `name` and `reason`, write `decay`, and register an instance."""

    name: str = ""
    reason: str = ""  # one line, listed by `nexus config` beside the setting
    decays: bool = True  # False: the lr stays at the peak after the warmup (no floor is reached)
    reads: tuple[str, ...] = ()  # the train fields its shape reads besides steps, warmup and min_lr_ratio

    def decay(self, step: int, start: int, tcfg) -> float:
        """d(step): 1 for step <= start (and through a stable phase), non-increasing, 0 at T_last and after."""
        raise NotImplementedError(f"schedule {self.name!r} has no decay shape")

    def after_warmup(self, step: int, tcfg) -> float:
        """The multiplier of the peak lr after the warmup: from 1 to tcfg.min_lr_ratio along the decay shape."""
        floor = tcfg.min_lr_ratio
        return floor + (1.0 - floor) * self.decay(step, tcfg.warmup_steps, tcfg)

    def factor(self, step: int, tcfg) -> float:
        """Multiplier for optimizer step `step` (0-based): linear warmup over tcfg.warmup_steps, then
        `after_warmup`. Past the horizon it stays at its final value (a run resumed with more steps continues at
        the floor instead of jumping back up)."""
        warm = tcfg.warmup_steps
        if warm and step < warm:
            return (step + 1) / warm
        return self.after_warmup(step, tcfg)

    def describe(self, tcfg) -> str:
        """What the run's description adds for this kind (e.g. its decay window); empty when nothing."""
        return ""


def horizon(tcfg) -> int:
    """The step count the schedule is planned over (train.schedule_steps, or train.steps when 0)."""
    return tcfg.schedule_steps or tcfg.steps


def register_schedule(schedule: Schedule) -> Schedule:
    """Declare `schedule.name` valid for train.schedule, with the object as its implementation."""
    if not isinstance(schedule, Schedule) or not schedule.name:
        raise RuntimeError(f"register_schedule: {schedule!r} is not a named Schedule")
    declare_choice(SETTING, schedule.name, schedule.reason, implementation=schedule)
    return schedule


def schedules() -> dict[str, Schedule]:
    """Every registered kind, name -> Schedule (importing this package's modules and the plugins first)."""
    from ...config_base import declared_choices

    return {k: c.implementation for k, c in declared_choices(SETTING, __name__).items() if c.implementation is not None}


_CACHE: dict[str, Schedule] = {}  # looked up once per name: lr_factor runs every step


def schedule_of(tcfg) -> Schedule:
    """The Schedule `tcfg.schedule` names (a ConfigError line for a name without one)."""
    kind = _CACHE.get(tcfg.schedule)
    if kind is None:
        table = schedules()
        if tcfg.schedule not in table:
            from ...errors import ConfigError

            raise ConfigError(f"train.schedule={tcfg.schedule!r} (valid: {'|'.join(table)})")
        kind = _CACHE[tcfg.schedule] = table[tcfg.schedule]
    return kind
