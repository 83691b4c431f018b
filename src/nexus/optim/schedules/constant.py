"""The peak lr after the warmup, no decay."""

from __future__ import annotations

from . import Schedule, register_schedule


class Constant(Schedule):
    name = "constant"
    reason = "the peak lr after warmup, no decay"
    decays = False

    def decay(self, step: int, start: int, tcfg) -> float:
        return 1.0

    def after_warmup(self, step: int, tcfg) -> float:
        return 1.0


register_schedule(Constant())
