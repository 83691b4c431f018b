"""Analytic forward FLOPs per token for every architecture in nexus (the FLOPs protocol).

The walker visits the module tree once:
  * nn.Linear counts 2 * in * out per token (a multiply and an add per weight);
  * nn.Embedding is a lookup (0);
  * any module may define `flops_per_token(seq_len) -> float`: the forward FLOPs per token of its
    OWN work that is not a child nn.Linear (attention score/value products, Pattention's token
    matmuls, a tied LM head, MoE routing, extra recurrent applications, ...);
  * a module with `flops_include_children = True` reports its whole subtree itself (MoE: only the
    routed experts run, so summing every expert's Linear would over-count).
Attention products are counted as the full T x T square, as `torch.utils.flop_counter` counts them
(tests) and as MFU conventions do (6N + 12 L d T); flash kernels skip fully masked blocks, so for a
causal model this is an upper bound on the attention work actually done.
Training FLOPs per token ~ 3 x forward (backward = 2 x forward).
"""

from __future__ import annotations

import torch.nn as nn

from ..config import ModelConfig
from . import register_analysis


def module_flops(module: nn.Module, seq_len: int) -> float:
    """Forward FLOPs per token of `module` and its subtree."""
    own = 0.0
    if isinstance(module, nn.Linear):
        own = 2.0 * module.in_features * module.out_features
    fn = getattr(module, "flops_per_token", None)
    if callable(fn):
        own += float(fn(seq_len))
    if getattr(module, "flops_include_children", False):
        return own
    return own + sum(module_flops(c, seq_len) for c in module.children())


def flops_breakdown(model: nn.Module, seq_len: int) -> dict[str, float]:
    """Top-level children -> FLOPs per token, plus the model's own work ("(model)") and "total"."""
    out: dict[str, float] = {}
    fn = getattr(model, "flops_per_token", None)
    if callable(fn):
        out["(model)"] = float(fn(seq_len))
    for name, child in model.named_children():
        out[name] = module_flops(child, seq_len)
    out["total"] = sum(out.values())
    return out


def forward_flops_per_token(model_or_cfg, seq_len: int) -> float:
    """Forward FLOPs per token of a model (or a ModelConfig, built on the meta device: no memory)."""
    model = model_or_cfg
    if isinstance(model_or_cfg, ModelConfig):
        from ..models.accounting import build_on_meta

        model = build_on_meta(model_or_cfg)
    return module_flops(model, seq_len)


def train_flops_per_token(model_or_cfg, seq_len: int) -> float:
    """Training FLOPs per token: forward + backward (2 x forward)."""
    return 3.0 * forward_flops_per_token(model_or_cfg, seq_len)


def linear_layer_flops(model_or_cfg, seq_len: int) -> float:
    """Only the nn.Linear FLOPs (the paper's "linear-layer FLOPs per token" comparison, section 4.3)."""
    model = model_or_cfg
    if isinstance(model_or_cfg, ModelConfig):
        from ..models.accounting import build_on_meta

        model = build_on_meta(model_or_cfg)
    return sum(2.0 * m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear))


