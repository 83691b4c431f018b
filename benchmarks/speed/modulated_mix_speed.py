"""Forward + backward time of the hand-written ExoFormer mixing Function (nexus.models.modulated_mix)
against autograd on the same expression, alternated in one process, on one component of
(batch x seq, heads x head_dim) with dynamic (per-token) factors.

    python benchmarks/speed/modulated_mix_speed.py --threads 1
    python benchmarks/speed/modulated_mix_speed.py --threads 2 --rounds 9

Prints each side's median milliseconds per call and the ratio Function / autograd (lower is better).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from nexus.models.modulated_mix import modulated_mix
from nexus.runtime import tune_cpu_allocator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, medians, print_machine, ratios  # noqa: E402


def by_autograd(cur, anc, l1, l2, g1, g2):
    """eq. 7 as plain tensor ops, the way the mixer was written before the Function."""
    return torch.addcmul(cur * l2 * g2, anc * l1, g1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1024, help="batch x seq")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--calls", type=int, default=40, help="timed calls per round")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_cpu_allocator()
    g = torch.Generator().manual_seed(0)
    shape = (args.tokens, 1, args.heads, args.head_dim)
    cur, anc = (torch.randn(*shape, generator=g).requires_grad_() for _ in range(2))
    l1, l2 = (torch.randn(args.heads, args.head_dim, generator=g).requires_grad_() for _ in range(2))
    gamma = torch.rand(args.tokens, 1, 8, generator=g).requires_grad_()
    upstream = torch.randn(*shape, generator=g)
    leaves = (cur, anc, l1, l2, gamma)

    def call(fn) -> None:
        out = fn(cur, anc, l1, l2, gamma[..., 0, None, None], gamma[..., 1, None, None])
        out.backward(upstream)
        for t in leaves:
            t.grad = None

    sides = {name: (lambda fn=fn: call(fn)) for name, fn in (("function", modulated_mix), ("autograd", by_autograd))}
    # seconds per call -> ms; one warm-up round, then the sides alternate who goes first
    times = {k: [t * 1e3 for t in v] for k, v in alternate(sides, args.rounds, calls=args.calls).items()}
    med = medians(times)
    print(
        f"{torch.get_num_threads()} threads | component ({args.tokens} tokens, {args.heads} x {args.head_dim}) "
        f"| dynamic factors | {args.rounds} rounds x {args.calls} calls"
    )
    for k, v in times.items():
        print(f"{k:>9}: median {med[k]:.3f} ms per forward+backward | rounds {[round(x, 3) for x in v]}")
    print(f"RATIO function / autograd = {med['function'] / med['autograd']:.3f}")
    emit(
        "ExoFormer mixing Function vs autograd",
        ratios(times, "function", "autograd"),
        target="< 1 (faster)",
        met=med["function"] < med["autograd"],
        function_ms=round(med["function"], 4),
        autograd_ms=round(med["autograd"], 4),
    )


if __name__ == "__main__":
    main()
