"""SPARKLING width growth at tiny scale on the embedded corpus (issue 5, item 9).

Same token budget for every run: a small dense model trained for half the steps, then grown
(hidden 2x and FFN 2x) and trained for the other half, against the wide model from scratch.

    naive        copy,copy init, no rescaling, copied optimizer state (symmetric), no re-warmup
    rms          + RMS-preserving rescaling (SPARKLING 3.2), still symmetric optimizer state
    rms+reset    + asymmetric optimizer-state reset (old keep, new zero)
    sparkling    + asymmetric learning-rate re-warmup of the new entries (rho 1.3)
    scratch-wide the grown shape trained from step 0

The first half is trained once per seed and checkpointed; every variant resumes it and grows in
place (the same code path as a configured growth hook). Prints final validation loss per seed and the mean,
the loss jump at growth (validation batch), and FLOPs saved per eq. 29 and from measured FLOPs.
Usage: python benchmarks/studies/width_growth.py [--steps 200 --seeds 0 1 --tau 20]
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

from nexus.analysis.compute import growth_compute
from nexus.presets import get_preset
from nexus.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402

VARIANTS = {
    "naive": {"preserve": "none", "optimizer_state": "copy"},
    "rms": {"preserve": "rms", "optimizer_state": "copy"},
    "rms+reset": {"preserve": "rms", "optimizer_state": "asymmetric"},
    "sparkling": {"preserve": "rms", "optimizer_state": "asymmetric", "rewarmup": "REWARMUP"},
}


def small_config(steps: int, seed: int, out: Path):
    cfg = get_preset("sparkling-dense-tiny-legacy")  # the recipe its recorded results were measured with
    m = cfg.model
    m.n_layers, m.d_model, m.n_heads, m.head_dim, m.ffn_hidden = 2, 64, 4, 16, 128
    cfg.data.seq_len, cfg.train.batch_size = 64, 8
    t = cfg.train
    t.steps, t.warmup_steps, t.seed, t.lr, t.eval_every, t.eval_batches = steps, steps // 12, seed, 3e-3, 0, 16
    t.log_every, t.out_dir = 10, str(out)
    t.dtype = "float32"  # pinned: the study keeps its numerics if the default (auto) moves
    t.drop_hook("growth")
    return cfg


def final_val(trainer) -> float:
    trainer.cfg.train.sample_tokens = 1  # the end-of-run sample is not what we measure
    return trainer.fit()["val_loss"]


def train_small_until(cfg, step: int, ckpt: Path) -> None:
    """The shared first half: train the small model to the growth step and checkpoint it."""
    trainer = Trainer(cfg, quiet=True)
    while trainer.step < step:
        trainer.run_step()  # a step as fit() takes it: counters advanced, hooks fired
    trainer.save(ckpt)


def grown_run(cfg, ckpt: Path, spec: dict) -> tuple[float, dict]:
    """Resume the small checkpoint, grow in place (the in-training path), train the second half."""
    from nexus.growth.hook import grow_in_training

    trainer = Trainer(cfg, resume=str(ckpt), quiet=True)
    report = grow_in_training(trainer, spec)
    return final_val(trainer), report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="total optimizer steps of every run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--tau", type=int, default=20, help="re-warmup steps (paper: 250 of ~32k post-growth steps)")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    grow_at = args.steps // 2
    results: dict[str, list] = {k: [] for k in [*VARIANTS, "scratch-wide"]}
    jumps: dict[str, list] = {k: [] for k in VARIANTS}
    clock = StepTimer().start()  # progress lines say how long the study has run
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            ckpt = Path(tmp) / f"small-{seed}"
            train_small_until(small_config(args.steps, seed, Path(tmp) / f"small-run-{seed}"), grow_at, ckpt)
            for name, opts in VARIANTS.items():
                cfg = small_config(args.steps, seed, Path(tmp) / f"{name}-{seed}")
                spec = {"family": "width", "hidden": 128, "ffn": 256, "init": "copy,copy", **opts}
                if spec.get("rewarmup") == "REWARMUP":
                    spec["rewarmup"] = [1.3, args.tau]
                loss, event = grown_run(cfg, ckpt, spec)
                results[name].append(loss)
                jumps[name].append(event.get("loss_jump", float("nan")))
                print(
                    f"seed {seed} {name:12s} val {loss:.4f} jump {jumps[name][-1]:+.4f} "
                    f"rms ratio {event.get('rms_ratio_per_layer')}  ({clock.so_far().wall:.0f}s)",
                    flush=True,
                )
            wide = small_config(args.steps, seed, Path(tmp) / f"wide-{seed}")
            wide.model.d_model, wide.model.ffn_hidden = 128, 256
            loss = final_val(Trainer(wide, quiet=True))
            results["scratch-wide"].append(loss)
            print(f"seed {seed} scratch-wide val {loss:.4f}  ({clock.so_far().wall:.0f}s)", flush=True)
    small, large = (
        small_config(args.steps, 0, Path(".")).model,
        copy.deepcopy(small_config(args.steps, 0, Path(".")).model),
    )
    large.d_model, large.ffn_hidden = 128, 256
    tokens_per_step = 8 * 64
    comp = growth_compute(small, large, grow_at * tokens_per_step, args.steps * tokens_per_step, 64)
    print(f"\nwidth growth 64->128 hidden, 128->256 FFN at step {grow_at}/{args.steps}, seeds {args.seeds}")
    print(f"{'variant':14s} " + " ".join(f"seed{s:<5d}" for s in args.seeds) + "   mean    jump@growth")
    for name, losses in results.items():
        j = jumps.get(name)
        jtxt = f"{sum(j) / len(j):+.4f}" if j else "   -"
        print(f"{name:14s} " + " ".join(f"{v:.4f}   " for v in losses) + f" {sum(losses) / len(losses):.4f}   {jtxt}")
    print(f"\nactive params small/large: {comp['active_params_small']:,} / {comp['active_params_large']:,}")
    print(
        f"FLOPs saved vs scratch-wide: eq. 29 (6ND) {comp['saved_eq29']:.1%}, "
        f"measured FLOPs {comp['saved_measured']:.1%}"
    )
    print(f"total time {clock.so_far().wall:.0f}s")
    for name in VARIANTS:
        emit(
            f"width growth {name} - scratch-wide final val loss (paired by seed, {args.steps} steps)",
            [g - w for g, w in zip(results[name], results["scratch-wide"])],
            "report (< 0: growth beat scratch)",
            unit="nats",
            seeds=args.seeds,
            saved_eq29=round(comp["saved_eq29"], 4),
        )


if __name__ == "__main__":
    main()
