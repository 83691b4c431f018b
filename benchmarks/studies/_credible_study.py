"""Issue 47's study `sparkling-credible`: SPARKLING's question at a regime where growth effects can exceed schedule
effects, with every lr change at growth matched by its no-growth control. Data for benchmarks/studies/regime_study.py
(`--study sparkling-credible`), and the summary its ledger supports.

Pre-stated (2026-12-07, before any run of this study):
  regime     small 4 x d64, 4 heads of 16, FFN 128 -> 256 (SPARKLING's copy + RMS rescale, asymmetric state,
             re-warmup rho 1.3); growth after 20 tokens per active parameter of the small model; as many steps after
             growth as before; scratch (FFN 256) trained on the same total tokens; 16 x 128 tokens per step; the
             stdlib corpus (no token repeats within a run: refused otherwise); fp32 on the CPU (pinned by the plan).
  tuning     successive halving on tuning seeds only: 4 peak lrs a factor 2 apart on seed 100 for the small and the
             scratch shape, extended a factor 2 at a time past an edge that holds the best (rule stated 2026-12-07,
             after the first 4: both shapes' best was the low edge, 8e-3, so 4e-3 and 2e-3 were added), the best 2
             of each on seed 101, the lowest mean over both seeds chosen (`tune`, `tune-halving`); \
then the continuation lr at growth, x1 (the paper: the small model's lr is kept) or x2,
             for the small model and the grown one, on both tuning seeds (`tune-cont`).
  evaluation seeds 0-7 (never tuned on): the prefix to the growth step, then from it: small (x1), small@lr2x,
             sparkling (x1), sparkling@lr2x; scratch at its tuned lr. Both multipliers run whatever tune-cont picks,
             so the arm at the tuned continuation lr and its lr-matched control are always there.
  estimand   (primary) grown - scratch final validation loss, paired by seed, at equal tokens and at equal FLOPs
             (scratch's loss at the grown run's total FLOPs, read off its curve), with an equivalence margin of
             0.01 nats: "reaches the wide model's loss" is supported when the 95% interval's upper end is below
             +0.01, refuted when its lower end is above +0.01, undetermined otherwise.
             growth's own effect: grown - small continued at the same lr (x1 with x1, x2 with x2), paired.
             the share of the small-to-scratch gap closed, only where that gap exceeds 4 standard errors.
  pilot      the tuning seeds at the chosen lrs must show scratch below small by >= 4 standard errors of the paired
             difference before the evaluation is worth running (printed by --plot as `pilot`).
  bracket    (added 2026-12-07 before its runs, evaluation seeds 0-2, from the same prefixes) SPARKLING's naive
             expansion as a bracket, not a guess: (a) `naive-copy-locked`, the literal copy (no rescale, copied
             state, no re-warmup); (b) `naive-copy-random`, Fig. 1's one-side pair: up/gate copied, down random,
             unscaled, copied state; (c) `natural`, the natural implementation: copy, unscaled, the old entries keep
             their optimizer state and the new start fresh (asymmetric), no re-warmup; (d) `perturb-<k>`, the
             Perturb heuristic (App. H: copies kicked by +-eps, zero-sum) at eps = 2^-k of the weights' std, k in
             {8, 6, 4, 2} (perturb-8 was `naive-copy` in progressive-main). Each arm's symmetry lock at the end
             (how far each copied unit moved from its twin) is read from its run's metrics.
  horizon    (added 2026-12-07 before its runs, evaluation seeds 0-2; issue 47 item 4) grown - scratch as a function of
             the post-growth budget from one set of runs, on nexus's WSD schedule (train.schedule wsd: linear warmup,
             flat at the peak, then linear to 0.01 x peak over the last 20% of the horizon). WSD is NOT the paper's
             cosine: the scan asks how the estimand moves with the budget; its 1x point is set beside eval's cosine 1x
             on the same seeds, never pooled with it. Per seed: a WSD prefix (the small model at its tuned 8e-3, stable
             to the growth step 1769: no decay before growth); from it sparkling@lr2x (grown at 1769, then 2 x 8e-3,
             tune-cont's pick for the grown run) and its lr-matched no-growth control small@lr2x (2 x 8e-3 from 1769,
             tune-cont's pick for the small run too); scratch (FFN 256, its tuned 8e-3) from step 0. Each arm is one
             stable-phase run (in segments, each continuing the one before from its checkpoint) with a decay branched
             from it per horizon: horizon k in {1, 2, 4} (k x 1769 steps after growth) ends at T_k = (1 + k) x 1769 =
             3538 / 5307 / 8845 steps in all, its decay over its own last 20% (708 / 1061 / 1769 steps, from steps
             2830 / 4246 / 7076), so the grown, small and scratch runs of a horizon train on equal total tokens, decay
             included (1x: eval's budget). Warmup (106 steps), re-warmup (rho 1.3, tau 14 steps), evaluation cadence,
             batch and numerics are eval's 1x runs'; the lrs are the cosine tuning's, not retuned for WSD. Each decay
             branch is the single run with its decay at D_k, bit for bit (nexus.experiments.branch refuses a branch
             whose lr before its branch point differs from its segment's; tests/test_horizon_branch.py trains both).
             Corpus:
             the 4x runs draw (1 + 4) x 1769 x 16 x 128 = 18,114,560 tokens, 0.59 of the stdlib training split
             (30,542,036): no token repeats, so 1x, 2x and 4x all run. Estimand per horizon, paired by seed with 95% t
             intervals: grown - scratch at equal tokens (the 0.01 margin's verdict, as eval's), grown - small@lr2x
             (growth's own effect), and the change of grown - scratch from 1x (the trend, each seed its own baseline).
             Not estimated: equal FLOPs (a WSD curve between decays is not a model trained to that budget). Seeds 0-2
             bound the cost (the bracket's seeds; 57 runs, 90,219 steps: 2.6 CPU-hours at the idle-core rate, 4.4 at
             the 5.8 steps/s the study's runs got under load on 2026-12-07; 8 seeds would take 2.7 times as long):
             with 2 degrees of freedom an interval is ~2.5 standard deviations of the paired difference wide on each
             side (tuning seeds: grown - scratch +0.014 and +0.027), so the scan resolves a trend of a few hundredths
             of a nat, not the 0.01 margin; eval's 8 seeds carry the primary estimand.
"""

