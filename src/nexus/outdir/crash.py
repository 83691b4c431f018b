"""Named crash points for the kill tests: `NEXUS_CRASH_AT=NAME` (or `NAME:N`, the Nth time that point is
reached) makes the process exit at once with code 137, as a `kill -9` there would. A point reached for a
named output can be aimed at it: `NAME@WHAT` (e.g. `file-after-rename@loss_curve.csv`). The tests inject
kills at exact moments this way instead of relying on timing; unset, a point costs one dict lookup.

`NEXUS_CRASH_TRACE=FILE` appends one line per point reached (`NAME` or `NAME@WHAT`) to FILE, so a harness
(tools/adversarial.py) can find which command reaches which point and aim a kill at each."""

from __future__ import annotations

import os

_HITS: dict[str, int] = {}


def crash_point(name: str, what: str | None = None) -> None:
    trace = os.environ.get("NEXUS_CRASH_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{name}@{what}\n" if what else f"{name}\n")
    want = os.environ.get("NEXUS_CRASH_AT")
    if not want:
        return
    point, _, nth = want.partition(":")
    if point != name and (what is None or point != f"{name}@{what}"):
        return
    name = point
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] >= int(nth or 1):
        os._exit(137)
