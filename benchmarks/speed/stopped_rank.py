"""How long a job with one stopped rank takes to end, launched with a plain `torchrun` (its default
--shutdown-timeout of 30 s), against the bound the issue sets: the steady collective timeout + 10 s.

    python benchmarks/speed/stopped_rank.py [--timeout 10] [--rounds 2]

Two ranks (gloo, CPU) train baseline-micro; rank 1 writes the wall time and SIGSTOPs itself at step 4,
in steady state (alive, never answering). Measured: from that moment to the launcher's exit, and
whether rank 0 ended with one line naming rank 1. Raw seconds per round are printed; the RESULT value
is the median elapsed / (timeout + 10): at most 1.0 meets the bound.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import emit, print_machine  # noqa: E402

STOPPING_RANK = textwrap.dedent("""
    import os, signal, sys, time
    from nexus.train import trainer

    real_step = trainer.Trainer.train_step

    def train_step(self, step):
        if self.rank == 1 and step == 3:
            with open(os.environ["STOP_STAMP"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGSTOP)
        return real_step(self, step)

    trainer.Trainer.train_step = train_step
    from nexus.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def one_round(work: Path, timeout_s: int) -> tuple[float, bool]:
    script, stamp = work / "stop_rank1.py", work / "stopped_at"
    script.write_text(STOPPING_RANK)
    stamp.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        "train",
        "--preset",
        "baseline-micro",
        "--quiet",
        "--train.steps",
        "50",
        "--train.batch_size",
        "2",
        "--model.d_model",
        "32",
        "--model.n_layers",
        "1",
        "--data.seq_len",
        "32",
        "--train.eval_every",
        "0",
        "--train.dist_timeout_s",
        str(timeout_s),
        "--train.out_dir",
        str(work / "run"),
        "--overwrite",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", STOP_STAMP=str(stamp), NEXUS_CACHE=str(work / "cache"))
    env.pop("NEXUS_DIST_TIMEOUT", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s + 300)
    # from a moment in another process (rank 1's stamp) to this one's: only the epoch clock is shared by
    # both processes, so this, not the harness's per-process timer (tests/test_benchmark_clocks.py allows it)
    ended = time.time()
    named = sum("rank 1 stopped answering" in line for line in proc.stderr.splitlines()) == 1
    return ended - float(stamp.read_text()), named and proc.returncode != 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=int, default=10, help="train.dist_timeout_s (the steady collective timeout)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    elapsed, named = [], []
    with tempfile.TemporaryDirectory(prefix="nexus-stopped-rank-") as d:
        for i in range(args.rounds):
            e, ok = one_round(Path(d), args.timeout)
            elapsed.append(e)
            named.append(ok)
            print(
                f"round {i + 1}: the job ended {e:.1f} s after rank 1 stopped (bound {args.timeout + 10} s); "
                f"one line naming rank 1: {ok}",
                flush=True,
            )
    bound = args.timeout + 10
    emit(
        "stopped rank: job end / (timeout + 10 s)",
        [e / bound for e in elapsed],
        "<= 1.0",
        unit="ratio",
        met=all(e <= bound for e in elapsed) and all(named),
        elapsed_s=[round(e, 1) for e in elapsed],
        dist_timeout_s=args.timeout,
        launcher="torchrun defaults (--shutdown-timeout 30)",
    )


if __name__ == "__main__":
    main()
