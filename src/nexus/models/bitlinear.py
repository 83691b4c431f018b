"""BitLinear: BitNet b1.58 ternary linear layer with straight-through gradients.

Forward uses W_q = clamp(round(W / gamma), -1, 1) * gamma with gamma = mean|W| (one scale per
tensor), so every weight that touches an activation is in {-gamma, 0, +gamma}. Backward treats the
quantizer as the identity (straight-through estimator), so the fp32 latent W receives the gradient
of W_q. Optionally activations are quantized to 8 bits per token with an absmax scale (also STE).

The quantizers are custom autograd Functions rather than the `w + (q - w).detach()` idiom because
that idiom's forward value is `w + (q - w)`, which in floating point is not always exactly `q`:
the "every weight is ternary" and "packed export gives identical logits" guarantees need exact q.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

QUANT_EPS = 1e-8  # floor on the absmean / absmax scales so an all-zero tensor does not divide by 0


def ternary_scale(w: torch.Tensor) -> torch.Tensor:
    """gamma = mean|W| (absmean), computed in fp32 and floored at QUANT_EPS."""
    return w.detach().float().abs().mean().clamp_min(QUANT_EPS)


def ternary_codes(w: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """Integer codes in {-1, 0, 1} (as int8) of W for the scale gamma: clamp(round(W / gamma), -1, 1).

    Computed as sign(v) * (|v| > 0.5) with v = W / gamma, which is the same function (round half to
    even sends exactly 0.5 to 0; anything above rounds to >= 1 and is clamped) in fewer passes.
    """
    v = w.detach().float() / gamma
    return (torch.sign(v) * (v.abs() > 0.5)).to(torch.int8)


def dequantize_ternary(codes: torch.Tensor, gamma: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """codes * gamma: the exact weight the BitLinear forward uses (shared by packed inference)."""
    return (codes.to(torch.float32) * gamma.to(torch.float32)).to(dtype)


class _TernarySTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w: torch.Tensor) -> torch.Tensor:
        gamma = ternary_scale(w)
        return dequantize_ternary(ternary_codes(w, gamma), gamma, w.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad  # straight-through: d W_q / d W treated as identity


def act_quant_8bit(x: torch.Tensor) -> torch.Tensor:
    """Per-token absmax quantization to the 8-bit grid {-128..127} * max|x| / 127 (forward value)."""
    scale = 127.0 / x.detach().float().abs().amax(dim=-1, keepdim=True).clamp_min(QUANT_EPS)
    return (torch.clamp(torch.round(x.float() * scale), -128, 127) / scale).to(x.dtype)


class _ActQuantSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return act_quant_8bit(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def ternarize_ste(w: torch.Tensor) -> torch.Tensor:
    return _TernarySTE.apply(w)


def quantize_activations_ste(x: torch.Tensor) -> torch.Tensor:
    return _ActQuantSTE.apply(x)


def _rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Parameter-free RMSNorm (BitNet SubLN): keeps the quantizer's input at unit scale."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class _InputQuant(Protocol):  # what BitLinear.prepare_input reads: PackedTernaryLinear shares the method
    act_quant: bool
    input_norm: bool
    norm_eps: float


class BitLinear(nn.Linear):
    """nn.Linear whose forward uses absmean-ternary weights (and optionally 8-bit activations).

    Subclassing nn.Linear keeps the FLOPs walker, the optimizer grouping and the init code working
    unchanged: the latent parameter is still `.weight` of shape (out, in).
    """

    is_ternary = True  # read by models/accounting.py to report ternary model sizes

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        act_quant: bool = False,
        input_norm: bool = False,
        norm_eps: float = 1e-5,
        device=None,
        dtype=None,
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.act_quant = act_quant  # 8-bit per-token absmax activation quantization
        self.input_norm = input_norm  # parameter-free RMSNorm before quantization (SubLN)
        self.norm_eps = norm_eps

    def prepare_input(self: _InputQuant, x: torch.Tensor) -> torch.Tensor:
        if self.input_norm:
            x = _rms_normalize(x, self.norm_eps)
        if self.act_quant:
            x = quantize_activations_ste(x)
        return x

    def quantized_weight(self) -> torch.Tensor:
        """The weight the forward pass multiplies with (values in {-gamma, 0, +gamma}).

        Always computed from the current latent weight. Reuse across calls is scoped, never keyed on
        the tensor's address or version counter: fused AdamW and `.data` writes change the values
        without bumping that counter, so such a cache served stale weights. Callers that know the
        weights are fixed for a while (one recurrent forward, one generate() call) hold the
        quantization with `hold_quantized_weights`.
        """
        if torch.is_grad_enabled() and self.weight.requires_grad:
            return ternarize_ste(self.weight)
        return ternarize_ste(self.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self._held_weight if self._held_weight is not None else self.quantized_weight()
        return F.linear(self.prepare_input(x), w, self.bias)

    _held_weight: torch.Tensor | None = None  # set by hold_quantized_weights()

    def extra_repr(self) -> str:
        return super().extra_repr() + f", ternary=True, act_quant={self.act_quant}, input_norm={self.input_norm}"


def _hold_quantized_weights_gen(module: nn.Module):
    """Quantize every BitLinear's weights once for the duration of the block.

    A depth-recurrent model applies the same layers N_sup*T_inner times per forward; re-quantizing the
    latent weights at every application would repeat identical work. The held tensor is the STE output,
    so gradients from all applications still flow to the latent weights.

    Holds nest: an inner hold (the model's own forward inside generate()'s hold) keeps the outer
    quantization and leaves it in place; only the hold that set a layer's weight releases it.
    """
    layers = [m for m in module.modules() if isinstance(m, BitLinear) and m._held_weight is None]
    for m in layers:
        m._held_weight = m.quantized_weight()
    try:
        yield
    finally:
        for m in layers:
            m._held_weight = None


# bound, not decorated: mutmut 3.8.1 does not mutate decorated functions
hold_quantized_weights = contextlib.contextmanager(_hold_quantized_weights_gen)


# decode kernels of PackedTernaryLinear (see its docstring); "auto" measures them (ternary_kernel_choice.py)
PACKED_KERNELS = ("auto", "fp32-2bit", "fp32-int8", "int4", "int8", "dense")
NUMBA_KERNELS = ("fp32-2bit", "fp32-int8")  # models/ternary_kernels.py: need numba, CPU only
TORCH_LOW_BIT_KERNELS = ("int4", "int8")  # torch's weight-only CPU matmuls, bf16 activations
INT4_GROUP_SIZES = (256, 128, 64, 32)  # group sizes the CPU int4 kernel takes (one scale per group)


def int4_supported(out_features: int, in_features: int) -> bool:
    """torch's CPU int4 kernel packs N % 16 == 0 outputs and needs K divisible by a group size."""
    return (
        hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
        and out_features % 16 == 0
        and in_features % INT4_GROUP_SIZES[-1] == 0
    )


