"""Small building blocks shared by every architecture: RMSNorm, RoPE, SwiGLU, hook points."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    """Statistics of half-precision tensors are taken in fp32; fp32 and fp64 keep their own precision."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class RMSNorm(nn.Module):
    """RMSNorm with a learnable gain. Half-precision inputs are normalized in fp32 (bf16 runs keep the
    same statistics); fp32 and fp64 inputs in their own precision."""

    def __init__(self, dim: int, eps: float = 1e-5, gain: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if gain else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's rms_norm, not x * rsqrt(x.pow(2).mean()): on CPU its backward is about 3x faster
        # (the hand-written form's pow backward alone cost a third of the norm), and every layer has four.
        dtype = at_least_fp32(x.dtype)
        weight = self.weight
        if dtype == x.dtype and (weight is None or weight.dtype == dtype):
            # the common fp32 case without the no-op casts: one-token decoding is bound by per-op overhead
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        weight = None if weight is None else weight.to(dtype)
        return F.rms_norm(x.to(dtype), (x.shape[-1],), weight, self.eps).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE tables (rotate-half convention, as in Llama/Qwen, so HF weights import unchanged)."""

    inv_freq: torch.Tensor  # buffers (register_buffer)
    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_seq_len: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self._build(max_seq_len)

    def _build(self, n: int) -> None:
        t = torch.arange(n, dtype=torch.float32, device=self.inv_freq.device)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def tables(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        if start + length > self.cos.shape[0]:
            self._build(max(start + length, 2 * self.cos.shape[0]))
        return self.cos[start : start + length], self.sin[start : start + length]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, hd); cos/sin: (T, hd)."""
    if cos.dtype != x.dtype:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return (x * cos) + (rotate_half(x) * sin)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): the Llama MLP."""

    def __init__(self, d_model: int, hidden: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, hidden, bias=bias)
        self.up_proj = nn.Linear(d_model, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, d_model, bias=bias)
        self.down_proj._nexus_out_proj = True  # zero_init_out targets this matrix

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def width_roles(self, inner: str = "ffn") -> dict:
        """Width growth: the inner axis (`inner`: ffn, or expert_inner for an MoE expert) is written by
        gate/up and read by down; the hidden axis the other way round."""
        roles = {
            "gate_proj.weight": {0: (inner, "gate"), 1: ("hidden", "in")},
            "up_proj.weight": {0: (inner, "out"), 1: ("hidden", "in")},
            "down_proj.weight": {0: ("hidden", "out"), 1: (inner, "in")},
        }
        if self.down_proj.bias is not None:
            roles.update(
                {
                    "gate_proj.bias": {0: (inner, "gate")},
                    "up_proj.bias": {0: (inner, "out")},
                    "down_proj.bias": {0: ("hidden", "out")},
                }
            )
        return roles


class HookPoint(nn.Module):
    """Identity on its inputs, placed where an analysis wants to read intermediate tensors. Analyses
    (nexus.analysis.hooks) attach forward hooks here, so the model carries no recording flags or
    side channels; without a hook it costs one module call."""

    def forward(self, *tensors):
        return tensors[0] if len(tensors) == 1 else tensors
