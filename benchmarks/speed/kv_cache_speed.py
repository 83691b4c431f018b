"""KV-cached vs uncached generation (issue 17 targets: >= 6x at batch 1 and >= 15x at batch 8 for
the baseline; the order-2 figure is reported alongside).

    python benchmarks/speed/kv_cache_speed.py                                   # baseline-tiny, B=1 and 8
    python benchmarks/speed/kv_cache_speed.py --preset baseline-small --batches 1 --rounds 2

For each batch size and attention order, one process alternates the two ways of generating
--new-tokens tokens greedily from a --prompt-token prompt: with the preallocated caches (one forward
of one token per step) and without (the whole prefix recomputed every step). Every round prints
both wall times and their ratio; the summary is the median ratio with the range over rounds. The
two outputs are checked to be the same tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402

from nexus.config import AttentionOptions
from nexus.models import build_model
from nexus.models.generate import generate
from nexus.presets import get_preset

TARGETS = {(1, 1): 6, (1, 8): 15}  # (attention order, batch) -> cached/uncached target (issue 17: baseline only)


def build(preset: str, order: int, max_len: int):
    cfg = get_preset(preset).model
    cfg.max_seq_len = max(cfg.max_seq_len, max_len)
    if order > 1:
        cfg.attention = AttentionOptions.make("higher_order", order=order, ho_targets="qk", ho_shared=True)
    torch.manual_seed(0)
    return build_model(cfg).eval()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="baseline-tiny")
    p.add_argument("--orders", default="1,2", help="attention orders to measure (1 = the baseline)")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=240)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps a shared CPU steady)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print_machine()  # CPU model and capability beside the figures below
    print(
        f"{args.preset}, prompt {args.prompt_tokens} + {args.new_tokens} new tokens, greedy, cpu, "
        f"threads {args.threads}, {args.rounds} alternated rounds"
    )
    for order in [int(o) for o in args.orders.split(",")]:
        model = build(args.preset, order, args.prompt_tokens + args.new_tokens)
        for batch in [int(b) for b in args.batches.split(",")]:
            prompt = torch.randint(
                0, model.cfg.vocab_size, (batch, args.prompt_tokens), generator=torch.Generator().manual_seed(1)
            )
            for use_cache in (True, False):  # warm-up, untimed: a short generation each way
                generate(model, prompt, max_new_tokens=4, temperature=0, use_cache=use_cache)
            out = {}

            def side(use_cache: bool, out=out, model=model, prompt=prompt):
                return lambda: out.__setitem__(
                    use_cache,
                    generate(model, prompt, max_new_tokens=args.new_tokens, temperature=0, use_cache=use_cache),
                )

            def check_round(r: int, t: dict, out=out, order=order, batch=batch) -> None:
                assert torch.equal(out[True], out[False]), "cached and uncached generation must give the same tokens"
                print(
                    f"  order {order} batch {batch} round {r}: cached {t['cached']:.2f} s, uncached "
                    f"{t['uncached']:.2f} s, ratio {t['uncached'] / t['cached']:.2f}"
                )

            # the two ways alternate who goes first, so a slow moment does not always land on one side
            times = alternate(
                {"cached": side(True), "uncached": side(False)}, args.rounds, warmup=0, after_round=check_round
            )
            speedup = ratios(times, "uncached", "cached")
            print(
                f"order {order} batch {batch}: cached/uncached speedup median {statistics.median(speedup):.2f}x, "
                f"range [{min(speedup):.2f}, {max(speedup):.2f}]"
            )
            target = TARGETS.get((order, batch))  # the issue sets targets for the baseline (order 1) only
            emit(
                f"KV-cached vs uncached generation ({args.preset}, order {order}, B={batch}, {args.new_tokens} new)",
                speedup,
                f">= {target}" if target else "report",
                met=None if target is None else statistics.median(speedup) >= target,
                cached_s=[round(v, 4) for v in times["cached"]],
                uncached_s=[round(v, 4) for v in times["uncached"]],
            )


if __name__ == "__main__":
    main()
