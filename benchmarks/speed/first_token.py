"""`nexus generate` first-token latency as a whole process, against the floor nexus cannot cut.

A user who types `nexus generate --checkpoint DIR` waits for a fresh interpreter, `import torch`,
nexus's own imports, the checkpoint load, the prompt and the first new token. This script times that
whole process (`python -m nexus generate ... --max-new-tokens 1`) alternately with a process that only
runs `import torch` (the floor: nexus cannot make torch import faster), round after round, and prints
both, their ratio and a per-phase breakdown taken inside one extra process.

    python benchmarks/speed/first_token.py --rounds 5                   # trains a 2-step baseline-tiny in a temp dir
    python benchmarks/speed/first_token.py --checkpoint runs/x/final    # an existing checkpoint

The temporary checkpoint is written under the system temp directory and removed afterwards.
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

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402

# One process that stamps each phase of the generate path, in the order `nexus generate` runs them, on the
# harness's clock (argv: the checkpoint, then benchmarks/ to import the harness from before the clock starts).
PHASES = r"""
import json, sys
sys.path.insert(0, sys.argv[2]); from _harness import StepTimer
clock = StepTimer().start(); t = [0.0]
import torch; t.append(clock.so_far().wall)
import nexus.cli, nexus.cli.generate; from nexus.checkpoint import load_checkpoint; t.append(clock.so_far().wall)
model, cfg, tok = load_checkpoint(sys.argv[1]); model.eval(); t.append(clock.so_far().wall)
ids = torch.tensor([tok.encode("The ")])
with torch.no_grad():
    model.generate(ids, max_new_tokens=1, temperature=0.0)
t.append(clock.so_far().wall)
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""


def process(cmd: list[str], env: dict):
    """A fresh process running `cmd`, for the harness to time on the wall clock."""
    return lambda: subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tiny_checkpoint(workdir: Path, env: dict) -> Path:
    """The checkpoint a new user has after the quick start: baseline-tiny on the embedded data (2 steps)."""
    out = workdir / "run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nexus",
            "train",
            "--preset",
            "baseline-tiny",
            "--out",
            str(out),
            "--train.steps",
            "2",
            "--quiet",
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    ckpts = sorted(p.parent for p in out.rglob("model.safetensors"))
    if not ckpts:
        raise RuntimeError(f"training wrote no checkpoint under {out}")
    return ckpts[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", help="checkpoint directory (default: train a 2-step baseline-tiny in a temp dir)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--threads", type=int, default=1, help="OMP_NUM_THREADS for the timed processes (1 keeps a shared CPU steady)"
    )
    args = p.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory(prefix="nexus-first-token-") as tmp:
        ckpt = Path(args.checkpoint) if args.checkpoint else tiny_checkpoint(Path(tmp), env)
        gen = [
            sys.executable,
            "-m",
            "nexus",
            "generate",
            "--checkpoint",
            str(ckpt),
            "--max-new-tokens",
            "1",
            "--temperature",
            "0",
        ]
        floor = [sys.executable, "-c", "import torch"]
        print_machine()  # CPU model and capability beside the figures below
        # one untimed round warms the page cache for both, then they alternate who goes first
        times = alternate(
            {"generate": process(gen, env), "floor": process(floor, env)},
            args.rounds,
            warmup=1,
            after_round=lambda r, t: print(
                f"  round {r}: nexus generate {t['generate']:.2f} s, import torch alone {t['floor']:.2f} s"
            ),
        )
        phases = json.loads(
            subprocess.run(
                [sys.executable, "-c", PHASES, str(ckpt), str(BENCHMARKS)],
                check=True,
                env=env,
                capture_output=True,
                text=True,
            ).stdout.splitlines()[-1]
        )
    gen_s, floor_s = times["generate"], times["floor"]
    per_round = ratios(times, "generate", "floor")
    print(
        f"whole process to the first token: median {statistics.median(gen_s):.2f} s {[round(v, 2) for v in gen_s]}; "
        f"import torch alone: median {statistics.median(floor_s):.2f} s {[round(v, 2) for v in floor_s]}"
    )
    names = ["import torch", "nexus imports", "checkpoint load", "prompt + first token"]
    print("one process, by phase: " + ", ".join(f"{n} {v:.3f} s" for n, v in zip(names, phases)))
    print(
        f"generate / import-torch floor: median {statistics.median(per_round):.2f}, "
        f"range [{min(per_round):.2f}, {max(per_round):.2f}]; load average {os.getloadavg()[0]:.1f}"
    )
    emit(
        "nexus generate first token, whole process / bare `import torch` process",
        per_round,
        "report",
        generate_s=[round(v, 3) for v in gen_s],
        import_torch_s=[round(v, 3) for v in floor_s],
        phases_s=dict(zip(names, [round(v, 4) for v in phases])),
    )


if __name__ == "__main__":
    main()
