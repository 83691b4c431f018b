"""Nexus-Rank training step time vs the Transformer++ baseline, normalized by analytic FLOPs.

    python benchmarks/speed/nexus_rank_step.py [--d-model 256 --layers 4 --m 384 --a 512 --seq 128 --batch 8 --reps 7]

Both models (same width/depth; the Nexusformer one replaces linear Q/K/V by D->M->A->D Nexus-Rank)
run forward + backward + AdamW steps, timed interleaved in one process (median over --reps). Prints
the step-time ratio, the analytic training-FLOPs ratio (nexus.analysis.flops) and their quotient:
target <= 1.1 (Nexus-Rank costs what its extra FLOPs say, no hidden overhead).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from nexus.analysis.flops import train_flops_per_token
from nexus.config import ModelConfig, ProjectionOptions, TrainConfig
from nexus.models import build_model
from nexus.optim.param_groups import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, medians, print_machine, ratios  # noqa: E402


def make(args, nexus: bool):
    proj = (
        ProjectionOptions.make("nexus_rank", rank_m=args.m, rank_a=args.a, form=args.form)
        if nexus
        else ProjectionOptions()
    )
    cfg = ModelConfig(
        d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, max_seq_len=args.seq, projection=proj
    )
    torch.manual_seed(0)
    model = build_model(cfg)
    return model, build_optimizer(model, TrainConfig(optimizer="adamw", lr=1e-3)), cfg


def step(model, opt, x, y) -> None:
    opt.zero_grad(set_to_none=True)
    model(x, labels=y).loss.backward()
    opt.step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--m", type=int, default=384)
    ap.add_argument("--a", type=int, default=512)
    ap.add_argument("--form", default="paper")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 259, (args.batch, args.seq), generator=g)
    y = torch.randint(0, 259, (args.batch, args.seq), generator=g)
    runs = {"baseline": make(args, False), "nexus_rank": make(args, True)}
    # one warm-up step each, then alternated rounds so machine-load drift hits both alike
    times = alternate({k: (lambda m=m, o=o: step(m, o, x, y)) for k, (m, o, _) in runs.items()}, args.reps)
    med = medians(times)
    flops = {k: train_flops_per_token(c, args.seq) for k, (_, _, c) in runs.items()}
    t_ratio, f_ratio = med["nexus_rank"] / med["baseline"], flops["nexus_rank"] / flops["baseline"]
    print(
        f"shape: d={args.d_model} layers={args.layers} M={args.m} A={args.a} form={args.form} seq={args.seq} "
        f"batch={args.batch} threads={torch.get_num_threads()}"
    )
    for k in runs:
        print(
            f"{k:>10}: median step {med[k] * 1e3:8.1f} ms  (min {min(times[k]) * 1e3:.1f})  "
            f"train FLOPs/token {flops[k] / 1e6:8.2f} M"
        )
    print(f"step-time ratio {t_ratio:.3f} / FLOPs ratio {f_ratio:.3f} = {t_ratio / f_ratio:.3f}  (target <= 1.1)")
    emit(
        f"Nexus-Rank step time / FLOPs ratio, form {args.form}",
        [r / f_ratio for r in ratios(times, "nexus_rank", "baseline")],
        target="<= 1.1",
        unit="",
        met=t_ratio / f_ratio <= 1.1,
        flops_ratio=round(f_ratio, 4),
        step_time_ratio=round(t_ratio, 4),
    )


if __name__ == "__main__":
    main()
