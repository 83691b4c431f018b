"""A study over one ledger as named parts (issue 38): tuning grids whose choice, read from the ledger, sets the lrs
of the parts that compare arms. A study script names its parts as data (`LrGrid`, `Arms`) and calls `build_parts`;
every plan comes from nexus.experiments.study_plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .study_plan import Scale, merge_runs, plan_branched, plan_lr_grid


@dataclass(frozen=True)
class LrGrid:
    """A tuning part: every lr x tuning seed x shape of the arms; lrs None takes the study's command-line grid."""
    arms: tuple
    seeds: tuple
    ns: str
    lrs: tuple | None = None
    tokens_per_param: float | None = None


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
        rows = [{"lr": lr, "losses": {str(s): v for s, v in per.items()},
                 "mean": None if None in per.values() else sum(per.values()) / len(per)} for lr, per in sorted(by_lr.items())]
        out["table"][shape] = rows
        if any(r["mean"] is None for r in rows):
            out["complete"] = False
            continue
        i = min(range(len(rows)), key=lambda j: rows[j]["mean"])
        out["best"][shape] = rows[i]["lr"]
        out["neighbours"][shape] = [rows[j] for j in (i - 1, i + 1) if 0 <= j < len(rows)]
        out["edge"][shape] = i in (0, len(rows) - 1)
    return out


def plan_arms(part: Arms, lrs: dict, scale: Scale, data: str, out: Path, variants: dict | None = None) -> dict:
    """One Arms part's plan at the given lrs (its scratch runs only on its scratch seeds)."""
    plan = plan_branched(list(part.arms), list(part.seeds), scale, data, out, lrs, tokens_per_param=part.tokens_per_param,
                         post_mult=part.post_mult, ns=part.ns, variants=variants)
    if part.scratch_seeds is not None:
        plan["runs"] = {k: r for k, r in plan["runs"].items() if r["kind"] != "scratch" or r["seed"] in part.scratch_seeds}
    return plan


def build_parts(parts: dict, scale: Scale, data: str, out: Path, ledger, grid_lrs: tuple, variants: dict | None = None) -> dict:
    """Every part's plans, in the order given: each tuning grid with its choice from the ledger, then each part that
    compares arms (a part may be a tuple of Arms: one plan each) at its tuning's lrs where that is complete.
    Returns name -> {"plans", "runs" (merged), "choice" (grids) or "tuned" (arms)}."""
    built: dict[str, dict] = {name: {} for name in parts}
    for name, part in parts.items():
        if isinstance(part, LrGrid):
            plan = plan_lr_grid(list(part.arms), list(part.seeds), list(part.lrs or grid_lrs), scale, data, out, part.ns,
                                part.tokens_per_param, variants)
            built[name] = {"plans": [plan]}
    for name, part in parts.items():  # every grid's choice (after all grids: a refusal comes before any arm is planned)
        if isinstance(part, LrGrid):
            built[name]["choice"] = choose_lrs(built[name]["plans"][0], ledger)
    for name, part in parts.items():
        group = part if isinstance(part, tuple) else (part,)
        if not isinstance(group[0], Arms):
            continue
        tuning = built[group[0].tuned_by]["choice"]
        lrs = tuning["best"] if tuning["complete"] else None
        untuned = group[0].untuned_lrs
        fallback = untuned if isinstance(untuned, dict) else {k: untuned for k in tuning["table"]}
        built[name] = {"plans": [plan_arms(p, lrs or fallback, scale, data, out, variants) for p in group],
                       "tuned": lrs is not None}
    for part in built.values():
        part["runs"] = merge_runs(p["runs"] for p in part["plans"])
    return built
