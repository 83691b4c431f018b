"""Compute saved (or lost) by every installed growth method on the quick progressive experiment.

For each method: `nexus experiment progressive` (grown, scratch at the target size, small only; paper
recipe) over --seeds. Prints, per method, the final validation losses (mean +- std), the paired
grown - scratch difference, the measured FLOPs saved at equal loss (grown FLOPs to reach the scratch
final loss / scratch FLOPs, over the seeds that reached it) and eq. 29's FLOPs saved at equal tokens.
Method pairs (nexus-vs-tokenformer) are run by `nexus experiment progressive --method PAIR`.

    python benchmarks/studies/progressive_methods.py                        # quick budget, seeds 0,1,2
    python benchmarks/studies/progressive_methods.py --tokens 102400 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402


def main() -> None:
    from nexus.experiments.progressive import methods, plan_progressive, run_progressive
    from nexus.growth import families

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=None, help="comma-separated (default: every method whose family is installed)")
    ap.add_argument("--tokens", type=int, default=None, help="token budget per run (default: the quick budget)")
    ap.add_argument("--grow-at", type=float, default=0.5)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default="runs/bench-progressive")
    ap.add_argument("overrides", nargs="*", help="dotted overrides for every run, e.g. train.eval_batches=4")
    a = ap.parse_args()
    installed = set(families())
    names = a.methods.split(",") if a.methods else [m for m, meth in methods().items() if meth.family in installed]
    overrides = [f"--{o}" if o.startswith(("model.", "train.", "data.")) else o for o in a.overrides]
    seeds = [int(s) for s in a.seeds.split(",")]
    print_machine()  # CPU model and capability beside the figures below
    rows = []
    for name in names:
        with StepTimer() as t:
            plan = plan_progressive(
                name, overrides=overrides, tokens=a.tokens, grow_at=a.grow_at, seeds=seeds, out=f"{a.out}/{name}"
            )
            r = run_progressive(plan, quiet=True, say=lambda *_: None)
        sm = r["summary"]
        rows.append(
            {
                "method": name,
                "seeds": seeds,
                "final": sm["final_val_loss"],
                "grown_minus_scratch": sm["grown_minus_scratch_final"],
                "measured_saved": sm["measured_flops_saved"],
                "eq29_saved": r["eq29"]["flops_saved"],
                "tokens": r["token_budget"],
                "wall_s": t.elapsed.wall,
            }
        )
        print(json.dumps(rows[-1], default=str), flush=True)
        finals = [v["runs"] for v in r["per_seed"].values()]
        emit(
            f"{name}: grown - scratch final val loss (paired by seed, {r['token_budget']:,} tokens)",
            [f["grown"]["final_val_loss"] - f["scratch"]["final_val_loss"] for f in finals],
            "report (< 0: growth beat scratch)",
            unit="nats",
            seeds=seeds,
            t_p=sm["grown_minus_scratch_final"]["t_p"],
            eq29_saved=r["eq29"]["flops_saved"],
        )
    print(f"\nseeds {a.seeds}; mean +- std over seeds")
    print(
        f"{'method':20s} {'grown':>16s} {'scratch':>16s} {'small':>16s} {'grown-scratch':>14s} {'p (paired t)':>12s} "
        f"{'measured saved':>22s} {'eq29 saved':>11s}"
    )
    for r in rows:
        f = r["final"]
        d = r["grown_minus_scratch"]
        m = r["measured_saved"]
        ms = "not reached" if m["reached"] == 0 else f"{100 * m['mean']:+.1f}% ({m['reached']}/{m['of']})"
        p = "-" if d["t_p"] is None else f"{d['t_p']:.3g}"
        print(
            f"{r['method']:20s} "
            + " ".join(f"{f[k]['mean']:.4f}+-{f[k]['std']:.4f}" for k in ("grown", "scratch", "small"))
            + f" {d['diff']['mean']:+14.4f} {p:>12s} {ms:>22s} {100 * r['eq29_saved']:+10.1f}%"
        )


if __name__ == "__main__":
    main()
