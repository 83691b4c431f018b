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
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..config import ConfigError, RunConfig
from .inherit import fill_normal, inherit, matched_std, region_blocks
from .methods import Method, register_method
from .registry import GrowthResult, register_grower
from .spec import NewEntriesSpec, check_int, option

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


@dataclass
class NexusRankSpec(NewEntriesSpec):
    """Nexusformer: add units to the M and A stages of every Nexus-Rank projection."""

    triggers: ClassVar[tuple[str, ...]] = ("delta_m", "delta_a")

    delta_m: int = option(
        None, "units added to the M stage of every Nexus-Rank projection", "--delta-m", kind=int, metavar="N"
    )
    delta_a: int = option(None, "units added to the A stage", "--delta-a", kind=int, metavar="N")
    init: str = option(
        "exact",
        "exact (one side of each new unit zero, the other random: exact and live) | zero (paper-literal, dead) | noise",
        "--rank-init",
        choices=INITS,
    )
    cut: str = option(
        "in", f"which side of each new unit is zero for --rank-init exact: {'|'.join(CUTS)}", "--cut", metavar="CUT"
    )

    def validate(self) -> NexusRankSpec:
        super().validate()
        for key, flag in (("delta_m", "--delta-m"), ("delta_a", "--delta-a")):
            check_int(getattr(self, key), flag)
        if not self.delta_m and not self.delta_a:
            raise ConfigError("nexus_rank growth needs --delta-m N and/or --delta-a N (valid: integers > 0)")
        self.init = self.init or "exact"
        if self.init not in INITS:
            raise ConfigError(f"--rank-init={self.init!r} (valid for Nexus-Rank growth: {'|'.join(INITS)})")
        self.cut = self.cut or "in"
        if self.cut not in CUTS:
            raise ConfigError(f"--cut={self.cut!r} (valid: {'|'.join(CUTS)})")
        return self

    def applies_to(self, model_cfg) -> None:
        """A model with Nexus-Rank projections, an exact cut for its form, and a valid grown shape."""
        pcfg = model_cfg.projection
        if pcfg.kind != "nexus_rank":
            raise ConfigError(
                f"model.projection.kind={pcfg.kind!r}: this model has no Nexus-Rank projections to grow "
                "(valid: a model trained with --model.projection.kind nexus_rank)"
            )
        if self.init == "exact" and self.cut not in EXACT_CUTS[pcfg.form]:
            raise ConfigError(
                f"--cut={self.cut!r} is not exact for model.projection.form={pcfg.form!r} "
                f"(valid exact cuts: {'|'.join(EXACT_CUTS[pcfg.form])})"
            )
        errors: list[str] = []
        grown_model_config(model_cfg, self).validate(errors, "model")
        if errors:
            raise ConfigError(
                f"growth by --delta-m {self.delta_m or 0} --delta-a {self.delta_a or 0} gives an invalid "
                "model: " + "; ".join(errors)
            )


def grown_model_config(model_cfg, spec: NexusRankSpec):
    pcfg = model_cfg.projection
    d = model_cfg.d_model
    old_m, old_a = pcfg.resolved_m(d), pcfg.resolved_a(d)
    new_model_cfg = copy.deepcopy(model_cfg)
    np_ = new_model_cfg.projection
    np_.rank_m, np_.rank_a = old_m + (spec.delta_m or 0), old_a + (spec.delta_a or 0)
    if pcfg.form == "l2norm_width":  # pin the sqrt(width) factors so old units keep their scale
        new_model_cfg.pin("frozen_m", model_cfg.pinned("frozen_m") or old_m)
        new_model_cfg.pin("frozen_a", model_cfg.pinned("frozen_a") or old_a)
    return new_model_cfg


