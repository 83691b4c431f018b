"""Every speed figure of issue 17 from one invocation: each benchmark in turn, then one table.

Each benchmark still alternates its candidate and its reference inside its own process (so load hits
both alike) and prints its raw numbers; this script runs them one after another, keeps their full
output, reads the `RESULT` line each ends with (benchmarks/_result.py) and prints one table with the
date, the machine and the load around each run.

    python benchmarks/speed/speed_suite.py                        \
# every benchmark, the rounds used in benchmarks/README.md
    python benchmarks/speed/speed_suite.py --quick                # 2 rounds each, smaller decode runs: a smoke run
    python benchmarks/speed/speed_suite.py --only ternary,kv      # a subset
    python benchmarks/speed/speed_suite.py --out results/speed    # also write results/speed/{suite.json,suite.md,logs}

Nothing is written unless --out names a directory; an existing --out directory is refused.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, machine, parse  # noqa: E402

HERE = Path(__file__).resolve().parent  # benchmarks/speed/, where the suite's scripts live
ROOT = HERE.parents[1]  # the checkout: each script runs from it, as its recorded command reads

# name -> (script, full arguments, --quick arguments). The full arguments are the commands recorded in
# benchmarks/README.md; one thread and process CPU time where a script offers them (a shared 2-core box).
BENCHMARKS = {
    "ternary": (
        "ternary_inference.py",
        ["--threads", "1", "--reps", "3", "--new-tokens", "240", "--budget-s", "0"],
        ["--threads", "1", "--reps", "2", "--new-tokens", "48"],
    ),
    "kv": ("kv_cache_speed.py", ["--rounds", "3"], ["--rounds", "2", "--new-tokens", "96"]),
    "train": (
        "train_throughput.py",
        ["--threads", "1", "--clock", "cpu", "--rounds", "5"],
        ["--threads", "1", "--clock", "cpu", "--rounds", "2"],
    ),
    "train-compiled": (
        "train_throughput.py",
        ["--threads", "1", "--clock", "cpu", "--rounds", "5", "--compile"],
        ["--threads", "1", "--clock", "cpu", "--rounds", "2", "--compile"],
    ),
    "grown": ("grown_step.py", ["--rounds", "5"], ["--rounds", "2"]),
    "recurrent": ("recurrent_vs_transformer.py", ["--rounds", "2"], ["--rounds", "2", "--seq", "64"]),
    "first-token": ("first_token.py", ["--rounds", "5"], ["--rounds", "2"]),
    "gpu-mfu": ("gpu_mfu.py", [], ["--steps", "3", "--rounds", "2"]),  # runs only where CUDA is available
}
NEEDS_CUDA = {"gpu-mfu"}


def run_one(name: str, argv: list[str]) -> tuple[list[dict], str, dict]:
    script = HERE / BENCHMARKS[name][0]
    load0 = os.getloadavg()[0]
    with StepTimer() as t:
        proc = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, cwd=ROOT)
    info = {
        "command": f"python benchmarks/speed/{script.name} {' '.join(argv)}",
        "rc": proc.returncode,
        "wall_s": round(t.elapsed.wall, 1),
        "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }
    return parse(proc.stdout), proc.stdout + proc.stderr, info


def fmt(rec: dict) -> str:
    lo, hi = rec["range"]
    return (
        f"{rec['value']:#.3g}{rec['unit'] if rec['unit'] == 'x' else ''} [{lo:#.3g}, {hi:#.3g}] "
        f"({rec['rounds']} rounds)"
    )


def table(rows: list[tuple[dict, dict]], header: str, quick: bool = False) -> str:
    out = [
        header,
        "",
        "| benchmark | figure (median [range]) | target | met | command | load start/end |",
        "|---|---|---|---|---|---|",
    ]
    for rec, info in rows:
        # a --quick run's shorter decodes and fewer rounds are not the settings the targets are set at
        met = "n/a (--quick)" if quick else {True: "yes", False: "**no**", None: "—"}[rec.get("met")]
        out.append(
            f"| {rec['name']} | {fmt(rec)} | {rec['target']} | {met} | `{info['command']}` | "
            f"{info['load'][0]} / {info['load'][1]} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    p.add_argument("--quick", action="store_true", help="fewer rounds and shorter decodes (a smoke run, not a figure)")
    p.add_argument("--out", help="directory to create for suite.json, suite.md and each benchmark's log")
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"speed_suite: --only={args.only!r} names {unknown} (valid: {', '.join(BENCHMARKS)})", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    if out is not None and out.exists():
        print(f"speed_suite: --out={out} already exists (valid: a directory that does not exist yet)", file=sys.stderr)
        return 2

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = f"Speed suite, {stamp}{' (--quick: a smoke run)' if args.quick else ''}; {machine()}"
    print(header, flush=True)
    rows, logs, failed = [], {}, []
    import torch

    for name in names:
        script, full, quick = BENCHMARKS[name]
        if name in NEEDS_CUDA and not torch.cuda.is_available():
            print(f"\n== {name}: skipped (no CUDA device here)", flush=True)
            continue
        results, log, info = run_one(name, quick if args.quick else full)
        logs[name] = log
        print(f"\n== {name}: {info['command']} ({info['wall_s']} s, rc {info['rc']})\n{log.rstrip()}", flush=True)
        if info["rc"] != 0 or not results:
            failed.append(name)
            continue
        rows += [(r, info) for r in results]
    text = table(rows, header, args.quick)
    print("\n" + text)
    if failed:
        print(f"\nfailed (no RESULT line or nonzero exit): {', '.join(failed)}")
    if out is not None:  # assembled in a temporary sibling, then renamed: never a half-written results dir
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; the results are an ordinary directory
        try:
            (tmp / "suite.json").write_text(
                json.dumps({"header": header, "results": [{**r, **i} for r, i in rows], "failed": failed}, indent=1)
            )
            (tmp / "suite.md").write_text(text + "\n")
            for name, log in logs.items():
                (tmp / f"{name}.log").write_text(log)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if out.exists():  # appeared during the run: never replace it, and never lose a run's results
            print(f"speed_suite: --out={out} appeared while the suite ran; the results are in {tmp}", file=sys.stderr)
            return 2
        tmp.rename(out)
        print(f"wrote {out}/suite.md, suite.json and one log per benchmark")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
