"""Peak training memory of NEXUS v4.1 at T_inner = 24 vs T_inner = 4 (target ratio <= 1.10: the
seed promises O(1) memory in the recurrence depth thanks to the one-step gradient).

Each configuration runs in a fresh subprocess so allocator history cannot leak between them.
CPU: a sampling thread reads the process RSS (/proc/self/statm) every 0.5 ms; the reported number is
the peak RSS during training minus the RSS just before the first step (weights and data allocated),
so gradients and the lazily created optimizer state are in every number and only activations can
differ with T_inner; the raw peak is printed too. CUDA: torch.cuda.max_memory_allocated minus the
allocation before the first step. The control (arch.full_backprop = true: backprop through
every iteration) shows that the measurement does grow with depth when activations are kept.

    python benchmarks/speed/recurrent_memory.py                 # nexus-tiny shapes, batch 4 x 128 tokens
    python benchmarks/speed/recurrent_memory.py --device cuda --batch 8 --seq 256
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(args) -> dict:
    import torch

    from nexus.models import build_model
    from nexus.optim.param_groups import build_optimizer
    from nexus.presets import get_preset

    torch.manual_seed(0)
    cfg = get_preset(args.preset)
    m = cfg.model
    m.arch.t_inner, m.arch.n_sup, m.arch.full_backprop = args.t_inner, args.n_sup, args.full_backprop
    dev = torch.device(args.device)
    model = build_model(m).to(dev).train()
    opt = build_optimizer(model, cfg.train)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, m.vocab_size, (args.batch, args.seq), generator=g).to(dev)
    y = torch.randint(0, m.vocab_size, (args.batch, args.seq), generator=g).to(dev)

    def step():
        out = model(x, labels=y)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    # Baseline before the first step: weights and data only. Every step then adds gradients, optimizer
    # state (created lazily at the first step; the same for every T_inner) and activations, the only
    # part that could depend on T_inner. Measuring from here avoids the allocator having already
    # grown its pools to the peak during an unmeasured warm-up step.
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    base_rss = rss_mb()
    peak = [base_rss]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.0005):
            peak[0] = max(peak[0], rss_mb())

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    with StepTimer() as t:
        for _ in range(args.steps):
            step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
    secs = t.elapsed.wall / args.steps
    stop.set()
    th.join()
    res = {
        "t_inner": args.t_inner,
        "n_sup": args.n_sup,
        "full_backprop": args.full_backprop,
        "s_per_step": secs,
        "rss_before_mb": base_rss,
        "rss_peak_mb": peak[0],
        "train_extra_mb": peak[0] - base_rss,
    }
    if dev.type == "cuda":
        res.update(cuda_base_mb=base, cuda_peak_mb=torch.cuda.max_memory_allocated() / 2**20)
        res["train_extra_mb"] = res["cuda_peak_mb"] - base
    return res


def run_config(args, t_inner: int, n_sup: int, full_backprop: bool) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--preset",
        args.preset,
        "--t-inner",
        str(t_inner),
        "--n-sup",
        str(n_sup),
        "--batch",
        str(args.batch if not full_backprop else args.control_batch),
        "--seq",
        str(args.seq),
        "--steps",
        str(args.steps),
        "--device",
        args.device,
    ] + (["--full-backprop"] if full_backprop else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--preset", default="nexus-tiny")
    p.add_argument("--t-inner", type=int, default=4)
    p.add_argument("--n-sup", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument(
        "--control-batch", type=int, default=1, help="batch of the full-backprop control (it keeps every iteration)"
    )
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--full-backprop", action="store_true")
    p.add_argument("--no-control", action="store_true")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    print_machine()  # CPU model and capability beside the figures below
    rows = {}
    for t in (4, 24):
        rows[t] = run_config(args, t, args.n_sup, False)
        print(json.dumps(rows[t]))
    key = "train_extra_mb"
    ratio = rows[24][key] / max(rows[4][key], 1e-9)
    peak_key = "cuda_peak_mb" if args.device.startswith("cuda") else "rss_peak_mb"
    print(
        f"{args.preset} batch {args.batch}x{args.seq} n_sup {args.n_sup} on {args.device}: training memory above the "
        f"pre-step baseline T_inner=24 {rows[24][key]:.1f} MB vs T_inner=4 {rows[4][key]:.1f} MB -> ratio {ratio:.3f} "
        f"(target <= 1.10); raw peak {rows[24][peak_key]:.0f} vs {rows[4][peak_key]:.0f} MB "
        f"(ratio {rows[24][peak_key] / rows[4][peak_key]:.3f})"
    )
    emit(
        f"recurrent training memory T_inner 24 / T_inner 4 ({args.preset}, {args.device})",
        [ratio],
        "<= 1.10",
        met=ratio <= 1.10,
        t_inner_24_mb=round(rows[24][key], 1),
        t_inner_4_mb=round(rows[4][key], 1),
    )
    if not args.no_control:
        c = {t: run_config(args, t, 1, True) for t in (4, 24)}
        for t in (4, 24):
            print(json.dumps(c[t]))
        print(
            f"control (full backprop, n_sup 1, batch {args.control_batch}): T_inner=24 {c[24][key]:.1f} MB vs "
            f"T_inner=4 {c[4][key]:.1f} MB -> ratio {c[24][key] / max(c[4][key], 1e-9):.2f} "
            "(grows with depth, as it should)"
        )


if __name__ == "__main__":
    main()
