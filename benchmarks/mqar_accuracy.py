"""MQAR accuracy of baseline vs order-2 higher-order attention at tiny scale, several seeds.

    python benchmarks/mqar_accuracy.py [--seeds 0 1] [--steps 600] [--task mqar]

Trains the `<task>-baseline` and `<task>-order2` presets (2 x 64, identical except for the attention
order) from scratch per seed with the regular Trainer, then reports accuracy on held-out batches
(nexus.eval.synthetic_eval: argmax at the scored positions) and the wall time of each run.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from nexus.data.synthetic import make_task
from nexus.eval.synthetic_eval import task_accuracy
from nexus.presets import get_preset
from nexus.train.trainer import Trainer


def run(preset: str, seed: int, steps: int, out_dir: str) -> dict:
    cfg = get_preset(preset)
    cfg.train.seed, cfg.train.steps, cfg.train.out_dir = seed, steps, out_dir
    cfg.train.eval_every = 0
    cfg.validate()
    t0 = time.perf_counter()
    trainer = Trainer(cfg, quiet=True)
    res = trainer.fit()
    wall = time.perf_counter() - t0
    task = make_task(cfg.data.source.split(":", 1)[1], cfg.data.synthetic, cfg.data.seq_len)
    acc = task_accuracy(trainer.model, task, n_batches=8, batch_size=64)
    return {"preset": preset, "seed": seed, "accuracy": acc["accuracy"], "scored": acc["scored"],
            "val_loss": res.get("val_loss"), "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="mqar", choices=["mqar", "khop"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for preset in (f"{args.task}-baseline", f"{args.task}-order2"):
                r = run(preset, seed, args.steps, f"{tmp}/{preset}-{seed}")
                rows.append(r)
                print(f"{r['preset']:>14} seed {seed}: accuracy {r['accuracy']:.4f} ({r['scored']} queries) "
                      f"val_loss {r['val_loss']:.4f} wall {r['wall_s']:.0f} s", flush=True)
    for preset in (f"{args.task}-baseline", f"{args.task}-order2"):
        accs = [r["accuracy"] for r in rows if r["preset"] == preset]
        print(f"{preset:>14}: mean accuracy {statistics.mean(accs):.4f} over seeds {args.seeds} ({args.steps} steps)")


if __name__ == "__main__":
    main()
