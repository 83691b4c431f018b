"""`nexus presets` start-up: the listing as a fresh process (arithmetic counts, torch never imported)
against the same listing with counts from a meta-device build of every preset (the old path),
alternated round after round.

    python benchmarks/presets_speed.py [--rounds 3]

Target: the listing under 2 s wall. Prints each round's seconds and the RATIO old/new.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

NEW = "from nexus.cli import main; main(['presets'])"
OLD = ("from nexus.models.accounting import param_count_for_config\n"
       "from nexus.presets import get_preset, names\n"
       "for n in names(): param_count_for_config(get_preset(n).model)\n")


def timed(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    new, old = [], []
    for r in range(args.rounds):
        new.append(timed(NEW))
        old.append(timed(OLD))
        print(f"round {r + 1}: presets listing {new[-1]:.2f} s | meta-build counts {old[-1]:.2f} s")
    n, o = statistics.median(new), statistics.median(old)
    print(f"median: listing {n:.2f} s (target < 2 s) | meta-build counts {o:.2f} s")
    print(f"RATIO meta-build / listing = {o / n:.1f}x")


if __name__ == "__main__":
    main()