from __future__ import annotations

from nexus.experiments.study_parts import Arms, Horizon, LrGrid

STUDY = "sparkling-credible"
SCALE = "credible"
TUNING_SEEDS = (100, 101)  # never evaluation seeds
EVAL_SEEDS = tuple(range(8))
# the first round's 4 lrs, in the order they run: the 40-tokens/parameter sweep's optima (3.2e-2 small, 1.6e-2
# scratch, seed 0 of issue 29) first
TUNE_LRS = (1.6e-2, 3.2e-2, 8e-3, 6.4e-2, 4e-3, 2e-3)  # the last two: the extension past the low edge
TOP_K = 2
LR_MULT = 2  # the continuation lr at growth tried beside x1
MARGIN = 0.01  # nats: the equivalence margin of grown - scratch, stated before any run
GAP_SES = 4.0  # the small-to-scratch gap must exceed this many standard errors for a share to be reported
ARMS = ("sparkling", f"sparkling@lr{LR_MULT}x")
BRACKET_SEEDS = (0, 1, 2)
PERTURB_EXPONENTS = (8, 6, 4, 2)
BRACKET = ("naive-copy-locked", "naive-copy-random", "natural", *(f"perturb-{k}" for k in PERTURB_EXPONENTS))
# the horizon scan (issue 47 item 4): WSD decays branched from one stable-phase run per arm and seed
HORIZON_SEEDS = (0, 1, 2)
HORIZONS = (1, 2, 4)  # post-growth steps as multiples of the pre-growth steps (eval's budget is 1x)
HORIZON_DECAY_FRACTION = 0.2  # each horizon's decay: its last 20% of steps (nexus's wsd default), linear to 0.01
HORIZON_ARM = ARMS[1]  # sparkling@lr2x: the grown arm at tune-cont's pick (x2 for both kinds, 2026-12-07 18:09)
HORIZON_CONTROL = f"small@lr{LR_MULT}x"  # its lr-matched no-growth control
PARTS = ("tune", "tune-halving", "tune-cont", "eval", "bracket", "horizon")
# before the tuning is complete, parts are planned at these lrs (cost only: no run trains at them)
ESTIMATE_ONLY_LRS = {"small": 3.2e-2, "d64-ffn256": 1.6e-2}
# part -> the part whose tuning it needs complete in the ledger
NEEDS = {
    "tune-halving": "tune",
    "tune-cont": "tune-halving",
    "eval": "tune-halving",
    "bracket": "tune-halving",
    "horizon": "tune-halving",
}


