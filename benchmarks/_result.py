"""The one machine-readable line each speed benchmark ends with, so `speed_suite.py` can gather every
headline figure from one invocation without scraping prose.

    RESULT {"name": "ternary decode vs fp32", "value": 2.93, "range": [2.73, 2.96], "unit": "x", ...}
"""
from __future__ import annotations

import json
import statistics

PREFIX = "RESULT "


def emit(name: str, values: list[float], target: str, unit: str = "x", met: bool | None = None, **raw) -> dict:
    """Print the median of `values` (per-round ratios or measurements) with their range, the target as
    text, whether it is met (None: a figure to report, no target) and any raw numbers worth keeping."""
    rec = {"name": name, "value": round(statistics.median(values), 4), "range": [round(min(values), 4),
           round(max(values), 4)], "rounds": len(values), "unit": unit, "target": target, "met": met, **raw}
    print(PREFIX + json.dumps(rec), flush=True)
    return rec


def parse(text: str) -> list[dict]:
    return [json.loads(line[len(PREFIX):]) for line in text.splitlines() if line.startswith(PREFIX)]
