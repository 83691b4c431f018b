"""Training step of a grown model (per-element AdamW step counts + re-warmup masks) vs the same model
built at that size and never grown (issue 17 target: <= 1.10x).

    python benchmarks/speed/grown_step.py                      # 4 x 128 -> 4 x 256, batch 4 x 256
    python benchmarks/speed/grown_step.py --layers 8 --width 256 --grown-width 512

The grown model comes from `nexus.growth.grow` (SPARKLING width growth, copy init, asymmetric
optimizer state, re-warmup rho 1.3 over 250 steps), so its optimizer carries what a grown run really
carries: per-element step tensors in every grown matrix and `new_mask` with a live `lr_new`. The
reference is a model of the grown config built from scratch with the optimizer a user gets by
default for it. Both train on the same batch; rounds alternate the two in one process, each round
prints both step times and the ratio, and the summary is the median ratio and its range.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit  # noqa: E402
from _harness import ratios as ratios_of

from nexus.config import ModelConfig, RunConfig, TrainConfig
from nexus.growth import grow
from nexus.models import build_model
from nexus.optim.param_groups import build_optimizer


def step(model, opt, x, y) -> None:
    opt.zero_grad(set_to_none=True)
    model(x, labels=y).loss.backward()
    opt.step()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128, help="d_model before growth")
    p.add_argument("--grown-width", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps a shared CPU steady)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    heads = max(1, args.width // 32)
    cfg = RunConfig(
        model=ModelConfig(d_model=args.width, n_layers=args.layers, n_heads=heads, max_seq_len=args.seq),
        train=TrainConfig(optimizer="adamw", lr=1e-3),
    )
    torch.manual_seed(0)
    small = build_model(cfg.model)
    small_opt = build_optimizer(small, cfg.train)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.model.vocab_size, (args.batch, args.seq), generator=g)
    y = torch.randint(0, cfg.model.vocab_size, (args.batch, args.seq), generator=g)
    for _ in range(2):  # the small model has trained: its optimizer state has steps and moments
        step(small, small_opt, x, y)
    spec = {
        "family": "width",
        "hidden": args.grown_width,
        "init": "copy,copy",
        "preserve": "rms",
        "rewarmup": {"rho": 1.3, "tau": 250},
    }
    grown, grown_cfg, grown_opt, _ = grow(small, cfg, spec, small_opt.state_dict(), step=2)
    grown.train()
    for o in grown_opt.optimizers.values():  # what the trainer's re-warmup schedule sets every step
        for group in o.param_groups:
            group["lr_new"] = 1.3 * group["lr"]
    n_masks = sum(1 for o in grown_opt.optimizers.values() for s in o.state.values() if "new_mask" in s)
    n_elem_steps = sum(
        1
        for o in grown_opt.optimizers.values()
        for s in o.state.values()
        if torch.is_tensor(s.get("step")) and s["step"].ndim > 0
    )

    torch.manual_seed(0)
    plain = build_model(grown_cfg.model).train()
    plain_opt = build_optimizer(plain, grown_cfg.train)
    for _ in range(2):  # warm-up, and the same optimizer-state age as the grown run
        step(plain, plain_opt, x, y)
        step(grown, grown_opt, x, y)
    print(
        f"{args.layers} layers, width {args.width} -> {args.grown_width}, batch {args.batch} x {args.seq}, "
        f"threads {args.threads}; grown optimizer: {n_masks} tensors with new_mask, {n_elem_steps} with "
        f"per-element steps; reference optimizer: {type(next(iter(plain_opt.optimizers.values()))).__module__}."
        f"{type(next(iter(plain_opt.optimizers.values()))).__name__}"
    )
    # the whole step and the optimizer step alone (on the gradients the last whole step left, outside the clock),
    # the four alternating who goes first round by round; the warm-up steps above stand for a warm-up round
    sides = {
        "grown": lambda: step(grown, grown_opt, x, y),
        "plain": lambda: step(plain, plain_opt, x, y),
        "grown-opt": grown_opt.step,
        "plain-opt": plain_opt.step,
    }
    times = alternate(
        sides,
        args.rounds,
        calls=args.steps,
        warmup=0,
        after_round=lambda r, t: print(
            f"  round {r}: grown {1e3 * t['grown']:.1f} ms/step, not grown {1e3 * t['plain']:.1f} ms/step, ratio "
            f"{t['grown'] / t['plain']:.3f}; optimizer step alone {1e3 * t['grown-opt']:.1f} vs "
            f"{1e3 * t['plain-opt']:.1f} ms, ratio {t['grown-opt'] / t['plain-opt']:.3f}"
        ),
    )
    ratios, opt_ratios = ratios_of(times, "grown", "plain"), ratios_of(times, "grown-opt", "plain-opt")
    print(
        f"grown / not-grown training step time: median {statistics.median(ratios):.3f}, "
        f"range [{min(ratios):.3f}, {max(ratios):.3f}] over {args.rounds} rounds (target <= 1.10)"
    )
    print(
        f"optimizer step alone: median {statistics.median(opt_ratios):.3f}, "
        f"range [{min(opt_ratios):.3f}, {max(opt_ratios):.3f}]"
    )
    emit(
        "grown-run training step vs never grown",
        ratios,
        "<= 1.10",
        met=statistics.median(ratios) <= 1.10,
        optimizer_step_ratio=statistics.median(opt_ratios),
    )


if __name__ == "__main__":
    main()
