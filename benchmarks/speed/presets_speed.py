"""`nexus presets` start-up: the listing as a fresh process (arithmetic counts, torch never imported)
against the same listing with counts from a meta-device build of every preset (the old path),
alternated round after round.

    python benchmarks/speed/presets_speed.py [--rounds 3] [--against SRC] [--no-meta]

Target: the listing under 2 s wall. Prints each round's seconds and the RATIO old/new. --against SRC also
times the listing of another checkout's `src` (PYTHONPATH=SRC) in the same rounds, e.g. a revision whose
listing imported torch; --no-meta leaves out the meta-build side (minutes per round on a loaded machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402

NEW = "from nexus.cli import main; main(['presets'])"
OLD = (
    "from nexus.models.accounting import param_count_for_config\n"
    "from nexus.presets import get_preset, names\n"
    "for n in names(): param_count_for_config(get_preset(n).model)\n"
)


def listing(code: str, src: str | None = None):
    """A fresh process running `code` (PYTHONPATH=src if given), for the harness to time."""
    env = {**os.environ, "PYTHONPATH": src} if src else None
    return lambda: subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", default=None, metavar="SRC", help="also time the listing with PYTHONPATH=SRC")
    ap.add_argument("--no-meta", action="store_true", help="leave out the meta-build counts")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    sides = {"presets listing": listing(NEW)}
    if args.against:
        sides[f"listing with {args.against}"] = listing(NEW, args.against)
    if not args.no_meta:
        sides["meta-build counts"] = listing(OLD)
    # the sides alternate who goes first, round after round (no warm-up round: each is a fresh process)
    times = alternate(
        sides,
        args.rounds,
        warmup=0,
        after_round=lambda r, t: print(
            f"round {r + 1}: " + " | ".join(f"{k} {v:.2f} s" for k, v in t.items()), flush=True
        ),
    )
    new = times["presets listing"]
    n = statistics.median(new)
    print(f"median: listing {n:.2f} s (target < 2 s) {[round(x, 2) for x in new]}")
    if args.against:
        other = times[f"listing with {args.against}"]
        a = statistics.median(other)
        print(f"median: listing with {args.against} {a:.2f} s {[round(x, 2) for x in other]}")
        print(f"RATIO listing {args.against} / listing = {a / n:.1f}x")
    if not args.no_meta:
        o = statistics.median(times["meta-build counts"])
        print(f"median: meta-build counts {o:.2f} s")
        print(f"RATIO meta-build / listing = {o / n:.1f}x")
        emit(
            "preset counts by meta-device builds vs the `nexus presets` listing",
            ratios(times, "meta-build counts", "presets listing"),
            "report",
            meta_build_s=times["meta-build counts"],
        )
    emit("`nexus presets` listing, a fresh process", new, "< 2 s", unit="s", met=n < 2)


if __name__ == "__main__":
    main()