def bracket_methods() -> dict:
    """The naive bracket's arms as the study's own methods (the library's `--list` stays as it is), each the FFN-axis
    growth of `sparkling`'s small model with one stated spec."""
    from nexus.experiments import progressive as P

    naive = {
        "init": "copy,copy",
        "preserve": "none",
        "optimizer_state": "copy",
    }  # naive-copy-locked's spec: no re-warmup
    arms = {
        "naive-copy-random": {**naive, "init": "copy,random"},
        "natural": {**naive, "optimizer_state": "asymmetric"},
        **{f"perturb-{k}": {**naive, "perturb": 2.0**-k} for k in PERTURB_EXPONENTS},
    }
    return {
        name: P.method_variant("naive-copy-locked", name=name, spec=spec, note=f"sparkling-credible bracket: {name}")
        for name, spec in arms.items()
    }


def study_parts(tune_lrs=TUNE_LRS) -> dict:
    """The study as data, in the order it is built (each tuning round before what it tunes)."""
    tuned = dict(tuned_by="tune-halving", untuned_lrs=ESTIMATE_ONLY_LRS, small_lr_mults=(LR_MULT,))
    return {
        "tune": LrGrid(ARMS[:1], TUNING_SEEDS[:1], "tune/", tuple(tune_lrs)),
        "tune-halving": LrGrid(ARMS[:1], TUNING_SEEDS[1:], "tune/", top_of="tune", top_k=TOP_K),
        "tune-cont": Arms(ARMS, TUNING_SEEDS, ns="tune-cont/", scratch_seeds=(), **tuned),
        "eval": Arms(ARMS, EVAL_SEEDS, **tuned),
        # the bracket branches from the evaluation's prefixes of its seeds: its runs are paired with eval's
        "bracket": Arms(
            BRACKET, BRACKET_SEEDS, tuned_by="tune-halving", untuned_lrs=ESTIMATE_ONLY_LRS, scratch_seeds=()
        ),
        # its own WSD prefixes (eval's are cosine, decaying before growth): paired with eval only by seed
        "horizon": Horizon(
            (HORIZON_ARM,),
            HORIZON_SEEDS,
            tuned_by="tune-halving",
            untuned_lrs=ESTIMATE_ONLY_LRS,
            horizons=HORIZONS,
            decay_fraction=HORIZON_DECAY_FRACTION,
            ns="horizon/",
            small_lr_mults=(LR_MULT,),
            controls=(HORIZON_CONTROL,),
        ),
    }


# ----------------------------------------------------------------------------- the summary
def _verdict(ci_low: float, ci_high: float, margin: float = MARGIN) -> str:
    if ci_high < margin:
        return f"supported (95% CI upper end {ci_high:+.4f} < +{margin:g})"
    if ci_low > margin:
        return f"refuted (95% CI lower end {ci_low:+.4f} > +{margin:g})"
    return f"undetermined at this scale (95% CI [{ci_low:+.4f}, {ci_high:+.4f}] straddles +{margin:g})"


