"""Cross-layer anchor mixing of attention projections (ResFormer, NuResFormer, ExoFormer).

For every mixed component S in {q, k, v, g} of layer n (ExoFormer paper, eq. 1 and eq. 7):

    S_hat_n = (lambda1 * gamma1) * Norm(S_anchor) + (lambda2 * gamma2) * S_n

  * anchors: `value_residual` (ResFormer) and `nures` take layer 0's own projections (q, k after its
    QK-norm; v, g raw); `exo` computes them once per forward from the token embeddings with one
    Linear(d, 4d) split into q/k/v/g.
  * Norm: a per-head RMSNorm with gain on each anchor (mixing.norm: all | qk | none).
  * lambda granularity: elementwise (heads, head_dim), headwise (heads, 1) or scalar (1, 1).
  * gamma: per-token sigmoid factors from a small MLP (dynamic mixing), otherwise 1.

Mixing runs inside Attention.forward right after the projections and before QK-norm and RoPE, so
the layer order is: mix -> QK-norm -> RoPE -> attention -> o * sigmoid(g_hat) -> W_o.
The anchor does not depend on other positions, so KV-cached decoding needs no extra state.

Nothing here reads the model config or re-derives attention's shapes: `build_anchor_mixing` gets the
MixingConfig, the model width and the (heads, width) table attention itself uses
(`attention.component_shapes`), and returns the anchor source plus one mixer per layer, which the
model hands to each attention at construction.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import MixingConfig
from .layers import RMSNorm
from .modulated_mix import mix_layer

COMPONENTS = ("q", "k", "v", "g")  # canonical order; also the order of the 8 dynamic factors


Shapes = dict[str, tuple[int, int]]  # component -> (heads, width), from attention.component_shapes


def coefficient_granularity(mixing: MixingConfig) -> str:
    """ResFormer's fixed 0.5 / 0.5 is one scalar per component; otherwise mixing.granularity."""
    return "scalar" if mixing.anchor == "value_residual" and not mixing.learnable else mixing.granularity


def coefficient_shape(shape: tuple[int, int], granularity: str) -> tuple[int, int]:
    heads, width = shape
    return {"elementwise": (heads, width), "headwise": (heads, 1), "scalar": (1, 1)}[granularity]


def anchor_is_normed(mixing: MixingConfig, comp: str) -> bool:
    """ResFormer reuses the raw v_1; the unified framework normalizes all anchors or only Q/K ones."""
    if mixing.anchor == "value_residual":
        return False
    return mixing.norm == "all" or (mixing.norm == "qk" and comp in ("q", "k"))


