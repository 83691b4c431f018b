"""Compute saved (or lost) by every installed growth method on the quick progressive experiment.

For each method: the grown run and the from-scratch target run on the same token budget (the
reference run of the ratio). Prints, per method, the final validation losses, the measured FLOPs
saved (grown FLOPs to reach the scratch final loss / scratch FLOPs) and eq. 29's FLOPs saved at
equal tokens. Methods whose scratch configuration is identical (the width methods) share one
scratch run: its directory is copied, and the copy is skipped as finished.

    python benchmarks/progressive_methods.py                      # quick budget (~5 min per run pair)
    python benchmarks/progressive_methods.py --tokens 102400      # shorter
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path


def _scratch_key(plan: dict) -> str:
    cfg = json.loads(json.dumps(plan["configs"]["scratch"]))
    cfg["train"].pop("out_dir", None)
    cfg.pop("preset", None)
    return json.dumps(cfg, sort_keys=True)


def main() -> None:
    from nexus.experiments.progressive import METHODS, plan_progressive, run_progressive
    from nexus.growth import families

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=None, help="comma-separated (default: every method whose family is installed)")
    ap.add_argument("--tokens", type=int, default=None, help="token budget per run (default: the quick budget)")
    ap.add_argument("--grow-at", type=float, default=0.5)
    ap.add_argument("--out", default="runs/bench-progressive")
    ap.add_argument("overrides", nargs="*", help="dotted overrides for every run, e.g. train.eval_batches=4")
    a = ap.parse_args()
    installed = set(families())
    names = a.methods.split(",") if a.methods else [m for m, meth in METHODS.items() if meth.family in installed]
    overrides = [f"--{o}" if o.startswith(("model.", "train.", "data.")) else o for o in a.overrides]
    scratch_done: dict[str, Path] = {}
    rows = []
    for name in names:
        t0 = time.perf_counter()
        plan = plan_progressive(name, overrides=overrides, tokens=a.tokens, grow_at=a.grow_at, out=f"{a.out}/{name}")
        key = _scratch_key(plan)
        dst = Path(plan["out_dir"]) / "scratch"
        if key in scratch_done and not dst.exists():
            shutil.copytree(scratch_done[key], dst)
        r = run_progressive(plan, quiet=True, say=lambda *_: None)
        scratch_done.setdefault(key, dst)
        rows.append({"method": name, "grown": r["runs"]["grown"]["final_val_loss"],
                     "scratch": r["runs"]["scratch"]["final_val_loss"], "measured_saved": r["measured_flops_saved"],
                     "eq29_saved": r["eq29"]["flops_saved"], "scratch_at_grown_flops": r["scratch_val_loss_at_grown_flops"], "grown_flops": r["runs"]["grown"]["total_flops"],
                     "scratch_flops": r["runs"]["scratch"]["total_flops"], "wall_s": time.perf_counter() - t0,
                     "tokens": r["token_budget"]})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'method':18s} {'grown':>8s} {'scratch':>8s} {'gap':>8s} {'measured saved':>15s} {'eq29 saved':>11s} "
          f"{'grown/scratch FLOPs':>20s}")
    for r in rows:
        ms = "not reached" if r["measured_saved"] is None else f"{100 * r['measured_saved']:+.1f}%"
        print(f"{r['method']:18s} {r['grown']:8.4f} {r['scratch']:8.4f} {r['grown'] - r['scratch']:+8.4f} {ms:>15s} "
              f"{100 * r['eq29_saved']:+10.1f}% {r['grown_flops'] / r['scratch_flops']:20.3f}")


if __name__ == "__main__":
    main()
