"""TokenFormer growth: append parameter tokens to every Pattention layer (q/k/v/o and/or the FFN).

New key tokens start at zero, so the new scores are 0: GELU(0) = 0 and the L2 norm of each score
row is unchanged. New value tokens are random at the trained values' scale, so the new keys get a
gradient at once (init=exact, the default). TokenFormer itself zeroes both (init=zero): exact but
dead, every new token's gradient is zero forever.

Exactness also needs tau = sqrt(n) to stay at its pre-growth value. With
model.projection.freeze_scale (default) growth pins the old n in model.growth_state (frozen_n /
ffn_frozen_n, pins the pattention kind declares); without it tau follows the new n, every old score
is rescaled, and the report says the growth is not exact. The softmax variant is never exact (a zero
score still takes softmax mass).
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

INITS = ("exact", "zero", "noise")


@dataclass
class TokenFormerSpec(NewEntriesSpec):
    """TokenFormer: append parameter tokens to every Pattention layer."""

    triggers: ClassVar[tuple[str, ...]] = ("add_tokens", "add_ffn_tokens")

    add_tokens: int = option(
        None, "parameter tokens appended to every q/k/v/o Pattention", "--add-tokens", kind=int, metavar="N"
    )
    add_ffn_tokens: int = option(
        None, "parameter tokens appended to every FFN Pattention", "--add-ffn-tokens", kind=int, metavar="N"
    )
    init: str = option(
        "exact",
        "exact (zero keys, random values: exact and live) | zero (TokenFormer's, dead) | noise",
        "--token-init",
        choices=INITS,
    )

    def validate(self) -> TokenFormerSpec:
        super().validate()
        check_int(self.add_tokens, "--add-tokens")
        check_int(self.add_ffn_tokens, "--add-ffn-tokens")
        if not self.add_tokens and not self.add_ffn_tokens:
            raise ConfigError("tokenformer growth needs --add-tokens N and/or --add-ffn-tokens N (valid: integers > 0)")
        self.init = self.init or "exact"
        if self.init not in INITS:
            raise ConfigError(f"--token-init={self.init!r} (valid for TokenFormer growth: {'|'.join(INITS)})")
        return self

    def applies_to(self, model_cfg) -> None:
        """A TokenFormer model with Pattention where tokens are added (attention and/or FFN)."""
        pcfg = model_cfg.projection
        if pcfg.kind != "pattention":
            raise ConfigError(
                f"model.projection.kind={pcfg.kind!r}: this model has no Pattention layers to add tokens "
                "to (valid: a TokenFormer model, --model.projection.kind pattention)"
            )
        if self.add_tokens and not [t for t in pcfg.targets if t != "ffn"]:
            raise ConfigError(
                f"--add-tokens={self.add_tokens}: model.projection.targets={pcfg.targets} has no attention "
                "Pattention (valid: use --add-ffn-tokens)"
            )
        if self.add_ffn_tokens and "ffn" not in pcfg.targets:
            raise ConfigError(
                f"--add-ffn-tokens={self.add_ffn_tokens}: model.projection.targets={pcfg.targets} has no "
                "FFN Pattention (valid: use --add-tokens)"
            )


def grow_tokenformer(model, cfg: RunConfig, spec: TokenFormerSpec) -> GrowthResult:
    from ..models.pattention import pattention_modules

    pcfg = cfg.model.projection
    mods = pattention_modules(model)
    if not mods:
        raise RuntimeError("the model has no Pattention modules although model.projection.kind is pattention")
    add, add_ffn, init, frac = spec.add_tokens or 0, spec.add_ffn_tokens or 0, spec.init, spec.noise_frac

    d = cfg.model.d_model
    old_n, old_ffn_n = pcfg.param_tokens or d, pcfg.ffn_param_tokens or cfg.model.ffn
    new_model_cfg = copy.deepcopy(cfg.model)
    np_ = new_model_cfg.projection
    if add:
        np_.param_tokens = old_n + add
    if add_ffn:
        np_.ffn_param_tokens = old_ffn_n + add_ffn
    if pcfg.freeze_scale:  # tau stays sqrt(n before the first growth)
        new_model_cfg.pin("frozen_n", cfg.model.pinned("frozen_n") or old_n)
        new_model_cfg.pin("ffn_frozen_n", cfg.model.pinned("ffn_frozen_n") or old_ffn_n)

    gen = torch.Generator(device="cpu").manual_seed(spec.generator_seed(cfg.train.seed))

    def fill_new(name: str, p: torch.Tensor, old: torch.Tensor) -> None:
        zero = init == "zero" or (init == "exact" and name.endswith("key_tokens"))
        std = matched_std(old) * (frac if init == "noise" else 1.0)
        for _, sl in region_blocks(old.shape, p.shape):
            if zero:
                p[sl] = 0.0
            else:
                fill_normal(p[sl], std, gen)

    new_model, maps, old_shapes = inherit(model, new_model_cfg, fill_new)
    exact = init in ("exact", "zero") and pcfg.freeze_scale and pcfg.pattention_act == "gelu_l2"
    scale_mode = "frozen (tau = sqrt(n before growth))" if pcfg.freeze_scale else "follows n (tau = sqrt(new n))"
    record = {
        "old_tokens": old_n,
        "new_tokens": np_.param_tokens or old_n,
        "old_ffn_tokens": old_ffn_n,
        "new_ffn_tokens": np_.ffn_param_tokens or old_ffn_n,
        "init": init,
        "scale": "frozen" if pcfg.freeze_scale else "free",
        "exact": exact,
        "old_shapes": old_shapes,
    }
    report = {
        "pattention layers": len(mods),
        "tokens": f"{old_n} -> {record['new_tokens']}" if add else "unchanged",
        "ffn tokens": f"{old_ffn_n} -> {record['new_ffn_tokens']}" if add_ffn else "unchanged",
        "init": init,
        "scale factor": scale_mode,
        "function preserved by construction": exact,
    }
    if not exact:
        why = (
            "tau follows n (set model.projection.freeze_scale=true for exact growth)"
            if not pcfg.freeze_scale
            else "softmax Pattention gives zero scores softmax mass"
            if pcfg.pattention_act == "softmax"
            else "noise init"
        )
        report["note"] = f"growth is not function-preserving: {why}"
    if init == "zero":
        report["warning"] = (
            "all-zero key and value tokens: every new token's gradient is zero forever (use --token-init exact)"
        )
    return GrowthResult(new_model, new_model_cfg, maps, record, report)


# registered by a call, not a decorator: mutmut does not mutate decorated functions
register_grower("tokenformer", TokenFormerSpec)(grow_tokenformer)


# the progressive experiment's TokenFormer methods (growth/methods.py)
register_method(
    Method(
        "tokenformer-matched",
        "tokenformer",
        "baseline-tiny",
        {"add_tokens": 254, "init": "exact"},
        "TokenFormer: Q/K/V parameter tokens 242->496 (sized like nexus-rank-matched)",
        {"model.projection.kind": "pattention", "model.projection.param_tokens": 242},
    ),
    Method(
        "tokenformer",
        "tokenformer",
        "baseline-tiny",
        {"add_tokens": 64, "init": "exact"},
        "TokenFormer: Q/K/V parameter tokens 64->128 (frozen sqrt(n) scale)",
        {"model.projection.kind": "pattention", "model.projection.param_tokens": 64},
    ),
)