class AnchorNorm(nn.Module):
    """Per-head RMSNorm with gain on a (B, T, heads, width) anchor. A headwise gate has one logit per
    head, where a per-head norm would collapse to a sign, so it is normalized across heads instead."""

    def __init__(self, heads: int, width: int, eps: float):
        super().__init__()
        self.across_heads = width == 1
        self.norm = RMSNorm(heads if self.across_heads else width, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.across_heads:
            return self.norm(x.squeeze(-1)).unsqueeze(-1)
        return self.norm(x)


def make_anchor_norms(shapes: Shapes, normed: list[str], eps: float) -> nn.ModuleDict:
    return nn.ModuleDict({c: AnchorNorm(*shapes[c], eps) for c in normed})


def _normalize(norms: nn.ModuleDict, comp: str, x: torch.Tensor) -> torch.Tensor:
    return norms[comp](x) if comp in norms else x


# ----------------------------------------------------------------------------- anchor sources
class AnchorSource(nn.Module):
    """Where a model's cross-layer anchors come from (ExoAnchor, LayerZeroAnchor)."""

    def width_refusal(self, spec) -> str:
        # the anchors' coefficient and norm shapes follow the heads, but no growth rule keeps the mixed
        # anchors of grown channels consistent; nothing in the papers grows an anchor-mixed model
        return "anchor mixing (model.mixing.anchor) has no width-growth rule (valid: model.mixing.anchor=none)"


class ExoAnchor(AnchorSource):
    """ExoFormer's exogenous anchor: one fused Linear on the token embeddings, split into the mixed
    components, each normalized. Computed once per forward, independent of depth."""

    def __init__(self, d_model: int, shapes: Shapes, components: list[str], normed: list[str], eps: float):
        super().__init__()
        self.components = list(components)
        self.shapes = {c: shapes[c] for c in self.components}
        self.sizes = [h * w for h, w in self.shapes.values()]
        self.proj = nn.Linear(d_model, sum(self.sizes), bias=False)
        if len(set(self.sizes)) == 1:
            # Muon must orthogonalize W_anc^Q, W_anc^K, W_anc^V, W_anc^G separately (the paper's four
            # independent matrices); the fused weight is split into equal row blocks for that.
            self.proj.weight._muon_blocks = len(self.sizes)
        else:
            # Unequal blocks (GQA or a headwise gate): Muon splits at these row counts instead.
            self.proj.weight._muon_split = list(self.sizes)
        self.norms = make_anchor_norms(shapes, normed, eps)

    def forward(
        self, embeddings: torch.Tensor, input_ids: torch.Tensor | None = None, embed_weight: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The anchors: component -> (B, T, heads, width). `input_ids`/`embed_weight` may be given only
        when `embeddings` is the plain lookup embed_weight[input_ids]; without them every token is
        projected directly."""
        B, T, _ = embeddings.shape
        # The anchor is a function of the token id alone, so when the vocabulary has fewer rows than the
        # batch has tokens, projecting and normalizing the embedding table once and gathering rows gives
        # the same numbers with V / (B * T) of the matmul and norm work, forward and backward.
        table = input_ids is not None and embed_weight is not None and embed_weight.shape[0] < B * T
        src = embed_weight if table else embeddings
        lead = src.shape[:-1]
        anchors = {}
        for c, chunk in zip(self.components, self.proj(src).split(self.sizes, dim=-1)):
            a = _normalize(self.norms, c, chunk.view(*lead, *self.shapes[c]))
            if table:
                a = F.embedding(input_ids, a.reshape(lead[0], -1)).view(B, T, *self.shapes[c])
            anchors[c] = a
        return anchors

    def flops_per_token(self, seq_len: int) -> float:
        return 0.0  # only the Linear (counted by the walker); RMSNorm is negligible (paper, app. F)


class LayerZeroAnchor(AnchorSource):
    """Anchor source for ResFormer / NuResFormer: an empty anchor dict per forward, which layer 0 fills
    as it runs (see AnchorCapture) and the later layers read."""

    def forward(self, embeddings: torch.Tensor, input_ids=None, embed_weight=None) -> dict[str, torch.Tensor]:
        return {}


class AnchorCapture(nn.Module):
    """Installed as layer 0's mixer for internal anchors: records v, g (raw projections) and q, k
    (after layer 0's QK-norm), normalized per mixing.norm. Layer 0 itself is not mixed."""

    def __init__(self, shapes: Shapes, components: list[str], normed: list[str], eps: float):
        super().__init__()
        self.components = list(components)
        self.norms = make_anchor_norms(shapes, normed, eps)

    def forward(self, parts: dict, x: torch.Tensor, anchors: dict) -> dict:
        for c in ("v", "g"):
            if c in self.components:
                anchors[c] = _normalize(self.norms, c, parts[c])
        return parts

    def after_qk_norm(self, q: torch.Tensor, k: torch.Tensor, anchors: dict):
        for c, t in (("q", q), ("k", k)):
            if c in self.components:
                anchors[c] = _normalize(self.norms, c, t)
        return q, k


# ----------------------------------------------------------------------------- mixing
class DynamicMixing(nn.Module):
    """Eq. 6: gamma = sigmoid(GELU(H W1) W2 + b), with H the layer's pre-normed input (the same tensor
    the Q/K/V/G projections read; no norm of its own), W1 (d, 16) without bias, W2 (16, 8) with bias:
    8 per-token factors (gamma1, gamma2 for q, k, v, g). W2 and b start at exactly zero so gamma = 0.5;
    that init lives in reset_special_parameters, which the model runs after its global init (the
    released ExoFormer code lost it to a later global re-init)."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, 2 * len(COMPONENTS), bias=True)
        self.reset_special_parameters()

    def reset_special_parameters(self) -> None:
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(x)[2]

    def stages(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x W1, GELU(x W1), gamma): the fused mixing path (models/fused_mix.py) keeps the first two
        for its hand-written backward."""
        h = self.fc1(x)
        a = F.gelu(h)
        return h, a, torch.sigmoid(self.fc2(a))

    def flops_per_token(self, seq_len: int) -> float:
        return 0.0  # GELU on 16 values and sigmoid on 8: negligible next to its two Linears


class AnchorMixer(nn.Module):
    """Layer n's mixer: S_hat = (l1 * g1) * anchor + (l2 * g2) * S for each mixed component.
    Coefficients are stored flat (1-D) so optimizers treat them like gains: AdamW, no weight decay."""

    def __init__(
        self,
        d_model: int,
        shapes: Shapes,
        components: list[str],
        granularity: str,
        learnable: bool,
        dynamic: bool,
        dynamic_hidden: int,
    ):
        super().__init__()
        self.components = list(components)
        self.shapes = {c: coefficient_shape(shapes[c], granularity) for c in self.components}
        self.widths = {c: shapes[c][0] * shapes[c][1] for c in self.components}
        # lambda starts at 1.0 with dynamic mixing (gamma = 0.5 makes the product 0.5), else at 0.5.
        self.init_value = 1.0 if dynamic else 0.5
        if learnable:
            self.anchor_coef = nn.ParameterDict({c: self._coef(c) for c in self.components})
            self.current_coef = nn.ParameterDict({c: self._coef(c) for c in self.components})
        else:  # fixed coefficients (ResFormer's 0.5 / 0.5): buffers, so nothing trains them
            self.anchor_coef, self.current_coef = _FixedCoefficients(), _FixedCoefficients()
            for c in self.components:
                self.anchor_coef.register_buffer(c, torch.full((self._numel(c),), self.init_value), persistent=False)
                self.current_coef.register_buffer(c, torch.full((self._numel(c),), self.init_value), persistent=False)
        self.dynamic = DynamicMixing(d_model, dynamic_hidden) if dynamic else None

    def _coef(self, c: str) -> nn.Parameter:
        return nn.Parameter(torch.full((self._numel(c),), self.init_value))

    def _numel(self, c: str) -> int:
        h, w = self.shapes[c]
        return h * w

    def reset_special_parameters(self) -> None:
        with torch.no_grad():
            for c in self.components:
                self.anchor_coef[c].fill_(self.init_value)
                self.current_coef[c].fill_(self.init_value)

    def coefficients(self, c: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(lambda1, lambda2) of component c shaped (heads or 1, width or 1) for broadcasting."""
        return self.anchor_coef[c].view(self.shapes[c]), self.current_coef[c].view(self.shapes[c])

    def forward(self, parts: dict, x: torch.Tensor, anchors: dict | None) -> dict:
        """anchors None drops the anchor term (the anchor-removal analysis, nexus.analysis.hooks)."""
        comps = self.components
        anchor_list = None if anchors is None else [anchors[c] for c in comps]
        mixed = mix_layer(
            [parts[c] for c in comps],
            anchor_list,
            [self.anchor_coef[c] for c in comps],
            [self.current_coef[c] for c in comps],
            [self.shapes[c] for c in comps],
            x,
            self.dynamic,
            [(2 * COMPONENTS.index(c), 2 * COMPONENTS.index(c) + 1) for c in comps],
        )  # (gamma1, gamma2)
        return {**parts, **dict(zip(comps, mixed))}

    def after_qk_norm(self, q: torch.Tensor, k: torch.Tensor, anchors: dict | None):
        return q, k  # every component is mixed before QK-norm (the ExoFormer order)

    def flops_per_token(self, seq_len: int) -> float:
        """Two multiplications and one addition per mixed element (paper, app. F.2: 12d for q,k,v,g)."""
        return float(sum(3 * self.widths[c] for c in self.components))


class _FixedCoefficients(nn.Module):
    """Holder of fixed coefficient buffers with dict-style access like nn.ParameterDict."""

    def __getitem__(self, name: str) -> torch.Tensor:
        return getattr(self, name)


# ----------------------------------------------------------------------------- construction
def build_anchor_mixing(
    mixing: MixingConfig, d_model: int, shapes: Shapes, n_layers: int, eps: float
) -> tuple[nn.Module, list[nn.Module | None]]:
    """(anchor source, one mixer per layer or None) for `mixing.anchor` exo | value_residual | nures.
    ExoFormer mixes every layer; with internal anchors layer 0 is the anchor (captured, unmixed)."""
    comps = [c for c in COMPONENTS if c in mixing.components]
    normed = [c for c in comps if anchor_is_normed(mixing, c)]

    def mixer() -> AnchorMixer:
        return AnchorMixer(
            d_model,
            shapes,
            comps,
            coefficient_granularity(mixing),
            mixing.learnable,
            mixing.dynamic,
            mixing.dynamic_hidden,
        )

    if mixing.anchor == "exo":
        return ExoAnchor(d_model, shapes, comps, normed, eps), [mixer() for _ in range(n_layers)]
    return LayerZeroAnchor(), [AnchorCapture(shapes, comps, normed, eps)] + [mixer() for _ in range(1, n_layers)]


def mixers(model: nn.Module) -> list[tuple[int, AnchorMixer]]:
    """(layer index, mixer) for every mixed layer, for analyses and tests."""
    return [
        (i, layer.attn.mixer)
        for i, layer in enumerate(getattr(model, "layers", []))
        if isinstance(getattr(layer.attn, "mixer", None), AnchorMixer)
    ]