def continuation_choice(parts: dict, ledger) -> dict | None:
    """tune-cont's pick per arm kind (small, grown): x1 or x2 by the mean final loss over the tuning seeds."""
    runs = parts["tune-cont"]["runs"]
    if not parts["tune-cont"].get("tuned") or not all(ledger.holds(k, r["cfg"]) for k, r in runs.items()):
        return None
    mean = {}
    for label, suffix in (
        ("small x1", "small"),
        (f"small x{LR_MULT}", f"small@lr{LR_MULT}x"),
        ("sparkling x1", ARMS[0]),
        (f"sparkling x{LR_MULT}", ARMS[1]),
    ):
        vals = [ledger.final_val_loss(f"tune-cont/seed{sd}/{suffix}") for sd in TUNING_SEEDS]
        mean[label] = sum(vals) / len(vals)
    pick = {k: min((1, LR_MULT), key=lambda m: mean[f"{k} x{m}"]) for k in ("small", "sparkling")}
    return {"mean": mean, "pick": pick}


def pilot(parts: dict, ledger) -> dict | None:
    """Scratch below small on the tuning seeds at the chosen lrs, in standard errors of the paired difference."""
    from nexus.experiments.stats import in_standard_errors

    c = parts["tune-halving"]["choice"]
    if not c["complete"]:
        return None
    sm = [r for r in c["table"]["small"] if r["lr"] == c["best"]["small"]][0]["losses"]
    sc_shape = next(k for k in c["table"] if k != "small")
    sc = [r for r in c["table"][sc_shape] if r["lr"] == c["best"][sc_shape]][0]["losses"]
    seeds = sorted(sm)
    g = in_standard_errors([sm[s] - sc[s] for s in seeds])
    return {
        "small_minus_scratch": g["mean"],
        "se": g["se"],
        "ses": g["ses"],
        "seeds": seeds,
        "passes": g["mean"] > 0 and g["ses"] >= GAP_SES,
    }


def summarize(parts: dict, ledger, plan_summary, say) -> dict:
    """Every number the card reports, from the ledger alone: the pilot, the continuation pick, the primary estimand
    per arm at equal tokens and equal FLOPs, growth's own effect against the lr-matched control, and the share of
    the gap where the gap is resolved. plan_summary: progressive_regime.summarize (per-method finals and curves)."""
    from nexus.experiments.stats import fmt, fmt_gap, in_standard_errors, paired

    out: dict = {"margin": MARGIN}
    p = pilot(parts, ledger)
    out["pilot"] = p
    if p:
        say(
            f"pilot (tuning seeds {','.join(p['seeds'])}, chosen lrs): small - scratch {p['small_minus_scratch']:+.4f} "
            f"= {p['ses']:.1f} standard errors ({'passes' if p['passes'] else 'FAILS'} the >= {GAP_SES:g} SE check)"
        )
    cont = continuation_choice(parts, ledger)
    out["continuation"] = cont
    if cont:
        say(
            "continuation lr at growth (tuning seeds, mean final loss): "
            + ", ".join(f"{k} {v:.4f}" for k, v in cont["mean"].items())
            + f" -> small x{cont['pick']['small']}, sparkling "
            f"x{cont['pick']['sparkling']}"
        )
    ev = parts["eval"]
    if not (ev.get("tuned") and all(ledger.holds(k, r["cfg"]) for k, r in ev["runs"].items())):
        held = sum(ledger.holds(k, r["cfg"]) for k, r in ev["runs"].items())
        say(f"eval: {held} of {len(ev['runs'])} runs in the ledger; not summarized yet")
        return out
    plan = ev["plans"][0]
    s = plan_summary(plan, ledger)
    out["methods"] = {}
    for arm in ARMS:
        m = s["methods"][arm]
        k = LR_MULT if arm != ARMS[0] else 1
        control = "small" if k == 1 else f"small@lr{k}x"
        ctl = [ledger.final_val_loss(f"seed{sd}/{control}") for sd in EVAL_SEEDS]
        g, sc, sm = m["per_seed"]["grown"], m["per_seed"]["scratch"], m["per_seed"]["small"]
        eq_tokens = paired(g, sc)
        eq_flops = paired(g, m["scratch_at_grown_flops"])
        growth = paired(g, ctl)
        gap = paired(sm, sc)["diff"]
        gap_ses = in_standard_errors([a - b for a, b in zip(sm, sc)])["ses"]
        row = {
            "grown_minus_scratch_equal_tokens": eq_tokens,
            "grown_minus_scratch_equal_flops": eq_flops,
            "verdict_equal_tokens": _verdict(eq_tokens["diff"]["ci_low"], eq_tokens["diff"]["ci_high"]),
            "verdict_equal_flops": _verdict(eq_flops["diff"]["ci_low"], eq_flops["diff"]["ci_high"]),
            "growth_effect": growth,
            "control": control,
            "gap_ses": gap_ses,
            "gap_closed": m["gap_closed"] if gap_ses >= GAP_SES else None,
        }
        out["methods"][arm] = row
        say(f"{arm}: grown - scratch at equal tokens {fmt(eq_tokens['diff'])} -> {row['verdict_equal_tokens']}")
        say(f"{arm}: grown - scratch at equal FLOPs {fmt(eq_flops['diff'])} -> {row['verdict_equal_flops']}")
        say(f"{arm}: growth's own effect, grown - {control} (same lr, no growth) {fmt(growth['diff'])}")
        say(
            f"{arm}: small - scratch gap {gap['mean']:+.4f} = {gap_ses:.1f} SE; share closed "
            + (fmt_gap(m["gap_closed"]) if row["gap_closed"] else f"not reported (gap under {GAP_SES:g} SE)")
        )
    return out


