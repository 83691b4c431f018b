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
import sys
import tempfile
from pathlib import Path

from nexus.outdir import TRAIN_RUN, record
from nexus.train.loggers import JsonlSink

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402

RECORD = {
    "step": 0,
    "loss": 3.14159,
    "lr": 0.0003,
    "grad_norm": 1.2345,
    "tokens": 131072,
    "tok_per_s": 51234.5,
    "epoch": 0.01,
}


def plain_append(path: Path, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run_folder(d: Path) -> Path:
    """A run folder's manifest as a run has it when logging starts (a few entries)."""
    d.mkdir()
    (d / "config.yaml").write_text("model: {}\n")
    record(d, TRAIN_RUN, files=["config.yaml"])
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the run folders go (default: the system's temp dir)")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        # every round writes into fresh run folders, made (and the sink opened) before any timing
        sinks = [JsonlSink(run_folder(root / f"sink{i}")) for i in range(args.rounds)]
        plains = [run_folder(root / f"plain{i}") for i in range(args.rounds)]
        turn = {"sink": iter(sinks), "plain": iter(plains)}

        def with_sink() -> None:
            sink = next(turn["sink"])
            for s in range(args.lines):
                sink.write(dict(RECORD, step=s))

        def plain() -> None:
            path = next(turn["plain"]) / "metrics.jsonl"
            for s in range(args.lines):
                plain_append(path, dict(RECORD, step=s))

        def same_bytes(r: int, _) -> None:  # closing is not part of a logged line's cost
            sinks[r].close()
            assert sinks[r].path.read_bytes() == (plains[r] / "metrics.jsonl").read_bytes()

        times = alternate({"sink": with_sink, "plain": plain}, args.rounds, warmup=0, after_round=same_bytes)
    sink = [t / args.lines * 1e6 for t in times["sink"]]
    plain = [t / args.lines * 1e6 for t in times["plain"]]
    ratio = ratios(times, "sink", "plain")
    print(f"dir: {args.dir or tempfile.gettempdir()} | {args.lines} lines x {args.rounds} alternated rounds")
    print(f"sink with manifest entry: {statistics.median(sink):.1f} us/line (rounds {min(sink):.1f}-{max(sink):.1f})")
    print(
        f"plain append (reference): {statistics.median(plain):.1f} us/line (rounds {min(plain):.1f}-{max(plain):.1f})"
    )
    print(
        f"ratio: {statistics.median(ratio):.1f}x [{min(ratio):.1f}, {max(ratio):.1f}]; added per logged line: "
        f"{statistics.median(sink) - statistics.median(plain):.1f} us"
    )
    emit(
        "metrics sink with manifest entry vs plain append, per logged line",
        ratio,
        "report",
        sink_us=[round(v, 1) for v in sink],
        plain_us=[round(v, 1) for v in plain],
        added_us=round(statistics.median(sink) - statistics.median(plain), 1),
    )


if __name__ == "__main__":
    main()