def grow_nexus_rank(model, cfg: RunConfig, spec: NexusRankSpec) -> GrowthResult:
    from ..models.nexus_rank import nexus_rank_modules

    pcfg = cfg.model.projection
    mods = nexus_rank_modules(model)
    if not mods:
        raise RuntimeError("the model has no Nexus-Rank modules although model.projection.kind is nexus_rank")
    d = cfg.model.d_model
    old_m, old_a = pcfg.resolved_m(d), pcfg.resolved_a(d)
    new_model_cfg = grown_model_config(cfg.model, spec)
    np_ = new_model_cfg.projection

    gen = torch.Generator(device="cpu").manual_seed(spec.generator_seed(cfg.train.seed))
    init, zeroed = spec.init, _ZEROED[spec.cut]

    def fill_new(name: str, p: torch.Tensor, old: torch.Tensor) -> None:
        stage = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
        std = matched_std(old) * (spec.noise_frac if init == "noise" else 1.0)
        for tags, sl in region_blocks(old.shape, p.shape):
            if init == "zero" or (init == "exact" and tags in zeroed.get(stage, ())):
                p[sl] = 0.0
            else:
                fill_normal(p[sl], std, gen)

    new_model, maps, old_shapes = inherit(model, new_model_cfg, fill_new)
    exact = init == "zero" or (init == "exact" and spec.cut in EXACT_CUTS[pcfg.form])
    record = {
        "old_m": old_m,
        "new_m": np_.rank_m,
        "old_a": old_a,
        "new_a": np_.rank_a,
        "init": init,
        "cut": spec.cut if init == "exact" else None,
        "form": pcfg.form,
        "exact": exact,
        "noise_frac": spec.noise_frac if init == "noise" else None,
        "old_shapes": old_shapes,
    }
    report = {
        "projections grown": len(mods),
        "M": f"{old_m} -> {np_.rank_m}",
        "A": f"{old_a} -> {np_.rank_a}",
        "init": init if init != "exact" else f"exact (cut {spec.cut}, form {pcfg.form})",
        "function preserved by construction": exact,
    }
    if init == "zero":
        report["warning"] = zero_init_warning(cfg.train.optimizer.kind)
    return GrowthResult(new_model, new_model_cfg, maps, record, report)


# registered by a call, not a decorator: mutmut does not mutate decorated functions
register_grower("nexus_rank", NexusRankSpec)(grow_nexus_rank)


def zero_init_warning(optimizer: str) -> str:
    """What all-zero growth does, per optimizer. The new blocks get an exactly zero gradient forever
    (GELU(0) = 0), so they stay zero under any optimizer. Whether the old weights then follow the
    small model's run depends on the optimizer: AdamW's per-element update of an old entry sees the
    same gradient, so it does; Muon multiplies each matrix's update by sqrt(max(1, rows/cols)), and
    growth changes W_M's and W_A's shapes, so the old weights take steps of another size."""
    head = (
        "paper-literal all-zero init: GELU(0)=0 gives every new block a zero gradient forever, "
        "so the new units never learn"
    )
    if optimizer == "muon":
        return (
            head + "; under Muon the old weights do not train exactly like the small model either (its update scale "
            "sqrt(max(1, rows/cols)) follows the grown shapes of W_M and W_A) (use --rank-init exact)"
        )
    return head + "; under AdamW the grown model trains exactly like the small one (use --rank-init exact)"


# the progressive experiment's Nexus-Rank methods (growth/methods.py)
register_method(
    Method(
        "nexus-rank",
        "nexus_rank",
        "baseline-tiny",
        {"delta_m": 96, "delta_a": 256, "init": "exact", "cut": "in"},
        "Nexus-Rank dual-axis growth M 160->256, A 256->512 in Q/K/V (exact live cut)",
        {"model.projection.kind": "nexus_rank", "model.projection.rank_m": 160, "model.projection.rank_a": 256},
    ),
    # Nexusformer's head-to-head with TokenFormer (its Sec. 4.3, the 41.5% claim) needs same-size bases. Per
    # projection Nexus-Rank has d*M + M*A + A*d parameters (d < M < A), TokenFormer 2*n*d (n parameter tokens):
    # M 144, A 160 -> 61,952 = n 242; grown to M 192, A 320 -> 126,976 = n 496, both exactly, at d = 128.
    Method(
        "nexus-rank-matched",
        "nexus_rank",
        "baseline-tiny",
        {"delta_m": 48, "delta_a": 160, "init": "exact", "cut": "in"},
        "Nexus-Rank growth M 144->192, A 160->320 in Q/K/V (sized like tokenformer-matched)",
        {"model.projection.kind": "nexus_rank", "model.projection.rank_m": 144, "model.projection.rank_a": 160},
    ),
)
