"""Warmup-stable-decay: flat at the peak, then a linear decay to min_lr_ratio over the last decay_fraction of
the horizon; `linear_warmdown` is the same curve under ExoFormer's name."""

from __future__ import annotations

from . import Schedule, horizon, register_schedule


def decay_window(tcfg) -> tuple[int, int]:
    """(first decaying step D, decay steps): the last decay_fraction of the horizon, at least one step."""
    total = horizon(tcfg)
    decay_steps = max(int(round(total * tcfg.decay_fraction)), 1)
    return total - decay_steps, decay_steps


class WarmupStableDecay(Schedule):
    name = "wsd"
    reason = "warmup-stable-decay: flat, then linear decay over the last decay_fraction"
    reads = ("decay_fraction",)

    def anchor(self, start: int, tcfg) -> int:
        """The last step at d = 1: the baseline's last flat step D - 1, or `start` when that comes later."""
        return max(decay_window(tcfg)[0] - 1, start)

    def progress(self, step: int, start: int, tcfg) -> float:
        """0 up to the anchor, rising linearly to 1 at T_last."""
        anchor, last = self.anchor(start, tcfg), horizon(tcfg) - 1
        return 0.0 if step <= anchor else min((step - anchor) / max(last - anchor, 1), 1.0)

    def decay(self, step: int, start: int, tcfg) -> float:
        return 1.0 - self.progress(step, start, tcfg)

    def after_warmup(self, step: int, tcfg) -> float:
        # decay(step, warmup) written as this kind always computed it (bitwise the lr of earlier runs)
        decay_start, decay_steps = decay_window(tcfg)
        if step < decay_start:
            return 1.0
        progress = min((step - decay_start + 1) / decay_steps, 1.0)
        return 1.0 + (tcfg.min_lr_ratio - 1.0) * progress

    def describe(self, tcfg) -> str:
        return f", decay over the last {tcfg.decay_fraction:.0%}"


class LinearWarmdown(WarmupStableDecay):
    name = "linear_warmdown"
    reason = "flat, then linear decay over the last decay_fraction (the same curve as wsd, ExoFormer's name for it)"


register_schedule(WarmupStableDecay())
register_schedule(LinearWarmdown())
