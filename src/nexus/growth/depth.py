"""Depth growth (family "depth"): more blocks in the stack, `--depth.layers N` the new layer count.

Operators (`--depth.init`), written from the papers' definitions:
  zero           new blocks built with the model's own (seeded) init, then every tensor that writes the residual
                 stream (attention's output projection, the MLP's down projection(s), their biases) set to zero.
                 A pre-norm block x + attn(norm(x)); x + mlp(norm(x)) whose two residual writers are zero is the
                 identity, so the grown model computes exactly what the old one did (LLaMA-Pro, Wu et al. 2024,
                 sec. 2.3 "zero-initialized W_O and W_down"). The input side stays random, not zero: with both
                 sides zero no gradient reaches either, and the block never trains (dead).
  copy-zero-out  LLaMA-Pro's block expansion itself: each new block is a copy of the old block just below it,
                 with its residual writers zeroed: also exactly function preserving.
  stack          G_stack ("Stacking Your Transformers", Du et al., NeurIPS 2024): the trained stack repeated
                 N / L times, [0..L-1, 0..L-1, ...]. Not function preserving: the loss jumps, on purpose.
  copy           each new block a full copy of the old block below it (duplication in place, the interpolation
                 baseline of the stacking papers). Not function preserving either.
Where new blocks go (`--depth.where`, zero / copy-zero-out / copy): interleave (default; new block t of k goes
after old block ceil((t+1) L / k) - 1, so k <= L spreads them over L/k-block groups as LLaMA-Pro does and k = L
duplicates each block), top (all above the stack) or bottom (all below it).

Old blocks keep their tensors (moved to their new index; optimizer state is paired by the name a tensor had
before, never by its new name). New blocks are new parameters: their optimizer state starts fresh under
asymmetric / scaled / drop; under `copy` a copied block starts from its source block's state (ParamMap.copy_of).
Every entry of a new block is marked new, so `--rewarmup RHO,TAU` re-warms it as width growth re-warms new
channels, and the schedule is re-planned the same way (growth/rewarmup.py).

Width and depth in one growth: `--width.*` flags given beside `--depth.*` are carried in this spec's `width`
field and applied first, then depth on the widened model (new blocks are then built at the final width, and the
width grower only ever sees the old blocks); the generic verification runs once, on the result.

Which models: the transformer with any attention / projection / MLP kind whose block writes the residual stream
through an output projection we can find (`residual_writers`). ResFormer / NuResFormer take their anchors from
layer 0, so layer 0 must stay the old layer 0 (`--depth.where bottom` refused); ExoFormer's anchor comes from the
embeddings and needs nothing. The NEXUS v4.1 recurrent model is refused: its depth is its loop count.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
import torch.nn as nn

from ..config import ConfigError, RunConfig
from ..models.accounting import build_on_meta
from .inherit import build_initialized
from .methods import Method, register_method
from .param_map import ParamMap
from .registry import GROWERS, GrowthResult, register_grower
from .spec import GrowthSpec, check_int, option, spec_from_dict

INITS = ("zero", "copy-zero-out", "stack", "copy")
PRESERVING = ("zero", "copy-zero-out")  # inits that keep the function exactly (verified: max |dlogits| = 0)
WHERES = ("interleave", "top", "bottom")
LAYER_ZERO_ANCHORS = ("nures", "value_residual")  # mixing anchors read from layer 0's own projections


@dataclass
class DepthSpec(GrowthSpec):
    """Depth: new blocks (LLaMA-Pro zero-output blocks, G_stack, layer copies)."""

    triggers: ClassVar[tuple[str, ...]] = ("layers",)
    carries: ClassVar[tuple[str, ...]] = ("width",)

    layers: int = option(
        0,
        "new layer count N (more than now; --depth.init stack: a multiple of it)",
        "--depth.layers",
        kind=int,
        metavar="N",
    )
    init: str = option(
        "zero",
        "how new blocks start: zero (output projections zero, preserving) | copy-zero-out "
        "(LLaMA-Pro: copy of the block below, outputs zeroed, preserving) | stack (G_stack, "
        "changes the function) | copy (duplicate in place, changes the function)",
        "--depth.init",
        metavar="OP",
    )
    where: str = option(
        "interleave", "where new blocks go (not stack): interleave | top | bottom", "--depth.where", metavar="W"
    )
    seed: int = option(
        None, "seed of the new blocks' own init (default: train.seed)", "--growth-seed", kind=int, metavar="S"
    )
    rewarmup: object = option(
        None,
        "asymmetric lr re-warmup of the new entries: RHO,TAU (SPARKLING: 1.3,250)",
        "--rewarmup",
        metavar="RHO,TAU",
    )
    width: dict = option(
        None,
        "a width growth applied first in the same growth (the --width.* flags given "
        "beside --depth.*), as its spec mapping",
    )

    def validate(self) -> DepthSpec:
        from .width import parse_pair  # the one RHO,TAU parser, shared with width growth

        super().validate()
        layers = self.layers
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ConfigError(
                f"--depth.layers={layers!r} (valid: the new layer count, an integer larger than the current one)"
            )
        if self.init not in INITS:
            raise ConfigError(f"--depth.init={self.init!r} (valid: {'|'.join(INITS)})")
        if self.where not in WHERES:
            raise ConfigError(f"--depth.where={self.where!r} (valid: {'|'.join(WHERES)})")
        if self.init == "stack" and self.where != "interleave":
            raise ConfigError(
                f"--depth.where={self.where!r} with --depth.init stack (valid: no --depth.where; "
                "G_stack repeats the whole stack, so where the copies go is fixed)"
            )
        check_int(self.seed, "--growth-seed", minimum=0)
        self.rewarmup = parse_pair(self.rewarmup, "--rewarmup")
        if self.width is not None:
            self.width = self._carried_width()
        return self

    def _carried_width(self) -> dict:
        """The carried width spec, validated, with the growth-wide settings checked to agree (one growth has one
        optimizer-state policy and one re-warmup: this spec's)."""
        w = self.width
        if not isinstance(w, dict):
            raise ConfigError(f"depth.width={w!r} (valid: a width growth spec mapping, e.g. {{ffn: 256}})")
        if w.get("family", "width") != "width":
            raise ConfigError(f"depth.width.family={w.get('family')!r} (valid: width; depth carries width only)")
        ws = spec_from_dict({**w, "family": "width"}, "depth.width")
        if ws.rewarmup_all:
            raise ConfigError(
                "--rewarmup-all with --depth.* (valid: --rewarmup RHO,TAU: one re-warmup for the new "
                "channels and the new blocks)"
            )
        if ws.optimizer_state != self.optimizer_state or (ws.rewarmup and ws.rewarmup != self.rewarmup):
            raise ConfigError(
                f"depth.width.optimizer_state={ws.optimizer_state!r} / rewarmup={ws.rewarmup!r} differ "
                f"from the growth's ({self.optimizer_state!r} / {self.rewarmup!r}) (valid: give them "
                "once, for the whole growth)"
            )
        return {k: v for k, v in ws.to_dict().items() if k != "family"}

    def width_spec(self):
        return None if self.width is None else spec_from_dict({**self.width, "family": "width"}, "depth.width")

    def applies_to(self, m) -> None:
        kind = m.arch.kind
        if kind == "recurrent":
            raise ConfigError(
                "depth growth of model.arch.kind='recurrent' (NEXUS v4.1): its depth is the loop count "
                "(arch.t_inner x arch.n_sup) over one shared block stack, and more loops are a change "
                "of the run, not of its parameters, nor function preserving (valid: a transformer "
                "model; for more loops start a run from the weights with --init-from and "
                "--model.arch.t_inner N)"
            )
        if kind != "transformer":
            raise ConfigError(
                f"depth growth of model.arch.kind={kind!r} (valid: transformer; depth growth inserts "
                "pre-norm transformer blocks)"
            )
        if self.width is not None:
            self.width_spec().applies_to(m)
        old = m.n_layers
        if self.layers <= old:
            raise ConfigError(
                f"--depth.layers={self.layers} is not more than the current {old} layers (valid: an "
                f"integer > {old}; depth growth never removes layers)"
            )
        if self.init == "stack" and self.layers % old:
            raise ConfigError(
                f"--depth.layers={self.layers} with --depth.init stack (valid: a multiple of the current "
                f"{old} layers, e.g. {2 * old}: G_stack repeats the whole trained stack)"
            )
        if m.mixing.anchor in LAYER_ZERO_ANCHORS and self.where == "bottom":
            raise ConfigError(
                f"--depth.where bottom on model.mixing.anchor={m.mixing.anchor!r} (valid: "
                "interleave|top; layer 0's own q/k/v/g are every later layer's anchor, so layer 0 must "
                "stay the old layer 0)"
            )
        if self.init in PRESERVING:
            block = build_on_meta(m).layers[0]
            try:
                residual_writers(block)
            except LookupError as e:
                raise ConfigError(
                    f"--depth.init {self.init} on this model: {e} (valid: --depth.init stack|copy, "
                    "which copy whole blocks)"
                ) from None


# ----------------------------------------------------------------------------- plan
def layer_plan(old: int, new: int, init: str, where: str) -> list[tuple[int, bool]]:
    """For each new layer position, (the old layer it holds or copies, whether it is a new layer)."""
    k = new - old
    if init == "stack":
        return [(i % old, i >= old) for i in range(new)]
    if where == "top":
        return [(j, False) for j in range(old)] + [(old - 1, True)] * k
    if where == "bottom":
        return [(0, True)] * k + [(j, False) for j in range(old)]
    after = [0] * old  # interleave: how many new blocks follow each old one
    for t in range(k):
        after[math.ceil((t + 1) * old / k) - 1] += 1
    out: list[tuple[int, bool]] = []
    for j in range(old):
        out += [(j, False)] + [(j, True)] * after[j]
    return out


def residual_writers(block: nn.Module) -> list[str]:
    """Names (relative to the block) of the tensors through which a pre-norm block writes the residual stream:
    attention's output projection and the MLP's down projection(s) (every MoE expert's), or the MLP itself when
    it is one projection (TokenFormer's Pattention FFN). A Linear gives its weight and bias; another projection
    its declared output side (`width_ports["out"]`) and bias. LookupError when a part has none."""
    out: list[str] = []
    attn = getattr(block, "attn", None)
    o_proj = getattr(attn, "o_proj", None)
    if o_proj is None:
        raise LookupError(f"its attention ({type(attn).__name__}) has no output projection o_proj to zero")
    out += [f"attn.o_proj.{n}" for n in _output_side(o_proj)]
    mlp = getattr(block, "mlp", None)
    downs = [name for name, mod in mlp.named_modules() if name.split(".")[-1] == "down_proj"]
    if downs:
        out += [f"mlp.{d}.{n}" for d in downs for n in _output_side(mlp.get_submodule(d))]
    elif _output_side(mlp, strict=False):
        out += [f"mlp.{n}" for n in _output_side(mlp)]
    else:
        raise LookupError(f"its MLP ({type(mlp).__name__}) has no down_proj and declares no output side to zero")
    return out


def _output_side(module: nn.Module, strict: bool = True) -> list[str]:
    if isinstance(module, nn.Linear):
        return ["weight"] + (["bias"] if module.bias is not None else [])
    ports = getattr(module, "width_ports", None) or {}
    if "out" in ports:
        return [ports["out"][0]] + (["bias"] if getattr(module, "bias", None) is not None else [])
    if type(module).__name__ == "Pattention":  # y = w(x) @ value_tokens (+ bias): zero values, zero output
        return ["value_tokens"] + (["bias"] if module.bias is not None else [])
    if strict:
        raise LookupError(f"{type(module).__name__} declares no output side")
    return []


# ----------------------------------------------------------------------------- the grower
def _split(name: str) -> tuple[int | None, str]:
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit():
        return int(parts[1]), parts[2]
    return None, name


def grow_depth(model, cfg: RunConfig, spec: DepthSpec) -> GrowthResult:
    base, base_cfg, base_maps, width_record, width_report = model, cfg.model, {}, None, {}
    ws = spec.width_spec()
    if ws is not None:  # width first: the width grower sees only old blocks, new blocks are built at the final width
        wres = GROWERS.get("width")(model, cfg, ws)
        base, base_cfg, base_maps = wres.model, wres.model_cfg, wres.param_maps
        width_record, width_report = wres.record, wres.report
    old_n = base_cfg.n_layers
    plan = layer_plan(old_n, spec.layers, spec.init, spec.where)
    new_mcfg = copy.deepcopy(base_cfg)
    new_mcfg.n_layers = spec.layers
    seed = cfg.train.seed if spec.seed is None else spec.seed
    with torch.no_grad():
        new_model = build_initialized(base, new_mcfg, seed)  # new blocks keep this init where nothing is copied
        maps = _copy_tensors(base, new_model, plan, spec.init, base_maps)
        zeroed = []
        if spec.init in PRESERVING:
            layers = cast(nn.ModuleList, new_model.layers)  # every model keeps its blocks there (LanguageModel)
            for k, (_, is_new) in enumerate(plan):
                if is_new:
                    for rel in residual_writers(layers[k]):
                        layers[k].get_parameter(rel).zero_()
                        zeroed.append(f"layers.{k}.{rel}")
    new_at = [k for k, (_, is_new) in enumerate(plan) if is_new]
    record = {
        "layers": [old_n, spec.layers],
        "init": spec.init,
        "where": spec.where,
        "seed": seed,
        "layer_sources": [j for j, _ in plan],
        "new_layers": new_at,
        "rewarmup": spec.rewarmup,
        "order": "width then depth" if ws is not None else "depth",
    }
    if width_record is not None:
        record["width_growth"] = width_record
    preserving = spec.init in PRESERVING and (ws is None or _width_preserves(ws))
    report = {
        **({f"width {k}": v for k, v in width_report.items() if isinstance(v, str)}),
        "grown": f"layers {old_n}->{spec.layers} ({spec.init}"
        + ("" if spec.init == "stack" else f", {spec.where}")
        + f"; new at {_ranges(new_at)})",
        "function": (_preserved_note(ws) if preserving else _changed_note(spec, ws)),
    }
    report["params"] = (
        f"{sum(p.numel() for p in model.parameters()):,} -> {sum(p.numel() for p in new_model.parameters()):,}"
    )
    if ws is not None:
        report["order"] = "width first, then depth on the widened model; verified once, after both"
    if spec.rewarmup:
        rw = cast(dict, spec.rewarmup)  # validate() made it parse_pair's {"rho", "tau"} (the field takes the raw forms)
        report["rewarmup"] = f"rho={rw['rho']} tau={rw['tau']} (new blocks and new channels)"
    from .diagnostics import rms_ratio_report, stream_pairs

    pairs = stream_pairs(maps, len(model.layers) + 1, spec.layers + 1)
    report.update(rms_ratio_report(model, new_model, cfg.model.vocab_size, pairs=pairs))
    return GrowthResult(model=new_model, model_cfg=new_mcfg, param_maps=maps, record=record, report=report)


def _copy_tensors(base: nn.Module, new_model: nn.Module, plan, init: str, base_maps: dict) -> dict[str, ParamMap]:
    """Copy every old tensor to its new position and, for copying inits, each new block's tensors from its
    source block. Returns the ParamMap of every new parameter, relative to the model before *this call's caller*
    grew anything (composed with the width growth's maps when width went first)."""
    copies = init != "zero"
    old_params = dict(base.named_parameters())
    old_buffers = dict(base.named_buffers())
    placed: set[str] = set()
    maps: dict[str, ParamMap] = {}

    def source(name: str) -> tuple[str, bool]:
        k, rel = _split(name)
        if k is None:
            return name, False
        j, is_new = plan[k]
        return f"layers.{j}.{rel}", is_new

    for name, p in new_model.named_parameters():
        src, is_new = source(name)
        old = old_params.get(src)
        prior = base_maps.get(src, ParamMap(old_name=src))  # where the source's values were before width growth
        if not is_new:
            if old is None or old.shape != p.shape:
                raise RuntimeError(f"depth growth found no old tensor {src!r} for {name!r}")
            p.copy_(old)
            placed.add(src)
            maps[name] = dataclasses.replace(prior)
        elif copies and old is not None and old.shape == p.shape:
            p.copy_(old)
            maps[name] = ParamMap(
                old_name=None, old_slices=prior.old_slices, copy_source=prior.copy_source, copy_of=prior.old_name
            )
        else:  # a zero block, or a tensor its source block lacks (NuRes layer 0 has no mixer): the own init
            maps[name] = ParamMap(old_name=None)
    missing = sorted(set(old_params) - placed)
    if missing:
        raise RuntimeError(f"depth growth has no place for the old parameter {missing[0]!r}")
    for name, b in new_model.named_buffers():
        src, is_new = source(name)
        old = old_buffers.get(src)
        if old is not None and old.shape == b.shape and (copies or not is_new):
            b.copy_(old)
    return maps


def _width_preserves(ws) -> bool:
    """Whether the carried width growth keeps the function by construction (its `exact` mode); any other mode
    may not, and the verifier's max |dlogits| then says by how much."""
    return ws.preserve == "exact"


def _preserved_note(ws) -> str:
    note = "preserved: every new block's residual writers are zero, so it is the identity"
    # width's exact split sums the same terms over a longer inner dimension: equal up to fp32 rounding, not bitwise
    return note if ws is None else note + "; the width growth is exact up to the rounding of its longer sums"


def _changed_note(spec: DepthSpec, ws) -> str:
    if spec.init == "stack":
        what = "G_stack repeats the trained stack"
    elif spec.init == "copy":
        what = "duplicated blocks add their output a second time"
    else:
        what = f"the width growth (--preserve {ws.preserve}) rescales on purpose"
    return f"changed on purpose ({what}): a loss jump is expected, see loss_jump"


def _ranges(ks: list[int]) -> str:
    return ",".join(map(str, ks)) if len(ks) <= 12 else f"{','.join(map(str, ks[:12]))},... ({len(ks)} blocks)"


# registered by a call, not a decorator: mutmut does not mutate decorated functions
register_grower("depth", DepthSpec)(grow_depth)


# The progressive experiment's depth methods (growth/methods.py). The small model is baseline-tiny (d 128, byte
# tokens) at 2 layers; the grown and from-scratch models have 4, or 8 for G_stack. G_stack's paper grows early
# by a factor g = 4 ("Stacking Your Transformers", sec. 4: g = 4 and a small fraction of the budget); the
# experiment's --grow-at decides when. The re-warmup of the function-preserving insertion uses the same
# (rho, tau) as the SPARKLING methods here (width.py), for a like-for-like comparison; G_stack's paper has none.
_DEPTH_SMALL = {"model.n_layers": 2}
register_method(
    Method(
        "gstack",
        "depth",
        "baseline-tiny",
        {"layers": 8, "init": "stack"},
        "G_stack (Du et al. 2024): 2 layers stacked 4x to 8 (g = 4); changes the function on purpose (loss jump "
        "reported)",
        _DEPTH_SMALL,
    ),
    Method(
        "depth-zero",
        "depth",
        "baseline-tiny",
        {"layers": 4, "init": "zero", "where": "interleave", "rewarmup": "1.3,30"},
        "function-preserving insertion: 2 -> 4 layers, new blocks interleaved with their output projections "
        "zero (LLaMA-Pro's zero W_O / W_down), asymmetric optimizer state, re-warmup of the new blocks",
        _DEPTH_SMALL,
    ),
    Method(
        "depth-copy-zero-out",
        "depth",
        "baseline-tiny",
        {"layers": 4, "init": "copy-zero-out", "rewarmup": "1.3,30"},
        "LLaMA-Pro block expansion: 2 -> 4 layers, each new block a copy of the one below with W_O / W_down "
        "zeroed (function preserving), re-warmup of the new blocks",
        _DEPTH_SMALL,
    ),
    Method(
        "width-depth",
        "depth",
        "baseline-tiny",
        {
            "layers": 4,
            "init": "zero",
            "rewarmup": "1.3,30",
            "width": {"ffn": 512, "init": "copy,copy", "preserve": "exact"},
        },
        "width and depth in one growth: FFN inner 256 -> 512 (exact copy split) then 2 -> 4 layers (zero output "
        "projections); function preserving, re-warmup of every new entry",
        {**_DEPTH_SMALL, "model.ffn_hidden": 256},
    ),
)
