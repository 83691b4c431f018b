"""Nexusformer dual-axis growth: add dM units to the M stage and dA units to the A stage of every
Nexus-Rank projection (seed 000 eqs. 12-14), keeping the model's function.

Torch weight layout (out, in): w_m (M, D), w_a (A, M), w_d (D_out, A). A new M unit owns a row of
w_m (incoming) and a column of w_a (outgoing); a new A unit owns a row of w_a (incoming) and a
column of w_d (outgoing).

Why not the paper's all-zero init: with every new block zero, GELU(0) = 0 makes every new block's
gradient exactly zero forever (docs/nexusformer.md, "Growth"). An exact *and* live init zeroes one side of each
new unit (a "cut") and draws the other side at the trained weights' scale:

  cut    zeroed blocks (paper notation)                       exact for form
  in     W_M new cols, W_A[old M rows, new A cols]  (incoming)  paper, l2norm, l2norm_width   <- default
  out    W_A[new M rows, old A cols], W_D new rows  (outgoing)  paper
  mixed  W_M new cols, W_D new rows                             paper
  wa     every new entry of W_A                                 paper

With the l2norm forms a non-zero new pre-activation changes the norm of the old ones, so only `in`
is exact there (l2norm scales by sqrt(D_out), which M/A growth leaves alone; l2norm_width's
sqrt(width) factors are pinned at the pre-growth widths).
init=zero is the paper-literal recipe (exact, dead: verification flags it); init=noise draws every
new entry from N(0, (noise_frac * std_old)^2) (the paper's 10%/20% ablation; not exact).
"""
from __future__ import annotations

import copy

import torch

from ..config import ConfigError, RunConfig
from . import GrowthResult, register_grower
from .inherit import fill_normal, inherit, matched_std, region_blocks

CUTS = ("in", "out", "mixed", "wa")
INITS = ("exact", "zero", "noise")
EXACT_CUTS = {"paper": ("in", "out", "mixed", "wa"), "l2norm": ("in",), "l2norm_width": ("in",)}
# zeroed blocks per cut: stage -> set of (out, in) tags of a torch weight
_ZEROED = {
    "in": {"w_m": {("new", "old")}, "w_a": {("new", "old")}},
    "out": {"w_a": {("old", "new")}, "w_d": {("old", "new")}},
    "mixed": {"w_m": {("new", "old")}, "w_d": {("old", "new")}},
    "wa": {"w_a": {("new", "old"), ("old", "new"), ("new", "new")}},
}


def parse_spec(spec: dict, form: str) -> dict:
    """Validate a nexus_rank spec; returns it with defaults filled. Errors name the flag and value."""
    out = dict(spec)
    for key, flag in (("delta_m", "--delta-m"), ("delta_a", "--delta-a")):
        v = out.get(key, 0)
        if v is None:
            v = 0
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (key in spec and spec[key] is not None and v == 0):
            raise ConfigError(f"{flag}={v!r} (valid: an integer > 0)")
        out[key] = v
    if out["delta_m"] == 0 and out["delta_a"] == 0:
        raise ConfigError("nexus_rank growth needs --delta-m N and/or --delta-a N (valid: integers > 0)")
    init = out.get("init") or "exact"
    if init not in INITS:
        raise ConfigError(f"--rank-init={init!r} (valid for Nexus-Rank growth: {'|'.join(INITS)})")
    out["init"] = init
    cut = out.get("cut") or "in"
    if cut not in CUTS:
        raise ConfigError(f"--cut={cut!r} (valid: {'|'.join(CUTS)})")
    if init == "exact" and cut not in EXACT_CUTS[form]:
        raise ConfigError(f"--cut={cut!r} is not exact for model.projection.form={form!r} "
                          f"(valid exact cuts: {'|'.join(EXACT_CUTS[form])})")
    out["cut"] = cut
    frac = out.get("noise_frac", 0.1)
    if not isinstance(frac, (int, float)) or isinstance(frac, bool) or frac <= 0:
        raise ConfigError(f"--noise-frac={frac!r} (valid: a number > 0, e.g. 0.1 for 10% of the pretrained std)")
    out["noise_frac"] = float(frac)
    return out


