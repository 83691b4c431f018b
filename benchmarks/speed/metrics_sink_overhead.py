"""What entering metrics.jsonl in the run's manifest before every line costs (issue 42).

Since issue 42 the sink (nexus.train.loggers.JsonlSink) writes the run's manifest (fsynced, renamed)
before each metrics line, announcing the line, so a kill at any moment leaves a file nexus can prove
is its own and a line anyone else appends is not. The reference is the sink before it: a plain append
of the same line. Both write the same records into their own run folder under --dir, alternately in
one process; the cost is per logged line (a run logs every train.log_every steps).

    python benchmarks/speed/metrics_sink_overhead.py --lines 300 --rounds 5 [--dir /path/on/the/disk/of/interest]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from nexus.outdir import TRAIN_RUN, record
from nexus.train.loggers import JsonlSink

RECORD = {"step": 0, "loss": 3.14159, "lr": 0.0003, "grad_norm": 1.2345, "tokens": 131072, "tok_per_s": 51234.5,
          "epoch": 0.01}


def plain_append(path: Path, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def one_round(root: Path, lines: int, i: int) -> tuple[float, float]:
    """Seconds per line: (the sink, the plain append)."""
    a, b = root / f"sink{i}", root / f"plain{i}"
    for d in (a, b):
        d.mkdir()
        # a run folder's manifest as a run has it when logging starts (a few entries)
        (d / "config.yaml").write_text("model: {}\n")
        record(d, TRAIN_RUN, files=["config.yaml"])
    sink = JsonlSink(a)
    t0 = time.perf_counter()
    for s in range(lines):
        sink.write(dict(RECORD, step=s))
    t_sink = (time.perf_counter() - t0) / lines
    sink.close()
    t0 = time.perf_counter()
    for s in range(lines):
        plain_append(b / "metrics.jsonl", dict(RECORD, step=s))
    t_plain = (time.perf_counter() - t0) / lines
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()
    return t_sink, t_plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the run folders go (default: the system's temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        res = [one_round(Path(tmp), args.lines, i) for i in range(args.rounds)]
    sink = [r[0] * 1e6 for r in res]
    plain = [r[1] * 1e6 for r in res]
    ratio = [s / p for s, p in zip(sink, plain)]
    print(f"cpu capability: {torch.backends.cpu.get_cpu_capability()} | dir: {args.dir or tempfile.gettempdir()} | "
          f"{args.lines} lines x {args.rounds} rounds")
    print(f"sink with manifest entry: {statistics.median(sink):.1f} us/line (rounds {min(sink):.1f}-{max(sink):.1f})")
    print(f"plain append (reference): {statistics.median(plain):.1f} us/line (rounds {min(plain):.1f}-{max(plain):.1f})")
    print(f"ratio: {statistics.median(ratio):.1f}x [{min(ratio):.1f}, {max(ratio):.1f}]; added per logged line: "
          f"{statistics.median(sink) - statistics.median(plain):.1f} us")


if __name__ == "__main__":
    main()
