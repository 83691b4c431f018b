"""AdamW step time on a preset's parameters: torch.optim.AdamW (fused, foreach) against nexus's
hand-written AdamW (kept for grown runs with per-element steps / re-warmup masks), alternated round
after round in one process on the same gradients.

    python benchmarks/speed/optimizer_step.py [--preset baseline-small] [--rounds 5] [--steps 5] [--threads N]

Prints the median milliseconds per optimizer step of each and the RATIO hand-written / fused and
hand-written / foreach (how many times slower the Python loop is).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from nexus.models import build_model
from nexus.optim.optimizers import AdamW
from nexus.optim.param_groups import build_optimizer
from nexus.presets import get_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, medians, print_machine, ratios  # noqa: E402


def _optimizers(model, tcfg):
    fused = build_optimizer(model, tcfg)
    groups = [
        {"params": g["params"], "weight_decay": g["weight_decay"]} for g in fused.optimizers["adamw"].param_groups
    ]
    return {
        "fused": fused.optimizers["adamw"],
        "foreach": torch.optim.AdamW(
            groups, lr=tcfg.lr, betas=tuple(tcfg.optimizer.betas), eps=tcfg.optimizer.eps, foreach=True
        ),
        "hand-written": AdamW(groups, lr=tcfg.lr, betas=tuple(tcfg.optimizer.betas), eps=tcfg.optimizer.eps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="baseline-small")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps timed per round and optimizer")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = get_preset(args.preset)
    torch.manual_seed(0)
    model = build_model(cfg.model)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opts = _optimizers(model, cfg.train)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.preset}: {n / 1e6:.1f}M parameters, {torch.get_num_threads()} threads, device cpu")
    for o in opts.values():  # allocate state outside the timing
        o.step()
    # the optimizers alternate who goes first each round (the state was allocated above: no warm-up round)
    times = alternate(
        {k: o.step for k, o in opts.items()},
        args.rounds,
        calls=args.steps,
        warmup=0,
        after_round=lambda r, t: print(f"round {r + 1}: " + " | ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items())),
    )
    times = {k: [t * 1e3 for t in v] for k, v in times.items()}
    med = medians(times)
    print("median ms/step: " + " | ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print(
        f"RATIO hand-written/fused = {med['hand-written'] / med['fused']:.2f} | "
        f"hand-written/foreach = {med['hand-written'] / med['foreach']:.2f}"
    )
    emit(
        f"hand-written AdamW vs fused, {args.preset}",
        ratios(times, "hand-written", "fused"),
        target="report",
        unit="x",
        **{f"{k}_ms": round(v, 3) for k, v in med.items()},
    )


if __name__ == "__main__":
    main()
