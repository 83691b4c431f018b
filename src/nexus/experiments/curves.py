"""Loss curves, training compute and the "compute to reach a loss" measurement.

Training FLOPs per token = 3 x forward FLOPs per token (backward ~ 2 x forward). The forward count
comes from the analytic walker in `nexus.analysis.flops` when it is installed; otherwise the
documented fallback is Kaplan's 6N with N = the active parameters (nexus.analysis.compute), which
ignores attention's seq-length term.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..config import ModelConfig

FALLBACK_SOURCE = "6N fallback (N = active params)"


def active_params(model_cfg: ModelConfig) -> int:
    """Parameters one token touches (N of eq. 29), from nexus.analysis.compute."""
    from ..analysis.compute import active_params as _active

    return int(_active(model_cfg))


def train_flops_per_token(model_cfg: ModelConfig, seq_len: int) -> tuple[float, str]:
    """(training FLOPs per token, where the number came from)."""
    try:
        from ..analysis import flops as analytic
    except ImportError:
        analytic = None
    fn = getattr(analytic, "train_flops_per_token", None) if analytic is not None else None
    if fn is not None:
        return float(fn(model_cfg, seq_len)), "nexus.analysis.flops (analytic, 3 x forward)"
    return 6.0 * active_params(model_cfg), FALLBACK_SOURCE


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-write; the resumed run rewrites that step
    return rows


# Compute is spent on every input token, so curves count *processed* tokens (step x tokens per step),
# not metrics' tokens_seen, which counts only scored labels (fewer on synthetic tasks and chat data).
def val_curve(rows: list[dict], tokens_per_step: int) -> list[dict]:
    """[{step, tokens, val_loss}] in step order, one point per step (the last record wins)."""
    by_step = {}
    for r in rows:
        if "val_loss" in r and "step" in r:
            s = int(r["step"])
            by_step[s] = {"step": s, "tokens": s * tokens_per_step, "val_loss": float(r["val_loss"])}
    return [by_step[s] for s in sorted(by_step)]


def train_curve(rows: list[dict], tokens_per_step: int) -> list[dict]:
    by_step = {}
    for r in rows:
        if "loss" in r and "step" in r and not r.get("skipped") and r.get("event") is None:
            s = int(r["step"])
            by_step[s] = {"step": s, "tokens": s * tokens_per_step, "loss": float(r["loss"])}
    return [by_step[s] for s in sorted(by_step)]


def cumulative_flops(tokens: float, segments: list[dict]) -> float:
    """FLOPs spent after `tokens` training tokens, for a run made of segments
    [{"start_tokens", "flops_per_token"}] (sorted; the last segment runs to the end)."""
    total = 0.0
    for i, seg in enumerate(segments):
        end = segments[i + 1]["start_tokens"] if i + 1 < len(segments) else math.inf
        lo, hi = seg["start_tokens"], min(end, tokens)
        if hi > lo:
            total += (hi - lo) * seg["flops_per_token"]
    return total


def first_crossing(xs: list[float], losses: list[float], target: float) -> float | None:
    """Smallest x at which the piecewise-linear curve (xs, losses) first reaches loss <= target.

    None when it never does. Linear interpolation between the two bracketing points.
    """
    ys = np.asarray(losses, dtype=float)
    reached = np.flatnonzero(ys <= target)
    if reached.size == 0:
        return None
    i = int(reached[0])
    if i == 0:
        return float(xs[0])
    # the segment where the loss falls through target; np.interp wants its sample points increasing
    return float(np.interp(target, [ys[i], ys[i - 1]], [xs[i], xs[i - 1]]))


def value_at(xs: list[float], ys: list[float], x: float) -> float | None:
    """Piecewise-linear interpolation of the curve (xs, ys) at x; None outside [xs[0], xs[-1]]."""
    if not len(xs) or not xs[0] <= x <= xs[-1]:
        return None
    return float(np.interp(x, xs, ys))
