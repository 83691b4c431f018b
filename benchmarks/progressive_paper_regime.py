"""Progressive growth in SPARKLING's regime: the small model is trained well past its compute-optimal
point before growing (>= 100 tokens per active parameter; SPARKLING grows its 450M-active model at
100B tokens, ~220 per active parameter), grown 2x along its method's axis, vs the target model from
scratch, over seeds, for every method of `nexus experiment progressive --list` (and the
nexus-vs-tokenformer pair's two members, which are methods of the list too).

Shapes are shrunk so the full setting fits about 60 minutes on a 2-core CPU: every small model is
2 layers at d_model 32 (2 heads of 16, FFN 64) on the byte tokenizer, and each method grows 2x:
  width methods  d_model 32 -> 64, FFN 64 -> 128
  nexus-rank     Q/K/V ranks M 48 -> 96, A 64 -> 128
  tokenformer    Q/K/V parameter tokens 16 -> 32
  *-matched      Nexus-Rank M 48 -> 96, A 64 -> 128 and TokenFormer 104 -> 304 tokens: equal parameters
                 per projection before (6,656) and after (19,456) growth
  retrofit-ho    order-2 higher-order attention retrofit (not a width growth; listed for completeness)
Each method's budget: grow at 50% of D, with D_e = TOKENS_PER_PARAM x the small model's active
parameters (paper recipe: cosine, warmup 3%, final lr ratio 0.01, rho 1.3, tau as the paper's ratio).

    python benchmarks/progressive_paper_regime.py                  # full: 100 tokens/param, seeds 0,1,2 (~60 min idle)
    python benchmarks/progressive_paper_regime.py --quick          # 4 tokens/param, seeds 0,1,2 (a smoke run)
    python benchmarks/progressive_paper_regime.py --methods sparkling,naive-copy --seeds 0
Prints one JSON line per method and a table (mean +- std over seeds).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time

SMALL = {"model.n_layers": 2, "model.d_model": 32, "model.n_heads": 2, "model.head_dim": 16, "model.ffn_hidden": 64,
         "train.eval_batches": 4}
# method -> (spec changes, extra small-model overrides): the 2x growth of each method at the shrunk shape
REGIME = {
    "sparkling": ({"hidden": 64, "ffn": 128}, {}),
    "sparkling-random": ({"hidden": 64, "ffn": 128}, {}),
    "naive-copy": ({"hidden": 64, "ffn": 128}, {}),
    "nexus-rank": ({"delta_m": 48, "delta_a": 64}, {"model.projection.rank_m": 48, "model.projection.rank_a": 64}),
    "nexus-rank-matched": ({"delta_m": 48, "delta_a": 64}, {"model.projection.rank_m": 48, "model.projection.rank_a": 64}),
    "tokenformer": ({"add_tokens": 16}, {"model.projection.param_tokens": 16}),
    "tokenformer-matched": ({"add_tokens": 200}, {"model.projection.param_tokens": 104}),
    "retrofit-ho": ({}, {}),
}


def regime_methods(names: list[str]) -> dict:
    """The progressive experiment's methods with the shrunk shapes and 2x growth above."""
    from nexus.experiments.progressive import METHODS

    out = {}
    for name in names:
        if name not in REGIME:
            raise SystemExit(f"--methods: {name!r} has no paper-regime shape (valid: {', '.join(REGIME)})")
        m = METHODS[name]
        spec_changes, extra = REGIME[name]
        out[name] = dataclasses.replace(m, spec={**m.spec, **spec_changes}, overrides={**m.overrides, **SMALL, **extra},
                                        description=f"{m.description} [paper regime: shrunk, 2x]")
    return out


def main() -> None:
    from nexus.experiments import progressive as P
    from nexus.experiments.curves import active_params
    from nexus.growth import families

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=None, help="comma-separated (default: every method of --list whose family is installed)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--tokens-per-param", type=float, default=100.0, help="D_e / small active params (default 100)")
    ap.add_argument("--quick", action="store_true", help="4 tokens per parameter (a smoke-size run of the same table)")
    ap.add_argument("--out", default="runs/bench-paper-regime")
    a = ap.parse_args()
    tpp = 4.0 if a.quick else a.tokens_per_param
    seeds = [int(s) for s in a.seeds.split(",")]
    installed = set(families())
    names = a.methods.split(",") if a.methods else [n for n, m in P.METHODS.items() if m.family in installed and n in REGIME]
    P.METHODS.update(regime_methods(names))
    rows = []
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        probe = P.plan_progressive(name, out="unused", seeds=[seeds[0]])  # sizes only; trains nothing
        from nexus.config import RunConfig

        small_cfg = RunConfig.from_dict(probe["configs"][str(seeds[0])]["small"])
        n_small = active_params(small_cfg.model)
        tps = probe["tokens_per_step"]
        budget = 2 * math.ceil(tpp * n_small / tps) * tps  # growth at half: D_e = tpp x N_small
        plan = P.plan_progressive(name, tokens=budget, grow_at=0.5, seeds=seeds, out=f"{a.out}/{'quick' if a.quick else 'full'}/{name}")
        r = P.run_progressive(plan, quiet=True, say=lambda *_: None)
        sm = r["summary"]
        fin = sm["final_val_loss"]
        row = {"method": name, "seeds": seeds, "tokens": r["token_budget"], "small_active_params": n_small,
               "tokens_per_param_at_growth": r["grow_at_tokens"] / n_small,
               "grown": fin["grown"], "scratch": fin["scratch"], "small": fin["small"],
               "grown_minus_scratch": sm["grown_minus_scratch_final"]["diff"],
               "paired_t_p": sm["grown_minus_scratch_final"]["t_p"],
               "measured_saved": sm["measured_flops_saved"], "eq29_saved": r["eq29"]["flops_saved"],
               "wall_s": time.perf_counter() - t0}
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)

    def ms(d, pct=False):
        if d.get("n", 0) == 0:
            return "n/a"
        k = 100 if pct else 1
        return f"{k * d['mean']:+.1f}% +- {k * d['std']:.1f}" if pct else f"{d['mean']:.4f} +- {d['std']:.4f}"

    print(f"\ntokens/param at growth {tpp:g}; seeds {a.seeds}; wall {time.perf_counter() - t_all:.0f} s")
    print("| method | tokens/param at growth | grown | scratch | small only | grown - scratch (paired t p) | "
          "measured saved at equal loss (seeds reached) | eq. 29 at equal tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p = "-" if r["paired_t_p"] is None else f"{r['paired_t_p']:.3g}"
        m = r["measured_saved"]
        print(f"| {r['method']} | {r['tokens_per_param_at_growth']:.0f} | {ms(r['grown'])} | {ms(r['scratch'])} | "
              f"{ms(r['small'])} | {r['grown_minus_scratch']['mean']:+.4f} ({p}) | {ms(m, True)} ({m['reached']}/{m['of']}) | "
              f"{100 * r['eq29_saved']:+.1f}% |")


if __name__ == "__main__":
    main()