def int8_supported(in_features: int) -> bool:
    """torch 2.13's vectorized CPU int8 kernel reads past the end of a row whose length K is not a
    multiple of 16: at K = 8, 24, 37, 40 it returned NaN or 1e38 or crashed the process (AVX-512 and
    AVX2 dispatch alike; issue 41). Every multiple of 16 tried (16 to 4096) was correct on both."""
    return hasattr(torch.ops.aten, "_weight_int8pack_mm") and in_features % 16 == 0


def int8_weight_matmul(x: torch.Tensor, codes: torch.Tensor, ones: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x @ (codes * scale)^T with torch's weight-only int8 CPU kernel (`aten._weight_int8pack_mm`).

    The kernel reads int8 weights (4x fewer bytes than fp32; decoding one token is bound by reading
    weights) but is only vectorized for bf16 activations, so x is rounded to bf16 and the product
    comes back in bf16 (accumulated in fp32 inside the kernel). The fp32 scale is applied afterwards
    so gamma itself is not rounded. Codes in {-1, 0, 1} are exact in int8.
    """
    lead = x.shape[:-1]
    y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), codes, ones)
    return (y.to(x.dtype) * scale).reshape(*lead, codes.shape[0])


def pack_int4(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Codes (N, K) in {-1, 0, 1} -> (packed uint8 (N, K/2), scales-and-zeros, group size) for
    `int4_weight_matmul`. The kernel dequantizes q (0..15) as (q - 8) * scale + zero per group, so
    q = code + 8 with scale 1 and zero 0 gives the codes exactly; gamma is applied after the matmul."""
    n, k = codes.shape
    group = next(g for g in INT4_GROUP_SIZES if k % g == 0)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32) + 8, 1)
    scales_zeros = torch.zeros(k // group, n, 2, dtype=torch.bfloat16)
    scales_zeros[..., 0] = 1.0
    return packed, scales_zeros, group


def int4_weight_matmul(
    x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor, group: int, scale: torch.Tensor
) -> torch.Tensor:
    """x @ (codes * scale)^T with torch's weight-only int4 CPU kernel (`aten._weight_int4pack_mm_for_cpu`).

    Half the bytes of int8: a recurrent model re-reads the same few matrices dozens of times per token,
    and at int4 nexus-small's 37.75M ternary weights (18.9 MB) stay in a 32 MB L3 where int8's 37.75 MB
    do not. Like the int8 kernel it is vectorized for bf16 activations only (fp32 activations take a
    scalar path ~100x slower), so x and the product are rounded to bf16, accumulated in fp32 inside.
    """
    lead = x.shape[:-1]
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(
        x.reshape(-1, x.shape[-1]).to(torch.bfloat16), packed, group, scales_zeros
    )
    return (y.to(x.dtype) * scale).reshape(*lead, scales_zeros.shape[1])


class PackedTernaryLinear(nn.Module):
    """Inference-only twin of BitLinear built from exported codes and scale (see nexus.export.ternary).

    kernel "auto" (default): measured on this CPU among the kernels below, dense included, for this
    layer alone (ternary_kernel_choice.choose_kernel; load_ternary measures all the model's layers
    together instead, as decoding cycles through them). `.kernel_choice` keeps what was measured.
    kernel "fp32-2bit": 2-bit codes read by a numba loop that accumulates in fp32
    (models/ternary_kernels.py); outputs match the dense path to fp32 rounding.
    kernel "fp32-int8": the same with one int8 code per weight (more bytes, less decoding).
    kernel "int4": codes packed two per byte for torch's weight-only int4 matmul (`int4_weight_matmul`);
    a layer whose shape the kernel does not take (out_features not a multiple of 16, in_features not
    of 32) uses "int8" and says so in `.kernel`.
    kernel "int8": the codes stay int8 and each call runs torch's weight-only int8 matmul
    (`int8_weight_matmul`); where in_features is not a multiple of 16, which that kernel gets wrong
    (`int8_supported`), the layer uses "fp32-int8" (dense without numba) and says so in `.kernel`.
    Both torch low-bit kernels round activations and products to bf16, so logits match the unpacked
    model to bf16 precision (tests hold them to the reference BitLinear with a bf16 tolerance).
    kernel "dense": the dequantized weight codes*gamma is materialized in fp32 once at load; that is
    bitwise the tensor a BitLinear forward computes, so logits equal the unpacked model's exactly.
    Every kernel but dense runs on CPU only and without autograd.
    """

    is_ternary = True
    kernel_choice = None  # the measurement behind kernel="auto" (KernelChoice), else None
    # buffers (register_buffer), each kernel's own subset
    planes: torch.Tensor
    packed: torch.Tensor
    scales_zeros: torch.Tensor
    codes: torch.Tensor
    ones: torch.Tensor
    weight: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(
        self,
        codes: torch.Tensor,
        gamma: torch.Tensor,
        bias: torch.Tensor | None,
        act_quant: bool,
        input_norm: bool,
        norm_eps: float,
        kernel: str = "auto",
    ):
        super().__init__()
        if kernel not in PACKED_KERNELS:
            raise ValueError(f"kernel={kernel!r} (valid: {'|'.join(PACKED_KERNELS)})")
        self.out_features, self.in_features = codes.shape
        self.act_quant, self.input_norm, self.norm_eps = act_quant, input_norm, norm_eps
        if kernel == "auto":
            from .ternary_kernel_choice import choose_kernel

            self.kernel_choice = choose_kernel([(codes, gamma)], PackedTernaryLinear)
            kernel = self.kernel_choice.kernel
        if kernel in NUMBA_KERNELS:
            from . import ternary_kernels

            if not ternary_kernels.available():
                raise ValueError(
                    f"kernel={kernel!r} needs numba, which is not installed (valid without it: "
                    f"auto|{'|'.join(TORCH_LOW_BIT_KERNELS)}|dense)"
                )
        if kernel == "int4" and not int4_supported(self.out_features, self.in_features):
            kernel = "int8"
        if kernel == "int8" and not int8_supported(self.in_features):
            from . import ternary_kernels

            kernel = "fp32-int8" if ternary_kernels.available() else "dense"
        self.kernel = kernel
        if kernel == "fp32-2bit":
            from .ternary_kernels import pack_planes2

            self.register_buffer("planes", torch.from_numpy(pack_planes2(codes)), persistent=False)
        elif kernel == "int4":
            packed, scales_zeros, self.group = pack_int4(codes)
            self.register_buffer("packed", packed, persistent=False)
            self.register_buffer("scales_zeros", scales_zeros, persistent=False)
        elif kernel in ("int8", "fp32-int8"):
            self.register_buffer("codes", codes.to(torch.int8).contiguous(), persistent=False)
            if kernel == "int8":
                self.register_buffer("ones", torch.ones(self.out_features, dtype=torch.bfloat16), persistent=False)
        else:
            self.register_buffer("weight", dequantize_ternary(codes, gamma), persistent=False)
        if kernel != "dense":
            self.register_buffer("scale", gamma.to(torch.float32).reshape(()), persistent=False)
            self._gamma = float(self.scale)  # the numba kernels take it as a float32 scalar
        self.register_buffer("bias", bias, persistent=False)

    prepare_input = BitLinear.prepare_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.prepare_input(x)
        if self.kernel == "dense":
            return F.linear(x, self.weight, self.bias)
        if x.device.type != "cpu":  # moved off the CPU after loading: the low-bit kernels are CPU-only
            raise RuntimeError(
                f"PackedTernaryLinear kernel={self.kernel!r} runs on CPU only; load the file with "
                f"load_ternary(path, device={str(x.device)!r}) for the dense kernel there"
            )
        if self.kernel in NUMBA_KERNELS:
            if torch.is_grad_enabled() and x.requires_grad:
                raise RuntimeError(
                    f"PackedTernaryLinear kernel={self.kernel!r} is inference-only (no autograd); "
                    "load the file with kernel='dense' to differentiate through it"
                )
            from . import ternary_kernels

            if self.kernel == "fp32-2bit":
                y = ternary_kernels.planes2_matmul(x, self.planes.numpy(), self.out_features, self._gamma)
            else:
                y = ternary_kernels.int8_matmul(x, self.codes.numpy(), self._gamma)
            y = y.to(x.dtype)
        elif self.kernel == "int4":
            y = int4_weight_matmul(x, self.packed, self.scales_zeros, self.group, self.scale)
        else:
            y = int8_weight_matmul(x, self.codes, self.ones, self.scale)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kernel={self.kernel}"
