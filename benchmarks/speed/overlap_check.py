"""What the train/validation overlap check (data/overlap.py) costs at a run's start, and what it finds.

    python benchmarks/speed/overlap_check.py --data stdlib [--cache-dir DIR] [--rounds 3]

Builds the run's data as `nexus train --data SOURCE` would (byte tokenizer, the cache), then alternates
round after round, who goes first alternating too (benchmarks/_harness.py): find_overlap over all training
tokens, and the reference, one plain read of the same training tokens (their sum, chunk by chunk: what any
scan of them costs at least). Prints both times, the
ratio, what the check found and the CPU capability. No target: a figure to report beside the docs' claim.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402


def read_once(tokens, chunk: int) -> int:
    return sum(
        int(np.asarray(tokens[a : min(a + chunk, len(tokens))], dtype=np.int64).sum())
        for a in range(0, len(tokens), chunk)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="stdlib")
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from nexus.config import DataConfig
    from nexus.data.loader import DataModule
    from nexus.data.overlap import CHUNK, MAX_SCAN, find_overlap

    print_machine()  # CPU model and capability beside the figures below
    dm = DataModule(DataConfig(source=a.data, cache_dir=a.cache_dir), quiet=True)
    train, val = dm.train.tokens, dm.val.tokens
    found = []
    times = alternate(
        {"check": lambda: found.append(find_overlap(train, val)), "read": lambda: read_once(train, CHUNK)},
        a.rounds,
        warmup=0,
    )
    found = found[-1]
    check, ref = times["check"], times["read"]
    cap = torch.backends.cpu.get_cpu_capability()
    print(f"data {a.data}: {len(train):,} training, {len(val):,} validation tokens; scan limit {MAX_SCAN:,}")
    print(
        f"found {found.found} of {found.sampled} sampled {found.window}-token validation windows in training "
        f"({found.scanned:,} training tokens read)"
    )
    print(f"check s {[round(x, 3) for x in check]} | plain read s {[round(x, 3) for x in ref]} | cpu capability {cap}")
    emit(
        "overlap check vs one plain read of the training tokens",
        ratios(times, "check", "read"),
        "report",
        check_s=[round(x, 3) for x in check],
        read_s=[round(x, 3) for x in ref],
        found=found.found,
        sampled=found.sampled,
        train_tokens=len(train),
        cpu_capability=cap,
    )


if __name__ == "__main__":
    main()