def bracket_summary(parts: dict, ledger, say) -> dict | None:
    """Each naive-bracket arm on BRACKET_SEEDS, paired with the evaluation's runs of those seeds (same prefixes):
    grown - small, grown - sparkling, the share of the small-to-scratch gap, and the symmetry lock at the end."""
    from nexus.experiments.stats import fmt, fmt_gap, gap_closed, paired

    runs = {**parts["bracket"]["runs"], **parts["eval"]["runs"]}
    names = [f"seed{sd}/{arm}" for sd in BRACKET_SEEDS for arm in (*BRACKET, "small", ARMS[0])]
    scratch = next(k.split("/", 1)[1] for k, r in parts["eval"]["runs"].items() if r["kind"] == "scratch")
    names += [f"seed{sd}/{scratch}" for sd in BRACKET_SEEDS]
    if not parts["bracket"].get("tuned") or not all(n in runs and ledger.holds(n, runs[n]["cfg"]) for n in names):
        held = sum(ledger.holds(k, r["cfg"]) for k, r in parts["bracket"]["runs"].items())
        say(f"bracket: {held} of {len(parts['bracket']['runs'])} runs in the ledger; not summarized yet")
        return None

    def finals(arm):
        return [ledger.final_val_loss(f"seed{sd}/{arm}") for sd in BRACKET_SEEDS]

    small, spark, sc = finals("small"), finals(ARMS[0]), finals(scratch)
    out = {}
    for arm in (*BRACKET, ARMS[0]):
        g = finals(arm)
        lock = [ledger.read(f"seed{sd}/{arm}")["final"].get("final_symmetry_lock_mean") for sd in BRACKET_SEEDS]
        out[arm] = {
            "grown_minus_small": paired(g, small),
            "grown_minus_sparkling": paired(g, spark),
            "gap_closed": gap_closed(small, g, sc),
            "symmetry_lock": lock,
        }
        locks = "n/a" if None in lock else ", ".join(f"{x:.6f}" for x in lock)
        say(
            f"bracket {arm}: grown - small {fmt(out[arm]['grown_minus_small']['diff'])}; grown - sparkling "
            f"{fmt(out[arm]['grown_minus_sparkling']['diff'])}; share {fmt_gap(out[arm]['gap_closed'])}; symmetry "
            f"lock at the end (mean cosine copy/twin per seed) {locks}"
        )
    return out


