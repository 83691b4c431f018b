"""Training step time of this tree against another revision (issue 25: the redesign's speed before/after
within noise), through the whole trainer: data, forward, backward, optimizer step, hooks and logging.

    python benchmarks/regressions/revision_step_speed.py [--reference REV] [--preset baseline-tiny] [--rounds 4]

Each round runs, for both sides in alternating order, `Trainer(cfg, quiet=True).fit()` of the preset
for --short and for --long steps in a fresh process with that side's `src` on PYTHONPATH (one thread);
the time per step is (long wall - short wall) / (long - short), so start-up, the final evaluation, sample
and checkpoint cancel. Prints every round's per-step milliseconds for both sides and the ratio
this/reference (median over rounds, with the range of per-round ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine, round_order  # noqa: E402
from _revisions import BEFORE_REDESIGN, ROOT, checkout  # noqa: E402


def worker(preset: str, steps: int, out_dir: str) -> None:
    import torch

    torch.set_num_threads(1)
    from nexus.config_overrides import parse_overrides
    from nexus.presets import get_preset
    from nexus.train.trainer import Trainer

    cfg = parse_overrides(
        get_preset(preset),
        [
            "--train.steps",
            str(steps),
            "--train.eval_every",
            "0",
            "--train.save_every",
            "0",
            "--train.log_every",
            "10",
            "--train.sample_tokens",
            "4",
            "--train.out_dir",
            out_dir,
        ],
    )
    cfg.validate()
    trainer = Trainer(cfg, quiet=True)
    with StepTimer() as t:
        trainer.fit()
    print(json.dumps({"seconds": t.elapsed.wall}))


def _run(src: Path, preset: str, steps: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "NEXUS_DISABLE_PLUGINS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", preset, str(steps), str(Path(tmp) / "run")],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        raise SystemExit(f"worker ({src}) failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", default=BEFORE_REDESIGN, help="revision to compare against (default: %(default)s)")
    ap.add_argument("--worktree", default="/tmp/nexus-before", help="where the reference is checked out")
    ap.add_argument("--preset", default="baseline-tiny")
    ap.add_argument("--short", type=int, default=5)
    ap.add_argument("--long", type=int, default=45)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.worker[2])
        return 0
    print_machine()  # CPU model and capability beside the figures below
    ref, head, here = checkout(args.worktree, args.reference)
    sides = {"this": ROOT / "src", "reference": ref / "src"}
    per_step: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(args.rounds):
        # who goes first alternates, as in the harness's rounds; each side's time is (long - short) as its
        # worker processes measured it, so the harness's own timing of a round would add nothing
        for label in round_order(list(sides), r):
            short, long = _run(sides[label], args.preset, args.short), _run(sides[label], args.preset, args.long)
            per_step[label].append((long - short) / (args.long - args.short) * 1e3)
        print(
            f"round {r + 1}: this {per_step['this'][-1]:.2f} ms/step, reference {per_step['reference'][-1]:.2f} "
            f"ms/step, ratio {per_step['this'][-1] / per_step['reference'][-1]:.3f}",
            flush=True,
        )
    ratios = [a / b for a, b in zip(per_step["this"], per_step["reference"])]
    print(
        f"{args.preset} step, this tree ({here}) / {head}: {statistics.median(ratios):.3f}x "
        f"[{min(ratios):.3f}, {max(ratios):.3f}] over {args.rounds} rounds"
    )
    emit(
        f"{args.preset} training step, this tree / {head}",
        ratios,
        "within noise of 1.0",
        met=None,
        tree=here,
        reference=head,
        ms_per_step_this=[round(x, 2) for x in per_step["this"]],
        ms_per_step_reference=[round(x, 2) for x in per_step["reference"]],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
