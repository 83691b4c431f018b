"""The recurrent architecture's options and parameter count (the model: models/recurrent.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import ArchitectureOptions, ModelConfig, option


@dataclass
class RecurrentOptions(ArchitectureOptions, kind="recurrent"):
    """NEXUS v4.1 depth recurrence: `model.arch: {kind: recurrent, **these}`."""

    n_sup: int = option(4, "deep-supervision steps, each adds a loss term and detaches the state")
    t_inner: int = option(6, "iterations of f per supervision step; only the last carries gradient")
    conv_kernel: int = option(4, "depthwise causal conv kernel size (left padding only)")
    ternary: bool = option(True, "BitNet b1.58 absmean ternary weights in every block linear")
    act_quant: bool = option(False, "8-bit per-token absmax activation quantization in BitLinear")
    subln: bool = option(
        True, "parameter-free RMSNorm before the ternary down projection (BitNet SubLN: norm before quantization)"
    )
    sup_loss: Literal["sum", "mean"] = option(
        "sum", "sum (the v4.1 script: loss += CE per supervision step) | mean (divide by n_sup)"
    )
    full_backprop: bool = option(
        False, "ablation/control: backprop through every iteration (memory grows with t_inner)"
    )

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        for name in ("n_sup", "t_inner", "conv_kernel"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                errors.append(f"{p}.{name}={v!r} (valid: an integer >= 1)")
        baseline = ModelConfig()
        non_default = [n for n in model.mechanism_sections() if getattr(model, n) != getattr(baseline, n)]
        if non_default:
            errors.append(
                f"{p}.kind={self.kind!r} (valid: transformer when {', '.join(non_default)} options are set "
                "(the recurrent model has no attention))"
            )

    def params(self, cfg: ModelConfig) -> dict:
        """Parameter counts by arithmetic: per layer two norm gains, the depthwise conv (+ bias) and the SwiGLU
        (its three matrices BitLinear, i.e. ternary, when arch.ternary); the embedding (and untied head) and the
        final norm gain outside."""
        d = cfg.d_model
        mlp = 3 * d * cfg.ffn
        body = cfg.n_layers * (2 * d + d * self.conv_kernel + d + mlp)
        emb = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
        total = emb + body + d
        return {
            "total": total,
            "embedding": emb,
            "non_embedding": total - emb,
            "ternary": cfg.n_layers * mlp if self.ternary else 0,
        }
