"""Issue 47 item 3's study `nexus-rank-vs-tokenformer`: Nexusformer's question (does Nexus-Rank growth keep more of
what a larger model would learn than TokenFormer growth?) at a regime where each family's larger model beats its
smaller one. Data for benchmarks/studies/regime_study.py (`--study nexus-rank-vs-tokenformer`) and its summary.

Pre-stated (2026-12-07, before any run of this study):
  regime     the two families of progressive_regime.ARCH_SHAPES at d 64 (4 layers, 4 heads of 16, FFN 128, the
             SPARKLING recipe), Q/K/V projections matched in parameters (15,488 -> 31,744 each), each grown 2x from
             its own small base after 10 tokens per active parameter of that small model, as many steps after
             growth as before, scratch (the grown shape) on the same total tokens; the stdlib corpus; fp32.
  tuning     per shape (each family's small and scratch), 3 peak lrs a factor 2 apart on tuning seeds 100 and
             101, extended a factor 2 at a time past an edge that holds the best (the 4th lr and on), the lowest
             mean over both seeds chosen.
  pilot      the tuning itself: at the chosen lrs, each family's scratch must end below its small model by >= 4
             standard errors of the paired difference over the tuning seeds. Where a family fails, the test is
             void: the card says so with the pilot's numbers and no difference of gains is reported.
  evaluation seeds 0-4 (never tuned on): per family prefix, small, grown, scratch.
  estimand   per seed each family's share of its own gap, (small - grown) / (small - scratch); the paired
             difference Nexus-Rank minus TokenFormer over seeds with its 95% interval; and the difference of growth
             gains (small - grown), which needs no gap. A share is reported only where its family's gap exceeds 4
             standard errors over the evaluation seeds.
"""

from __future__ import annotations

from nexus.experiments.study_parts import Arms, LrGrid

STUDY = "nexus-rank-vs-tokenformer"
SCALE = "arch"  # progressive_regime.SCALES: growth after 10 tokens per parameter of each small model
TUNING_SEEDS = (100, 101)
EVAL_SEEDS = (0, 1, 2, 3, 4)
FAMILIES = ("nexus-rank-regime", "tokenformer-regime")
# 3 lrs a factor 2 apart around progressive-main's arch picks (Nexus-Rank small 4e-3, the others 2e-3), in the order
# they run; an edge that holds a shape's best is extended by the next lr of EXTENSION (then the part is run again)
TUNE_LRS = (4e-3, 8e-3, 2e-3)
GAP_SES = 4.0
PARTS = ("tune", "eval")
NEEDS = {"eval": "tune"}


def study_parts(tune_lrs=TUNE_LRS) -> dict:
    return {
        "tune": LrGrid(FAMILIES, TUNING_SEEDS, "tune/", tuple(tune_lrs)),
        "eval": Arms(FAMILIES, EVAL_SEEDS, tuned_by="tune", untuned_lrs=tune_lrs[0]),
    }


def pilot(parts: dict, ledger) -> dict | None:
    """Per family: small - scratch at the chosen lrs over the tuning seeds, in standard errors."""
    from nexus.experiments.stats import in_standard_errors

    c = parts["tune"]["choice"]
    if not c["complete"]:
        return None
    plan = parts["eval"]["plans"][0]
    out = {}
    for fam in FAMILIES:
        base = next(b for b in plan["bases"].values() if fam in b["methods"])
        small_shape = base["small_run"]
        scratch_shape = next(r["shape"] for r in plan["runs"].values() if r.get("method") == fam)
        row = {
            shape: [r for r in c["table"][shape] if r["lr"] == c["best"][shape]][0]["losses"]
            for shape in (small_shape, scratch_shape)
        }
        diffs = [row[small_shape][s] - row[scratch_shape][s] for s in sorted(row[small_shape])]
        g = in_standard_errors(diffs)
        out[fam] = {
            "small_minus_scratch": g["mean"],
            "se": g["se"],
            "ses": g["ses"],
            "passes": g["mean"] > 0 and g["ses"] >= GAP_SES,
            "edge": c["edge"],
        }
    return out


def summarize(parts: dict, ledger, say) -> dict:
    from nexus.experiments.stats import fmt, in_standard_errors, paired

    out: dict = {"pilot": pilot(parts, ledger)}
    for fam, p in (out["pilot"] or {}).items():
        say(
            f"pilot {fam} (tuning seeds {','.join(map(str, TUNING_SEEDS))}, chosen lrs): small - scratch "
            f"{p['small_minus_scratch']:+.4f} = {p['ses']:.1f} SE "
            f"({'passes' if p['passes'] else 'FAILS: the test is void'})"
        )
    ev = parts["eval"]
    if not (ev.get("tuned") and all(ledger.holds(k, r["cfg"]) for k, r in ev["runs"].items())):
        held = sum(ledger.holds(k, r["cfg"]) for k, r in ev["runs"].items())
        say(f"eval: {held} of {len(ev['runs'])} runs in the ledger; not summarized yet")
        return out
    plan = ev["plans"][0]
    per = {}
    for fam in FAMILIES:
        base = next(b for b in plan["bases"].values() if fam in b["methods"])
        shape = plan["runs"][f"seed{EVAL_SEEDS[0]}/{fam}"]["shape"]
        sm = [ledger.final_val_loss(f"seed{sd}/{base['small_run']}") for sd in EVAL_SEEDS]
        gr = [ledger.final_val_loss(f"seed{sd}/{fam}") for sd in EVAL_SEEDS]
        sc = [ledger.final_val_loss(f"seed{sd}/scratch-{shape}") for sd in EVAL_SEEDS]
        gap_ses = in_standard_errors([a - c for a, c in zip(sm, sc)])["ses"]
        per[fam] = {
            "gain": [a - g for a, g in zip(sm, gr)],
            "gap_ses": gap_ses,
            "share": [(a - g) / (a - c) for a, g, c in zip(sm, gr, sc)],
        }
        say(f"{fam}: growth gain (small - grown) {fmt(paired(sm, gr)['diff'])}; small - scratch gap {gap_ses:.1f} SE")
    a, b = FAMILIES
    out["gain_difference"] = paired(per[a]["gain"], per[b]["gain"])
    say(f"growth gain, {a} minus {b}: {fmt(out['gain_difference']['diff'])}")
    if all(per[f]["gap_ses"] >= GAP_SES for f in FAMILIES):
        out["share_difference"] = paired(per[a]["share"], per[b]["share"])
        say(f"share of own gap closed, {a} minus {b} (per seed, paired): {fmt(out['share_difference']['diff'])}")
    else:
        say(f"share of own gap: not compared (a family's small-to-scratch gap is under {GAP_SES:g} SE)")
    out["per_family"] = per
    return out
