"""Higher-order attention speed: training step time vs the baseline, normalized by analytic FLOPs,
and cached vs uncached generation.

    python benchmarks/speed/higher_order_speed.py [--d-model 128 --layers 4 --seq 256 --batch 8]

1. Training step (forward + backward + AdamW) of order 1 (baseline), order 2 and order 3 (shared
   QK, eq. 12), timed interleaved in one process; the minimum over repetitions is the estimate (on a
   shared machine other jobs only ever add time; the median is printed too). Prints each order's
   time ratio, FLOPs ratio (analysis/flops.py, which includes HigherOrderAttention.flops_per_token)
   and their quotient: target <= 1.1 (the extra time is explained by the extra FLOPs).
2. Generation of --gen-tokens new tokens with an order-2 model, with the per-level KV caches vs
   recomputing the whole prefix every step: target >= 3x faster.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from nexus.analysis.flops import train_flops_per_token
from nexus.config import AttentionOptions, ModelConfig, TrainConfig
from nexus.models.generate import generate
from nexus.models.transformer import TransformerLM
from nexus.optim.param_groups import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402


def make(args, order: int, max_len: int) -> TransformerLM:
    cfg = ModelConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, max_seq_len=max_len)
    if order > 1:
        cfg.attention = AttentionOptions.make("higher_order", order=order, ho_targets="qk", ho_shared=True)
    torch.manual_seed(0)
    return TransformerLM(cfg)


def train_step(model, opt, x, y) -> None:
    opt.zero_grad(set_to_none=True)
    model(x, labels=y).loss.backward()
    opt.step()


def training(args) -> list[dict]:
    orders = [1, 2, 3]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 259, (args.batch, args.seq), generator=g)
    y = torch.randint(0, 259, (args.batch, args.seq), generator=g)
    runs = {}
    for m in orders:
        model = make(args, m, args.seq).train()
        runs[m] = (model, build_optimizer(model, TrainConfig(optimizer="adamw", lr=1e-3)))
    # one warm-up round, then rounds in which the orders alternate who goes first, so machine load hits all alike
    times = alternate(
        {m: (lambda mo=mo, o=o: train_step(mo, o, x, y)) for m, (mo, o) in runs.items()}, args.reps, calls=args.steps
    )
    runs = {m: (mo, o, times[m]) for m, (mo, o) in runs.items()}
    base_t = min(runs[1][2])
    base_med = statistics.median(runs[1][2])
    base_f = train_flops_per_token(runs[1][0], args.seq)
    rows = []
    for m in orders:
        t, med = min(runs[m][2]), statistics.median(runs[m][2])
        f = train_flops_per_token(runs[m][0], args.seq)
        rows.append(
            {
                "order": m,
                "step_ms": 1e3 * t,
                "median_ms": 1e3 * med,
                "time_ratio": t / base_t,
                "median_ratio": med / base_med,
                "flops_ratio": f / base_f,
                "normalized": (t / base_t) / (f / base_f),
                "train_gflops_per_token": f / 1e9,
                "normalized_per_round": [r / (f / base_f) for r in ratios(times, m, 1)],
            }
        )
    return rows


def generation(args) -> dict:
    model = make(args, 2, args.prompt + args.gen_tokens).eval()
    prompt = torch.randint(0, 259, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    ids = {}

    def side(use_cache: bool):
        return lambda: ids.__setitem__(
            use_cache, generate(model, prompt, max_new_tokens=args.gen_tokens, temperature=0, use_cache=use_cache)
        )

    # the two ways alternate who goes first, --gen-reps rounds; the fastest of each is reported
    times = alternate({"cached": side(True), "uncached": side(False)}, args.gen_reps, warmup=0)
    assert torch.equal(ids[True], ids[False]), "cached generation must equal uncached"
    fastest = {name: min(t) for name, t in times.items()}
    return {
        "cached_s": fastest["cached"],
        "uncached_s": fastest["uncached"],
        "speedup": fastest["uncached"] / fastest["cached"],
        "new_tokens": args.gen_tokens,
        "speedup_per_round": ratios(times, "uncached", "cached"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="timed steps per repetition")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--gen-reps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps a shared CPU steady)")
    args = p.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    torch.set_num_threads(args.threads)
    print(
        f"shape: {args.layers}x{args.d_model}, {args.heads} heads, batch {args.batch} x seq {args.seq}, "
        f"device cpu, threads {args.threads}"
    )
    print("order | min step ms | time ratio | FLOPs ratio | time/FLOPs (target <= 1.1) | median ms (ratio)")
    rows = training(args)
    for r in rows:
        print(
            f"{r['order']:5d} | {r['step_ms']:11.1f} | {r['time_ratio']:10.3f} | {r['flops_ratio']:11.3f} | "
            f"{r['normalized']:25.3f} | {r['median_ms']:.1f} ({r['median_ratio']:.3f})"
        )
    for r in rows[1:]:  # per round: (order m step / order 1 step, same round) / FLOPs ratio; the table uses minima
        emit(
            f"order {r['order']} attention step time / FLOPs ratio vs order 1 ({args.layers}x{args.d_model}, seq "
            f"{args.seq})",
            r["normalized_per_round"],
            "<= 1.1",
            met=statistics.median(r["normalized_per_round"]) <= 1.1,
            of_minima=round(r["normalized"], 4),
            flops_ratio=round(r["flops_ratio"], 4),
        )
    g = generation(args)
    print(
        f"generation, order 2, {g['new_tokens']} new tokens: cached {g['cached_s']:.2f} s, "
        f"uncached {g['uncached_s']:.2f} s, speedup {g['speedup']:.1f}x (target >= 3)"
    )
    emit(
        f"order 2 cached vs uncached generation, {g['new_tokens']} new tokens",
        g["speedup_per_round"],
        ">= 3",
        met=statistics.median(g["speedup_per_round"]) >= 3,
        of_minima=round(g["speedup"], 3),
    )


if __name__ == "__main__":
    main()