# ----------------------------------------------------------------------------- CalFlops-like counting
# The Nexusformer paper measured its Table 8 with CalFlops, which hooks torch functions and also
# counts normalization layers, activations and elementwise products, not only matmuls. This mode
# runs one forward on the meta device (no memory, no compute) and counts every aten op by
# CalFlops' per-op conventions: matmuls 2 * MACs (+ the bias for addmm), activations and softmax
# one FLOP per element, elementwise arithmetic one per output element, reductions one per input
# element. Our RMSNorm decomposes into pow, mean, +eps, rsqrt, mul, mul (gain): ~4 per element,
# where CalFlops' LayerNorm estimate is 5. Written by hand because torch's FlopCounterMode counts
# matmuls only and CalFlops itself is not a dependency (it patches torch functions globally).
_MATMUL = {"mm", "bmm", "addmm", "baddbmm"}
_ACTIVATION = {"gelu", "silu", "sigmoid", "relu", "tanh", "erf", "exp"}
_SOFTMAX = {"_softmax", "_safe_softmax", "softmax", "_log_softmax", "log_softmax"}
_ELEMENTWISE = {
    "add",
    "add_",
    "sub",
    "sub_",
    "mul",
    "mul_",
    "div",
    "div_",
    "neg",
    "pow",
    "rsqrt",
    "sqrt",
    "reciprocal",
    "square",
    "addcmul",
    "addcmul_",
    "clamp",
    "clamp_min",
    "abs",
}
_REDUCTION = {"mean", "sum", "linalg_vector_norm", "norm", "amax", "logsumexp"}


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _matmul_flops(name: str, args) -> int:
    if name == "mm":
        (m, k), (_, n) = args[0].shape, args[1].shape
        return 2 * m * k * n
    if name == "bmm":
        (b, m, k), (_, _, n) = args[0].shape, args[1].shape
        return 2 * b * m * k * n
    if name == "addmm":  # bias + mat1 @ mat2
        (m, k), (_, n) = args[1].shape, args[2].shape
        return 2 * m * k * n + m * n
    (b, m, k), (_, _, n) = args[1].shape, args[2].shape  # baddbmm
    return 2 * b * m * k * n + b * m * n


def calflops_like_counts(model, seq_len: int, batch: int = 1) -> dict[str, float]:
    """Forward FLOPs per token by category (matmul, activation, softmax, elementwise) and total,
    counted CalFlops-style on a meta-device forward of `model` (or a ModelConfig)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    if isinstance(model, ModelConfig):
        from ..models.accounting import build_on_meta

        model = build_on_meta(model)
    counts = {"matmul": 0, "activation": 0, "softmax": 0, "elementwise": 0}

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in _MATMUL:
                counts["matmul"] += _matmul_flops(name, args)
            elif name in _ACTIVATION:
                counts["activation"] += _numel(out.shape)
            elif name in _SOFTMAX:
                counts["softmax"] += _numel(out.shape)
            elif name in _ELEMENTWISE:
                counts["elementwise"] += _numel(out.shape)
            elif name in _REDUCTION:
                counts["elementwise"] += _numel(args[0].shape)
            return out

    device = next(model.parameters()).device
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), Counter():
            model(ids)
    finally:
        model.train(was_training)
    per_token = {k: v / (batch * seq_len) for k, v in counts.items()}
    per_token["total"] = sum(per_token.values())
    return per_token


@register_analysis("flops", "forward/training FLOPs per token by top-level module")
def flops_kind(src, out_dir, args) -> dict:
    from ..models.accounting import build_on_meta

    seq = src.cfg.data.seq_len
    model = build_on_meta(src.cfg.model)
    parts = flops_breakdown(model, seq)
    out = {
        "seq_len": seq,
        "counting": args.counting,
        "forward_flops_per_token": parts["total"],
        "train_flops_per_token": 3 * parts["total"],
        "breakdown": parts,
    }
    if args.counting == "calflops":  # matmuls plus norms, activations, softmax and elementwise ops
        cal = calflops_like_counts(model, seq)
        out.update(
            {
                "forward_flops_per_token": cal["total"],
                "train_flops_per_token": 3 * cal["total"],
                "analytic_forward_flops_per_token": parts["total"],
                "calflops_categories": cal,
            }
        )
    return out


def calflops_without_attention_core(model_or_cfg, seq_len: int) -> float:
    """CalFlops-style forward FLOPs per token without QK^T, the softmax and AV: what CalFlops reports
    when attention runs in a fused kernel its hooks cannot see (the Nexusformer paper's Table 8 was
    measured in the Flame framework; docs/nexusformer.md compares the conventions)."""
    if isinstance(model_or_cfg, ModelConfig):
        from ..models.accounting import build_on_meta

        model_or_cfg = build_on_meta(model_or_cfg)
    cal = calflops_like_counts(model_or_cfg, seq_len)
    core = forward_flops_per_token(model_or_cfg, seq_len) - linear_layer_flops(model_or_cfg, seq_len) + cal["softmax"]
    return cal["total"] - core
