"""Cosine decay from the peak to min_lr_ratio x peak over the horizon after the warmup (SPARKLING App. B.2)."""

from __future__ import annotations

import math

from . import Schedule, horizon, register_schedule


class Cosine(Schedule):
    name = "cosine"
    reason = "cosine decay to min_lr_ratio x lr over the horizon"

    def decay(self, step: int, start: int, tcfg) -> float:
        # psi((step - start) / (T_last - start)), psi(x) = (1 + cos(pi x)) / 2 (SPARKLING eq. 28's window)
        span = max(horizon(tcfg) - 1 - start, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(max(step - start, 0) / span, 1.0)))

    def after_warmup(self, step: int, tcfg) -> float:
        # decay(step, warmup) written as this kind always computed it (bitwise the lr of earlier runs)
        total, warm, floor = horizon(tcfg), tcfg.warmup_steps, tcfg.min_lr_ratio
        span = max(
            total - warm - 1, 1
        )  # the last step sits on the floor (with one step after the warmup, that step is the peak)
        progress = min(max(step - warm, 0) / span, 1.0)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


register_schedule(Cosine())