def horizon_summary(parts: dict, ledger, say) -> dict | None:
    """The horizon scan from the ledger alone: per post-growth budget k (each horizon whose decay branches are all
    held), on HORIZON_SEEDS paired by seed, grown - scratch (equal total tokens; the pre-stated margin's verdict) and
    grown - small (HORIZON_CONTROL: growth's own effect at the same lr), both with 95% t intervals; the change of
    grown - scratch from the 1x horizon (paired by seed); and beside the 1x point, eval's cosine grown - scratch on the
    same seeds where eval holds them (the schedule's own effect on the estimand: WSD is not the paper's cosine)."""
    from nexus.experiments.stats import fmt, paired

    part = parts.get("horizon")
    if not part:
        return None
    plan, runs = part["plans"][0], part["runs"]
    ns = plan["ns"]
    scratch = next(r["arm"] for r in runs.values() if r["kind"] == "scratch")
    if not part.get("tuned"):
        say(f"horizon: its lrs are not tuned yet; {len(runs)} runs planned")
        return None

    def name(sd: int, arm: str, k: int) -> str:
        return f"{ns}seed{sd}/{arm}/{k}x"

    def finals(arm: str, k: int) -> list[float]:
        return [ledger.final_val_loss(name(sd, arm, k)) for sd in HORIZON_SEEDS]

    out: dict = {"seeds": list(HORIZON_SEEDS), "schedule": plan["schedule"], "horizons": {}}
    for k, h in plan["horizons"].items():
        names = [name(sd, arm, k) for sd in HORIZON_SEEDS for arm in (HORIZON_ARM, HORIZON_CONTROL, scratch)]
        held = sum(ledger.holds(n, runs[n]["cfg"]) for n in names)
        if held < len(names):
            say(f"horizon {k}x: {held} of {len(names)} decay runs in the ledger; not summarized yet")
            continue
        g, sm, sc = finals(HORIZON_ARM, k), finals(HORIZON_CONTROL, k), finals(scratch, k)
        eq = paired(g, sc)
        row = {
            **h,
            "per_seed": {"grown": g, "small": sm, "scratch": sc},
            "grown_minus_scratch": eq,
            "verdict": _verdict(eq["diff"]["ci_low"], eq["diff"]["ci_high"])
            if eq["diff"]["ci_low"] is not None
            else "undetermined (one seed)",
            "grown_minus_small": paired(g, sm),
        }
        first = out["horizons"].get(min(plan["horizons"]))
        if first is not None and k != min(plan["horizons"]):
            d0 = [a - b for a, b in zip(first["per_seed"]["grown"], first["per_seed"]["scratch"])]
            row["change_from_first"] = paired([a - b for a, b in zip(g, sc)], d0)
        out["horizons"][k] = row
        say(
            f"horizon {k}x ({h['post_steps']} steps after growth, {h['steps']} in all, WSD decay over the last "
            f"{h['decay_steps']}): grown - scratch {fmt(eq['diff'])} -> {row['verdict']}; grown - {HORIZON_CONTROL} "
            f"{fmt(row['grown_minus_small']['diff'])}"
            + (
                f"; grown - scratch minus its {min(plan['horizons'])}x value {fmt(row['change_from_first']['diff'])}"
                if "change_from_first" in row
                else ""
            )
        )
    cos = [f"seed{sd}/{n}" for sd in HORIZON_SEEDS for n in (HORIZON_ARM, scratch)]
    ev = parts.get("eval", {}).get("runs", {})
    if all(n in ev and ledger.holds(n, ev[n]["cfg"]) for n in cos):
        c = paired(
            [ledger.final_val_loss(f"seed{sd}/{HORIZON_ARM}") for sd in HORIZON_SEEDS],
            [ledger.final_val_loss(f"seed{sd}/{scratch}") for sd in HORIZON_SEEDS],
        )
        out["cosine_1x"] = c
        say(f"horizon: eval's cosine 1x on the same seeds (its own cosine prefixes), grown - scratch {fmt(c['diff'])}")
    return out
