"""Parameter counts from a ModelConfig by arithmetic alone: no model built, no torch imported.

It sits in the torch-free tier beside the kinds' own counts, so the model builder's size check
(models/accounting.param_count) can ask it before allocating anything.

`nexus presets` lists ~100 presets; building each (even on the meta device) costs ~0.1-0.7 s, and
importing torch is ten times the listing (benchmarks/README.md, presets_speed.py), so it counts here. The baseline
(embeddings, standard attention over Linear projections, SwiGLU, norms, anchor mixing) is counted here; a
registered kind counts its own layers in its torch-free options file (`params` of its options in
nexus/kind_options/). tests/test_param_formula.py holds the totals to a real build of every preset, so a
model change that these counts do not follow fails there, and holds the listing to importing no torch.
"""

from __future__ import annotations

from ..config import ModelConfig

_COMPONENTS = ("q", "k", "v", "g")  # models/mixing.py order


def _linear(d_in: int, d_out: int, bias: bool = False) -> int:
    return d_in * d_out + (d_out if bias else 0)


def _swiglu(d: int, hidden: int) -> int:
    return 3 * d * hidden


def _projection(cfg: ModelConfig, target: str, d_in: int, d_out: int, bias: bool) -> int:
    """models/projections.py: Linear, or the projection kind's own count for the targets it replaces."""
    if not cfg.projection.uses(target):
        return _linear(d_in, d_out, bias)
    return cfg.projection.params(cfg, target, d_in, d_out, bias)


def _attention(cfg: ModelConfig) -> int:
    """models/attention.py Attention: q/k/v/o projections, optional gate and QK-norm gains."""
    d, H, KV, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.hd
    bias = cfg.attention_bias
    n = (
        _projection(cfg, "q", d, H * hd, bias)
        + _projection(cfg, "k", d, KV * hd, bias)
        + _projection(cfg, "v", d, KV * hd, bias)
        + _projection(cfg, "o", H * hd, d, False)
    )
    gate = cfg.attention.gate
    if gate != "none":
        n += _linear(d, H * hd if gate == "elementwise" else H)
    if cfg.qk_norm:
        n += 2 * hd
    return n


def _attention_layer(cfg: ModelConfig) -> int:
    """Standard attention, or the count the registered kind `model.attention.kind` declares."""
    base = _attention(cfg)
    return base if cfg.attention.kind == "standard" else cfg.attention.params(cfg, base)


def _component_shape(cfg: ModelConfig, comp: str) -> tuple[int, int]:
    if comp == "q":
        return cfg.n_heads, cfg.hd
    if comp in ("k", "v"):
        return cfg.kv_heads, cfg.hd
    return cfg.n_heads, (cfg.hd if cfg.attention.gate == "elementwise" else 1)


def _anchor_norms(cfg: ModelConfig) -> int:
    mx = cfg.mixing
    n = 0
    for c in mx.components:
        if mx.anchor == "value_residual":
            continue
        if mx.norm == "all" or (mx.norm == "qk" and c in ("q", "k")):
            heads, width = _component_shape(cfg, c)
            n += heads if width == 1 else width
    return n


def _mixing(cfg: ModelConfig) -> int:
    """models/mixing.py: the anchor source (Exo projection + norms, or layer 0's capture norms) and
    one mixer per mixed layer (two coefficient vectors per component, optional dynamic MLP)."""
    mx = cfg.mixing
    if mx.anchor == "none":
        return 0
    comps = [c for c in _COMPONENTS if c in mx.components]
    if mx.anchor == "exo":
        n = _linear(cfg.d_model, sum(h * w for h, w in (_component_shape(cfg, c) for c in comps))) + _anchor_norms(cfg)
        mixed_layers = cfg.n_layers
    else:
        n = _anchor_norms(cfg)
        mixed_layers = cfg.n_layers - 1
    per_mixer = 0
    if mx.learnable:
        for c in comps:
            heads, width = _component_shape(cfg, c)
            per_mixer += 2 * {"elementwise": heads * width, "headwise": heads, "scalar": 1}[mx.granularity]
    if mx.dynamic:
        # eq. 6 MLP on the layer's pre-normed input (no norm of its own)
        per_mixer += _linear(cfg.d_model, mx.dynamic_hidden) + _linear(mx.dynamic_hidden, 2 * len(_COMPONENTS), True)
    return n + mixed_layers * per_mixer


def _mlp(cfg: ModelConfig) -> int:
    """The dense baseline (SwiGLU, or one projection of the configured kind when it targets ffn), or the
    count the MLP kind `model.mlp.kind` declares in its options."""
    base = (
        _projection(cfg, "ffn", cfg.d_model, cfg.d_model, False)
        if cfg.projection.uses("ffn")
        else _swiglu(cfg.d_model, cfg.ffn)
    )
    return base if cfg.mlp.kind == "dense" else cfg.mlp.params(cfg, base)


def _embeddings(cfg: ModelConfig) -> int:
    return cfg.vocab_size * cfg.d_model * (1 if cfg.tie_embeddings else 2)


def count(cfg: ModelConfig) -> dict:
    """{'total', 'embedding', 'non_embedding', 'ternary'} parameter counts (ternary: BitLinear weights)."""
    if cfg.arch.kind != "transformer":  # another architecture counts itself in its options (kind_options/)
        return cfg.arch.params(cfg)
    d = cfg.d_model
    emb = _embeddings(cfg)
    body = cfg.n_layers * (2 * d + _attention_layer(cfg) + _mlp(cfg)) + _mixing(cfg)
    total = emb + body + d  # + the final norm gain
    return {"total": total, "embedding": emb, "non_embedding": total - emb, "ternary": 0}


def sizes(cfg: ModelConfig) -> dict:
    """count() plus fp16 size and, for ternary models, the packed size (2 bits per ternary weight,
    everything else fp16), in MB; the form `nexus presets` and `nexus analyze params` print."""
    c = count(cfg)
    out = {
        "total": c["total"],
        "embedding": c["embedding"],
        "non_embedding": c["non_embedding"],
        "fp16_mb": c["total"] * 2 / 1e6,
        "ternary_mb": None,
    }
    if c["ternary"]:
        out["ternary_mb"] = (c["ternary"] * 2 / 8 + (c["total"] - c["ternary"]) * 2) / 1e6
    return out
