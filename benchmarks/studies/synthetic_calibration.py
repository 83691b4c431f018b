"""Calibration sweep for the synthetic tasks: held-out accuracy curve of a small Transformer while it
trains, per attention order, one seed. Used to choose task settings where the standard model ends
between chance and 100% (docs/higher_order.md); the comparison itself is higher_order_tasks.py.

    python benchmarks/studies/synthetic_calibration.py --task mqar --opts '{"vocab": 64, "pairs": 16}' \
--lr 1e-3 --steps 1000 --every 200

A plain loop, not the Trainer, so one run gives the whole curve: AdamW (0.9, 0.95), no weight decay,
constant LR after 30 linear warmup steps, clip 1.0, batch --bs of fresh task batches (generator seed
seed + 1000); every --every steps the accuracy on 4 held-out batches of 64 (nexus.eval.synthetic_eval).
Order m > 1 uses the presets' form: Q and K refined, shared inner weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from nexus.config import AttentionOptions, ModelConfig
from nexus.data.synthetic import make_task
from nexus.eval.synthetic_eval import task_accuracy
from nexus.models import build_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402


def model_config(a, order: int, vocab_size: int) -> ModelConfig:
    """The small Transformer of --d/--layers/--heads; order 1 is standard attention (the higher-order kind
    takes orders >= 2 only), order m > 1 the presets' higher-order form."""
    cfg = ModelConfig(
        d_model=a.d, n_layers=a.layers, n_heads=a.heads, max_seq_len=max(128, a.seq), vocab_size=max(64, vocab_size)
    )
    if order > 1:
        cfg.attention = AttentionOptions.make("higher_order", order=order, ho_targets="qk", ho_shared=True)
    return cfg


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="mqar")
    p.add_argument("--opts", default="{}", help="task options as JSON")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--orders", type=int, nargs="+", default=[1])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(1)
    print_machine()  # CPU model and capability beside the figures below
    task = make_task(a.task, json.loads(a.opts), a.seq)
    for order in a.orders:
        torch.manual_seed(a.seed)
        model = build_model(model_config(a, order, task.vocab_size))
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
        g = torch.Generator().manual_seed(a.seed + 1000)
        clock, curve = StepTimer().start(), []
        for step in range(1, a.steps + 1):
            x, y = task.batch(a.bs, g)
            loss = model(x, labels=y).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % a.every == 0:
                curve.append(round(task_accuracy(model, task, n_batches=4, batch_size=64)["accuracy"], 3))
        print(
            f"{a.task} {a.opts} seq {a.seq} lr {a.lr} order {order} seed {a.seed}: accuracy every {a.every} steps "
            f"{curve} (cpu {clock.so_far().cpu:.0f} s)",
            flush=True,
        )
        final = (
            curve[-1]
            if a.steps % a.every == 0 and curve
            else round(task_accuracy(model, task, n_batches=4, batch_size=64)["accuracy"], 3)
        )  # the curve ends before the last step
        emit(
            f"{a.task} {a.opts} order {order}: held-out accuracy after {a.steps} steps (seed {a.seed})",
            [final],
            "report (calibrated: between chance and 1)",
            unit="accuracy",
            curve=curve,
            every=a.every,
            lr=a.lr,
        )


if __name__ == "__main__":
    main()
