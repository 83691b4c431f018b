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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _result import print_machine  # noqa: E402

NEW = "from nexus.cli import main; main(['presets'])"
OLD = ("from nexus.models.accounting import param_count_for_config\n"
       "from nexus.presets import get_preset, names\n"
       "for n in names(): param_count_for_config(get_preset(n).model)\n")


def timed(code: str, src: str | None = None) -> float:
    env = {**os.environ, "PYTHONPATH": src} if src else None
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", default=None, metavar="SRC", help="also time the listing with PYTHONPATH=SRC")
    ap.add_argument("--no-meta", action="store_true", help="leave out the meta-build counts")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    new, old, other = [], [], []
    for r in range(args.rounds):
        new.append(timed(NEW))
        line = f"round {r + 1}: presets listing {new[-1]:.2f} s"
        if args.against:
            other.append(timed(NEW, args.against))
            line += f" | listing with {args.against} {other[-1]:.2f} s"
        if not args.no_meta:
            old.append(timed(OLD))
            line += f" | meta-build counts {old[-1]:.2f} s"
        print(line, flush=True)
    n = statistics.median(new)
    print(f"median: listing {n:.2f} s (target < 2 s) {[round(x, 2) for x in new]}")
    if other:
        a = statistics.median(other)
        print(f"median: listing with {args.against} {a:.2f} s {[round(x, 2) for x in other]}")
        print(f"RATIO listing {args.against} / listing = {a / n:.1f}x")
    if old:
        o = statistics.median(old)
        print(f"median: meta-build counts {o:.2f} s")
        print(f"RATIO meta-build / listing = {o / n:.1f}x")

if __name__ == "__main__":
    main()