@register_grower("nexus_rank")
def grow_nexus_rank(model, cfg: RunConfig, spec: dict) -> GrowthResult:
    from ..models.nexus_rank import nexus_rank_modules

    pcfg = cfg.model.projection
    mods = nexus_rank_modules(model)
    if pcfg.kind != "nexus_rank" or not mods:
        raise ConfigError(f"model.projection.kind={pcfg.kind!r}: this checkpoint has no Nexus-Rank projections to grow "
                          "(valid: a model trained with --model.projection.kind nexus_rank)")
    spec = parse_spec(spec, pcfg.form)
    d = cfg.model.d_model
    old_m, old_a = pcfg.resolved_m(d), pcfg.resolved_a(d)
    new_model_cfg = copy.deepcopy(cfg.model)
    np_ = new_model_cfg.projection
    np_.rank_m, np_.rank_a = old_m + spec["delta_m"], old_a + spec["delta_a"]
    if pcfg.form == "l2norm_width":  # pin the sqrt(width) factors so old units keep their scale
        np_.frozen_m, np_.frozen_a = pcfg.frozen_m or old_m, pcfg.frozen_a or old_a
    errors: list[str] = []
    new_model_cfg.validate(errors, "model")
    if errors:
        raise ConfigError(f"growth by --delta-m {spec['delta_m']} --delta-a {spec['delta_a']} gives an invalid model: "
                          + "; ".join(errors))

    gen = torch.Generator(device="cpu").manual_seed(int(spec.get("seed", cfg.train.seed)))
    init, zeroed = spec["init"], _ZEROED[spec["cut"]]

    def fill_new(name: str, p: torch.Tensor, old: torch.Tensor) -> None:
        stage = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
        std = matched_std(old) * (spec["noise_frac"] if init == "noise" else 1.0)
        for tags, sl in region_blocks(old.shape, p.shape):
            if init == "zero" or (init == "exact" and tags in zeroed.get(stage, ())):
                p[sl] = 0.0
            else:
                fill_normal(p[sl], std, gen)

    new_model, maps, old_shapes = inherit(model, new_model_cfg, fill_new)
    exact = init == "zero" or (init == "exact" and spec["cut"] in EXACT_CUTS[pcfg.form])
    record = {"old_m": old_m, "new_m": np_.rank_m, "old_a": old_a, "new_a": np_.rank_a, "init": init,
              "cut": spec["cut"] if init == "exact" else None, "form": pcfg.form, "exact": exact,
              "noise_frac": spec["noise_frac"] if init == "noise" else None, "old_shapes": old_shapes}
    report = {"projections grown": len(mods), "M": f"{old_m} -> {np_.rank_m}", "A": f"{old_a} -> {np_.rank_a}",
              "init": init if init != "exact" else f"exact (cut {spec['cut']}, form {pcfg.form})",
              "function preserved by construction": exact}
    if init == "zero":
        report["warning"] = zero_init_warning(cfg.train.optimizer)
    return GrowthResult(new_model, new_model_cfg, maps, record, report)


def zero_init_warning(optimizer: str) -> str:
    """What all-zero growth does, per optimizer. The new blocks get an exactly zero gradient forever
    (GELU(0) = 0), so they stay zero under any optimizer. Whether the old weights then follow the
    small model's run depends on the optimizer: AdamW's per-element update of an old entry sees the
    same gradient, so it does; Muon multiplies each matrix's update by sqrt(max(1, rows/cols)), and
    growth changes W_M's and W_A's shapes, so the old weights take steps of another size."""
    head = "paper-literal all-zero init: GELU(0)=0 gives every new block a zero gradient forever, so the new units never learn"
    if optimizer == "muon":
        return (head + "; under Muon the old weights do not train exactly like the small model either (its update scale "
                "sqrt(max(1, rows/cols)) follows the grown shapes of W_M and W_A) (use --rank-init exact)")
    return head + "; under AdamW the grown model trains exactly like the small one (use --rank-init exact)"


# ----------------------------------------------------------------------------- CLI
def add_cli_args(parser) -> None:
    g = parser.add_argument_group("Nexus-Rank growth (Nexusformer)")
    g.add_argument("--delta-m", type=int, default=None, metavar="N", help="add N units to the M stage of every Nexus-Rank projection")
    g.add_argument("--delta-a", type=int, default=None, metavar="N", help="add N units to the A stage")
    g.add_argument("--rank-init", dest="rank_init", default=None, choices=list(INITS), help="exact (default: one side of each new unit zero, other random) | zero (paper-literal, dead) | noise")
    if "--noise-frac" not in parser._option_string_actions:
        parser.add_argument("--noise-frac", type=float, default=0.1, help="--rank-init/--token-init noise: std as a fraction of the pretrained std")
    g.add_argument("--cut", default=None, help=f"which side of each new unit is zero for --rank-init exact: {'|'.join(CUTS)} (default in)")
    if "--growth-seed" not in parser._option_string_actions:
        parser.add_argument("--growth-seed", type=int, default=None, help="seed of the random new entries")


def spec_from_args(args) -> dict | None:
    if getattr(args, "delta_m", None) is None and getattr(args, "delta_a", None) is None:
        return None
    spec = {"family": "nexus_rank", "init": args.rank_init or "exact", "noise_frac": args.noise_frac}
    if args.delta_m is not None:
        spec["delta_m"] = args.delta_m
    if args.delta_a is not None:
        spec["delta_a"] = args.delta_a
    if args.cut is not None:
        spec["cut"] = args.cut
    if args.growth_seed is not None:
        spec["seed"] = args.growth_seed
    for key, flag in (("delta_m", "--delta-m"), ("delta_a", "--delta-a")):
        if key in spec and spec[key] <= 0:
            from ..config import ConfigError

            raise ConfigError(f"{flag}={spec[key]} (valid: an integer > 0)")
    return spec
