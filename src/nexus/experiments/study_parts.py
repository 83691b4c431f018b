"""A study over one ledger as named parts (issue 38): tuning grids whose choice, read from the ledger, sets the lrs
of the parts that compare arms. A study script names its parts as data (`LrGrid`, `Arms`, `Horizon`: a WSD horizon
scan, decays branched from one stable-phase run) and calls `build_parts`; every plan comes from
nexus.experiments.study_plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .study_plan import Scale, merge_runs, plan_branched, plan_horizon, plan_lr_grid


@dataclass(frozen=True)
class LrGrid:
    """A tuning part: every lr x tuning seed x shape of the arms; lrs None takes the study's command-line grid."""

    arms: tuple
    seeds: tuple
    ns: str
    lrs: tuple | None = None
    tokens_per_param: float | None = None
    top_of: str | None = None  # successive halving: this grid runs, per shape, only the top_k lrs of grid `top_of`
    top_k: int = 0


@dataclass(frozen=True)
class Arms:
    """A part that compares arms on seeds at the lrs chosen by the tuning part `tuned_by`. Until that tuning is
    complete in the ledger the part is planned at `untuned_lrs` (a dict per shape, or one lr for every shape of the
    tuning) and marked untuned: its cost can be estimated, it cannot run. scratch_seeds: the seeds with a scratch run
    (None: every seed)."""

    arms: tuple
    seeds: tuple
    tuned_by: str
    untuned_lrs: dict | float
    ns: str = ""
    post_mult: int = 1
    tokens_per_param: float | None = None
    scratch_seeds: tuple | None = None
    small_lr_mults: tuple = ()  # the small model continued at K x its lr from the growth step, for each K


@dataclass(frozen=True)
class Horizon:
    """A horizon scan at low cost (study_plan.plan_horizon): the arms on seeds at the lrs the tuning part `tuned_by`
    chose (until it is complete: `untuned_lrs`, marked untuned), a WSD stable-phase run per arm with a decay branched
    from it at each post-growth budget in `horizons` (multiples of the pre-growth steps), the decay over the last
    `decay_fraction` of each horizon. controls: which of plan_branched's small runs are scanned beside the grown arms
    ("small", "small@lr<K>x" for K in small_lr_mults); scratch is always scanned."""

    arms: tuple
    seeds: tuple
    tuned_by: str
    untuned_lrs: dict | float
    horizons: tuple = (1, 2, 4)
    decay_fraction: float = 0.2
    ns: str = "horizon/"
    small_lr_mults: tuple = ()
    controls: tuple = ("small",)
    tokens_per_param: float | None = None


def choose_lrs(plan: dict, ledger) -> dict:
    """Per shape: mean final validation loss per lr over the tuning seeds; the best lr once every (lr, seed) of the
    shape is in the ledger, with its neighbours on the grid (a best lr at the grid's edge is flagged)."""
    table: dict[str, dict] = {}
    for name, r in plan["runs"].items():
        rec = ledger.read(name) if ledger.holds(name, r["cfg"]) else None  # another config or corpus: refused
        row = table.setdefault(r["shape"], {}).setdefault(r["lr"], {})
        row[r["seed"]] = None if rec is None else float(rec["final"]["val_loss"])
    out = {"table": {}, "best": {}, "neighbours": {}, "edge": {}, "complete": True, "seeds": plan["seeds"]}
    for shape, by_lr in table.items():
        rows = [
            {
                "lr": lr,
                "losses": {str(s): v for s, v in per.items()},
                "mean": None if None in per.values() else sum(per.values()) / len(per),
            }
            for lr, per in sorted(by_lr.items())
        ]
        out["table"][shape] = rows
        if any(r["mean"] is None for r in rows):
            out["complete"] = False
            continue
        i = min(range(len(rows)), key=lambda j: rows[j]["mean"])
        out["best"][shape] = rows[i]["lr"]
        out["neighbours"][shape] = [rows[j] for j in (i - 1, i + 1) if 0 <= j < len(rows)]
        out["edge"][shape] = i in (0, len(rows) - 1)
    return out


def top_lrs(choice: dict, k: int) -> dict:
    """Per shape, the k lrs of a complete grid with the lowest mean final loss, best first."""
    return {
        shape: [r["lr"] for r in sorted(rows, key=lambda r: r["mean"])[:k]] for shape, rows in choice["table"].items()
    }


