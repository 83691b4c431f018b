"""Nexus-Rank projection (Nexusformer, seed 000 eq. 6): y = sigma(sigma(x W_M) W_A) W_D, D -> M -> A -> D_out.

Three forms:
  paper        : the equations as printed, sigma = GELU.
  l2norm       : the public code's current `l2_norm` (EquivalentMLP): each pre-activation h is
                 replaced by h / (||h||_2 + 1e-5) * sqrt(D_out) before the GELU, at both stages, where
                 D_out is the projection's output width. Growing M or A leaves that factor alone.
  l2norm_width : the public code's earlier form, h / ||h||_2 * sqrt(width of h) (eps 1e-6 here, to
                 keep an all-zero pre-activation finite). The sqrt(width) factor is read from
                 the growth pins `frozen_m`/`frozen_a` (model.growth_state) when set, \
so growing M or A does not rescale the old
                 units (growth freezes it at the pre-growth width, like TokenFormer's sqrt(n)).

The three stages are plain nn.Linear layers: the optimizer, Muon, the FLOPs walker and the growth
code all see ordinary matrices (weight shapes: w_m (M, D), w_a (A, M), w_d (D_out, A)).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .projections import PROJECTIONS, ProjectionKind

L2_EPS = 1e-5  # the public code's eps, added to the norm (l2norm form)
L2_WIDTH_EPS = 1e-6  # l2norm_width: keeps an all-zero pre-activation (e.g. right after an all-zero growth) finite
L2_FORMS = ("l2norm", "l2norm_width")


def l2_rescale(h: torch.Tensor, scale: float, eps: float = L2_EPS) -> torch.Tensor:
    """h / (||h||_2 + eps) * scale over the last axis (the public code's per-stage normalization)."""
    return h * (scale / (h.norm(dim=-1, keepdim=True) + eps))


class NexusRank(nn.Module):
    # Width growth (models/width_roles.py): only the stages touching the residual stream grow. W_M is
    # linear in its input, so a fan-in factor on its columns acts on the pre-activation exactly as on a
    # Linear's output; W_A and the widths M, A stay.
    width_ports = {"in": ("w_m.weight", 1), "out": ("w_d.weight", 0)}

    def __init__(
        self,
        d_in: int,
        d_out: int,
        m: int,
        a: int,
        form: str = "paper",
        bias: bool = False,
        scale_m: int = 0,
        scale_a: int = 0,
    ):
        super().__init__()
        self.d_in, self.d_out, self.m, self.a, self.form = d_in, d_out, m, a, form
        self.w_m = nn.Linear(d_in, m, bias=False)
        self.w_a = nn.Linear(m, a, bias=False)
        self.w_d = nn.Linear(a, d_out, bias=bias)
        # factors multiplying the normalized pre-activations: sqrt(D_out) at both stages (l2norm), or
        # sqrt of each stage's (possibly pinned) width (l2norm_width)
        if form == "l2norm":
            self.scale_m = self.scale_a = math.sqrt(d_out)
        else:
            self.scale_m = math.sqrt(scale_m or m)
            self.scale_a = math.sqrt(scale_a or a)
        self.eps = L2_WIDTH_EPS if form == "l2norm_width" else L2_EPS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = self.form in L2_FORMS
        h = self.w_m(x)
        if normed:
            h = l2_rescale(h, self.scale_m, self.eps)
        h = self.w_a(F.gelu(h))
        if normed:
            h = l2_rescale(h, self.scale_a, self.eps)
        return self.w_d(F.gelu(h))

    def reset_special_parameters(self) -> None:
        # The global init (std 0.02) would leave the pre-activations of the paper form ~0.1-0.2, where
        # GELU is nearly linear; 1/sqrt(fan_in) keeps them O(1) so both nonlinearities act from step 0.
        # W_D keeps the global init so the projection's output scale matches a Linear baseline.
        for lin in (self.w_m, self.w_a):
            nn.init.normal_(lin.weight, std=lin.in_features**-0.5)

    def extra_repr(self) -> str:
        return f"{self.d_in}->{self.m}->{self.a}->{self.d_out}, form={self.form}"


def make_nexus_rank(cfg: ModelConfig, target: str, d_in: int, d_out: int, bias: bool) -> NexusRank:
    p = cfg.projection
    return NexusRank(
        d_in,
        d_out,
        p.resolved_m(cfg.d_model),
        p.resolved_a(cfg.d_model),
        p.form,
        bias,
        cfg.pinned("frozen_m"),
        cfg.pinned("frozen_a"),
    )


PROJECTIONS.register("nexus_rank")(ProjectionKind(make_nexus_rank))


def nexus_rank_modules(model: nn.Module) -> dict[str, NexusRank]:
    """name -> NexusRank module, in model order."""
    return {n: m for n, m in model.named_modules() if isinstance(m, NexusRank)}