def choose_halving(first: dict, second: dict) -> dict:
    """Successive halving's choice: per shape, among the lrs the second round ran (the first round's best), the one
    with the lowest mean over every seed of both rounds; the first round's rows are kept for the table."""
    out = {
        "table": {},
        "best": {},
        "neighbours": {},
        "edge": {},
        "complete": first["complete"] and second["complete"],
        "seeds": list(first["seeds"]) + [s for s in second["seeds"] if s not in first["seeds"]],
    }
    for shape, rows in first["table"].items():
        later = {r["lr"]: r["losses"] for r in second["table"].get(shape, [])}
        merged = []
        for r in rows:
            losses = {**r["losses"], **later.get(r["lr"], {})}
            vals = list(losses.values())
            merged.append(
                {
                    "lr": r["lr"],
                    "losses": losses,
                    "rounds": 2 if r["lr"] in later else 1,
                    "mean": None if None in vals else sum(vals) / len(vals),
                }
            )
        out["table"][shape] = merged
        finalists = [r for r in merged if r["rounds"] == 2]
        if not out["complete"] or not finalists or any(r["mean"] is None for r in finalists):
            out["complete"] = False
            continue
        best = min(finalists, key=lambda r: r["mean"])
        i = merged.index(best)
        out["best"][shape] = best["lr"]
        out["neighbours"][shape] = [merged[j] for j in (i - 1, i + 1) if 0 <= j < len(merged)]
        out["edge"][shape] = i in (0, len(merged) - 1)
    return out


def plan_arms(part: Arms, lrs: dict, scale: Scale, data: str, out: Path, variants: dict | None = None) -> dict:
    """One Arms part's plan at the given lrs (its scratch runs only on its scratch seeds)."""
    plan = plan_branched(
        list(part.arms),
        list(part.seeds),
        scale,
        data,
        out,
        lrs,
        tokens_per_param=part.tokens_per_param,
        post_mult=part.post_mult,
        ns=part.ns,
        variants=variants,
        small_lr_mults=part.small_lr_mults,
    )
    # each shape's scratch config, also where no scratch run is kept: a grown run's step is timed on it
    plan["shape_cfgs"] = {r["shape"]: r["cfg"] for r in plan["runs"].values() if r["kind"] == "scratch"}
    if part.scratch_seeds is not None:
        plan["runs"] = {
            k: r for k, r in plan["runs"].items() if r["kind"] != "scratch" or r["seed"] in part.scratch_seeds
        }
    return plan


def plan_horizon_part(
    part: Horizon, lrs: dict, scale: Scale, data: str, out: Path, variants: dict | None = None
) -> dict:
    """One Horizon part's plan at the given lrs (study_plan.plan_horizon)."""
    plan = plan_horizon(
        list(part.arms),
        list(part.seeds),
        scale,
        data,
        out,
        lrs,
        horizons=part.horizons,
        decay_fraction=part.decay_fraction,
        ns=part.ns,
        variants=variants,
        small_lr_mults=part.small_lr_mults,
        controls=part.controls,
        tokens_per_param=part.tokens_per_param,
    )
    # each shape's scratch config: a grown run's step is timed on it
    plan["shape_cfgs"] = {r["shape"]: r["cfg"] for r in plan["runs"].values() if r["kind"] == "scratch"}
    return plan


def build_parts(
    parts: dict, scale: Scale, data: str, out: Path, ledger, grid_lrs: tuple, variants: dict | None = None
) -> dict:
    """Every part's plans, in the order given: each tuning grid with its choice from the ledger, then each part that
    compares arms (a part may be a tuple of Arms: one plan each) or scans horizons (Horizon) at its tuning's lrs where
    that is complete.
    Returns name -> {"plans", "runs" (merged), "choice" (grids) or "tuned" (arms)}."""
    built: dict[str, dict] = {name: {} for name in parts}
    for name, part in parts.items():  # in the order given: a halving round after the grid it halves
        if isinstance(part, LrGrid):
            lrs = list(part.lrs or grid_lrs)
            keep = None
            if part.top_of is not None:  # the first round's best per shape; until it is complete, its first lrs
                src = built[part.top_of]
                lrs = list(src["plans"][0]["lrs_swept"])
                keep = (
                    top_lrs(src["choice"], part.top_k)
                    if src["choice"]["complete"]
                    else {shape: lrs[: part.top_k] for shape in src["choice"]["table"]}
                )
            plan = plan_lr_grid(
                list(part.arms), list(part.seeds), lrs, scale, data, out, part.ns, part.tokens_per_param, variants
            )
            if keep is not None:
                plan["runs"] = {k: r for k, r in plan["runs"].items() if r["lr"] in keep[r["shape"]]}
            built[name] = {"plans": [plan], "tuned": part.top_of is None or built[part.top_of]["choice"]["complete"]}
            built[name]["choice"] = choose_lrs(plan, ledger)
            if part.top_of is not None:
                built[name]["choice"] = choose_halving(built[part.top_of]["choice"], built[name]["choice"])
    for name, part in parts.items():
        group = part if isinstance(part, tuple) else (part,)
        if not isinstance(group[0], (Arms, Horizon)):
            continue
        tuning = built[group[0].tuned_by]["choice"]
        lrs = tuning["best"] if tuning["complete"] else None
        untuned = group[0].untuned_lrs
        fallback = untuned if isinstance(untuned, dict) else {k: untuned for k in tuning["table"]}
        built[name] = {
            "plans": [
                plan_horizon_part(p, lrs or fallback, scale, data, out, variants)
                if isinstance(p, Horizon)
                else plan_arms(p, lrs or fallback, scale, data, out, variants)
                for p in group
            ],
            "tuned": lrs is not None,
        }
    for part in built.values():
        part["runs"] = merge_runs(p["runs"] for p in part["plans"])
    return built
