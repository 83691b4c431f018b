"""RecurrentLM: the NEXUS v4.1 depth-recurrent language model (the v4.1 script, spec 004).

    x = embed(tokens); z = 0
    for sup in range(N_sup):                       # deep supervision
        T_inner - 1 times, without gradient:  z = f(z + x)
        once, with gradient:                  z = f(z + x)
        loss += CE(head(norm(z)), labels)
        z = z.detach()                        # one-step gradient: memory independent of T_inner

f is a stack of `n_layers` physical blocks, each
    x = x + CausalConv1d(RMSNorm(x))     depthwise, kernel k, left padding only (no attention)
    x = x + SwiGLU(RMSNorm(x))           BitLinear (ternary) gate/up/down, embeddings full precision

Inference runs the whole recurrence (N_sup * T_inner applications of f); raising T_inner or N_sup at
load or generation time is the v4.1 script's test-time scaling. Cached decoding keeps, for every
(supervision step, iteration, layer) application, the last k-1 conv inputs: the recurrence runs
over depth, so each application is a different causal conv over time with its own history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Protocol, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ConfigError, ModelConfig
from ..kind_options.recurrent import RecurrentOptions
from .base import LanguageModel
from .bitlinear import BitLinear, hold_quantized_weights
from .kinds import ARCHITECTURES, Architecture
from .layers import RMSNorm
from .lm_loss import LMOutput, cross_entropy_mean, lm_loss
from .ternary_swiglu import fused_swiglu


class CausalDepthwiseConv(nn.Module):
    """Depthwise Conv1d over time with left padding only: output t sees inputs t-k+1..t."""

    def __init__(self, d_model: int, kernel: int):
        super().__init__()
        self.kernel_size = (
            kernel  # taps over time ("kernel" alone names a decode kernel elsewhere: PackedTernaryLinear)
        )
        self.conv = nn.Conv1d(d_model, d_model, kernel, groups=d_model, bias=True)

    def forward(
        self, x: torch.Tensor, state: torch.Tensor | ConvHistory | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | ConvHistory]:
        """x (B, T, D); state (B, k-1, D) = the previous k-1 inputs (None = zeros, i.e. sequence start),
        or a ConvHistory (decoding), which is updated in place. Returns (y (B, T, D), new state)."""
        B, T, D = x.shape
        w = self.conv.weight[:, 0, :].to(x.dtype)  # (D, k)
        if isinstance(state, ConvHistory) and T == 1:
            # one decoded token: taps over the ring of past inputs, then overwrite its oldest slot
            y = self.conv.bias.to(x.dtype) + x * w[:, -1]
            for j, past in enumerate(state.ordered_rows()):
                y = y + past * w[:, j]
            state.push(x)
            return y, state
        history = state.ordered() if isinstance(state, ConvHistory) else state
        if history is None:
            history = x.new_zeros(B, self.kernel_size - 1, D)
        full = torch.cat([history.to(x.dtype), x], dim=1)
        # k shifted multiply-adds instead of F.conv1d: the CPU (oneDNN) depthwise-conv path costs ~100 ms
        # per call at these shapes, 100x the arithmetic; the taps are the same sum in a fixed order.
        y = self.conv.bias.to(x.dtype) + full[:, 0:T] * w[:, 0]
        for j in range(1, self.kernel_size):
            y = y + full[:, j : j + T] * w[:, j]
        last = full[:, full.shape[1] - (self.kernel_size - 1) :]
        if isinstance(state, ConvHistory):
            state.reset(last)
            return y, state
        return y, last

    def flops_per_token(self, seq_len: int) -> float:
        d = self.conv.in_channels
        return 2.0 * self.kernel_size * d + d  # multiply-adds of the kernel taps + bias


class ConvHistory:
    """The last k-1 conv inputs of one decoding stream, kept in a ring buffer allocated once: a decoded
    token overwrites the oldest row in place instead of concatenating and slicing a new state."""

    __slots__ = ("buf", "head")

    def __init__(self, last: torch.Tensor):
        self.buf = last.detach().clone()  # (B, k-1, D); row (head + j) % (k-1) is the j-th oldest input
        self.head = 0

    def ordered_rows(self) -> list[torch.Tensor]:
        n = self.buf.shape[1]
        return [self.buf[:, (self.head + j) % n].unsqueeze(1) for j in range(n)]

    def ordered(self) -> torch.Tensor:
        return torch.cat(self.ordered_rows(), dim=1)

    def push(self, x: torch.Tensor) -> None:
        self.buf[:, self.head].copy_(x[:, 0])
        self.head = (self.head + 1) % self.buf.shape[1]

    def reset(self, last: torch.Tensor) -> None:
        self.buf.copy_(last)
        self.head = 0


class RecurrentMLP(nn.Module):
    """SwiGLU with ternary BitLinear projections (plain nn.Linear when ternary is off)."""

    def __init__(self, d_model: int, hidden: int, *, ternary: bool, act_quant: bool, subln: bool, norm_eps: float):
        # no defaults: RecurrentBlock passes every option from the config (a default here could disagree)
        super().__init__()
        d, h = d_model, hidden

        def lin(i, o, subln):
            if ternary:
                return BitLinear(i, o, bias=False, act_quant=act_quant, input_norm=subln, norm_eps=norm_eps)
            return nn.Linear(i, o, bias=False)

        self.gate_proj = lin(d, h, False)
        self.up_proj = lin(d, h, False)
        self.down_proj = lin(h, d, subln=subln)  # SubLN: norm the inner activation before quantizing it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = fused_swiglu(self.gate_proj, self.up_proj, self.down_proj, x)  # a decoded token, packed weights
        if fused is not None:
            return fused
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def flops_per_token(self, seq_len: int) -> float:
        return 4.0 * self.gate_proj.out_features  # silu and the gate product, elementwise


class RecurrentBlock(nn.Module):
    """One physical layer of f: causal-conv token mixing, then SwiGLU channel mixing (pre-norm). The one
    place a layer's ModelConfig is unpacked into its parts."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        rc = cfg.arch
        self.conv_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.conv = CausalDepthwiseConv(cfg.d_model, rc.conv_kernel)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = RecurrentMLP(
            cfg.d_model, cfg.ffn, ternary=rc.ternary, act_quant=rc.act_quant, subln=rc.subln, norm_eps=cfg.norm_eps
        )

    def forward(self, x: torch.Tensor, cache: dict | None = None, key=None) -> torch.Tensor:
        state = cache.get(key) if cache is not None else None
        y, new_state = self.conv(self.conv_norm(x), state)
        if cache is not None and not isinstance(new_state, ConvHistory):
            cache[key] = ConvHistory(new_state)  # first chunk (prefill); later chunks update it in place
        x = x + y
        return x + self.mlp(self.mlp_norm(x))


class _OwnFlops(Protocol):  # the FLOPs protocol of analysis/flops.py
    def flops_per_token(self, seq_len: int) -> float: ...


class RecurrentLM(LanguageModel):
    def __init__(self, cfg: ModelConfig):
        if cfg.arch.kind != "recurrent":
            raise ConfigError(f"model.arch.kind={cfg.arch.kind!r} (valid: recurrent for RecurrentLM)")
        # the embedding stays full precision (BitNet keeps embeddings)
        super().__init__(cfg, nn.ModuleList(RecurrentBlock(cfg) for _ in range(cfg.n_layers)))
        self._depth_override: tuple[int | None, int | None] = (None, None)  # set by generate(n_sup=, t_inner=)
        self.init_weights()

    def width_refusal(self, spec) -> str:
        return (
            "the recurrent model (model.arch.kind='recurrent') has no width-growth rule "
            "(valid: model.arch.kind=transformer)"
        )

    def init_module(self, m: nn.Module) -> None:
        if isinstance(m, nn.Conv1d):
            # a depthwise kernel has only k inputs per output: fan-in scaling, not init_std,
            # so token mixing is not negligible at the start
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.kernel_size[0] * 4))
            nn.init.zeros_(m.bias)
        else:
            super().init_module(m)

    # ------------------------------------------------------------------ depth
    def depth(self, n_sup: int | None = None, t_inner: int | None = None) -> tuple[int, int]:
        """(N_sup, T_inner) for this call: explicit argument > generate() override > config.
        Only None means "not given": 0 is a value, and an invalid one (an `or` chain would run the
        configured depth instead)."""
        rc = self.cfg.arch
        out = []
        for name, arg, override, configured in (
            ("n_sup", n_sup, self._depth_override[0], rc.n_sup),
            ("t_inner", t_inner, self._depth_override[1], rc.t_inner),
        ):
            v = arg if arg is not None else override if override is not None else configured
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(
                    f"{name}={v!r} (valid: an integer >= 1, or None for the configured model.arch.{name}={configured})"
                )
            out.append(v)
        return out[0], out[1]

    def _depth_scaled_gen(self, n_sup: int | None = None, t_inner: int | None = None):
        """Temporarily run a different recurrence depth (test-time scaling) without touching cfg."""
        self.depth(n_sup, t_inner)  # validate before switching
        old = self._depth_override
        # a None keeps the enclosing block's depth (generate() inside `with depth_scaled(n_sup=3)` runs at 3)
        self._depth_override = (n_sup if n_sup is not None else old[0], t_inner if t_inner is not None else old[1])
        try:
            yield self
        finally:
            self._depth_override = old

    # bound, not decorated: mutmut 3.8.1 does not mutate decorated functions
    depth_scaled = contextlib.contextmanager(_depth_scaled_gen)

    # ------------------------------------------------------------------ forward
    def f(self, z: torch.Tensor, cache, sup: int, it: int) -> torch.Tensor:
        """One application of the physical stack."""
        for i, layer in enumerate(self.layers):
            z = layer(z, cache.layer(i) if cache is not None else None, (sup, it))
        return z

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        cache=None,
        return_hidden: bool = False,
        n_sup: int | None = None,
        t_inner: int | None = None,
    ) -> LMOutput:
        """labels[t] is the target of position t (already shifted). In training mode with labels, `loss`
        is the deep-supervision loss (CE summed, or averaged, over supervision steps) and `ce_loss` the
        CE of the final step; otherwise both are the final CE (what validation reports)."""
        with hold_quantized_weights(self):
            return self._forward(input_ids, labels, cache, return_hidden, *self.depth(n_sup, t_inner))

    def _forward(self, input_ids, labels, cache, return_hidden, N: int, T: int) -> LMOutput:
        rc = self.cfg.arch
        deep = self.training and labels is not None
        grad_on = torch.is_grad_enabled()
        x = self.embed(input_ids)
        z = torch.zeros_like(x)
        states = [x] if return_hidden else None
        sup_losses = []
        for s in range(N):
            for t in range(T):
                # one-step gradient: only the last iteration of each supervision step records a graph
                keep_graph = grad_on and (not deep or rc.full_backprop or t == T - 1)
                with torch.set_grad_enabled(keep_graph):
                    z = self.f(z + x, cache, s, t)
            if deep:
                sup_losses.append(cross_entropy_mean(self.head(self.norm(z)), labels))
                if s < N - 1:
                    z = z.detach() if not rc.full_backprop else z
            if return_hidden:
                states.append(z)
        if cache is not None:
            cache.pos += input_ids.shape[1]
        out = LMOutput(logits=self.head(self.norm(z)), aux_losses={}, hidden_states=states)
        if labels is None:
            return out
        deep_loss = None
        if deep:
            deep_loss = torch.stack(sup_losses).sum()
            if rc.sup_loss == "mean":
                deep_loss = deep_loss / N
        return lm_loss(out, labels, self.cfg.z_loss, main=deep_loss)

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        input_ids,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        eos_id: int | None = None,
        generator: torch.Generator | None = None,
        n_sup: int | None = None,
        t_inner: int | None = None,
    ):
        """Sample with cached conv states; n_sup / t_inner raise the recurrence depth for this call."""
        # a with block, not @torch.no_grad(): mutmut 3.8.1 does not mutate decorated functions
        with torch.no_grad(), self.depth_scaled(n_sup, t_inner):
            return super().generate(input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, generator)

    # ------------------------------------------------------------------ accounting
    def effective_depth(self) -> int:
        """Layer applications per forward: physical layers x T_inner x N_sup (the v4.1 script's table)."""
        n, t = self.depth()
        return len(self.layers) * n * t

    def flops_per_token(self, seq_len: int) -> float:
        """The FLOPs walker counts every child once; f runs N_sup*T_inner times, so this module reports
        the (N_sup*T_inner - 1) extra applications of its blocks (their Linear and own work), plus the
        tied LM head's matmul (an Embedding counts 0 in the walker)."""
        n, t = self.depth()
        per_application = 0.0
        for layer in self.layers:
            for m in layer.modules():
                if isinstance(m, nn.Linear):
                    per_application += 2.0 * m.in_features * m.out_features
                if hasattr(m, "flops_per_token"):
                    # the cast is the hasattr: mypy cannot narrow a Module by it (__getattr__: Tensor | Module)
                    per_application += cast(_OwnFlops, m).flops_per_token(seq_len)
        return (n * t - 1) * per_application + self.tied_head_flops()


# its options and parameter count: kind_options/recurrent.py
ARCHITECTURES.register("recurrent")(Architecture(RecurrentLM))


# ----------------------------------------------------------------------------- v4.1-style Python API
@dataclasses.dataclass
class NexusConfig:
    """The v4.1 script's `NexusConfig` (nexus_model.py): flat fields, `from_dict`, `T_inner` spelled as there."""

    vocab_size: int = 259  # tokenizer size (byte tokenizer by default)
    d_model: int = 512  # residual width
    n_layers: int = 2  # physical layers in f
    ffn_hidden: int = 0  # SwiGLU inner size (0 -> 8/3 d_model)
    n_sup: int = 4  # deep-supervision steps
    T_inner: int = 6  # iterations of f per supervision step
    conv_kernel: int = 4  # causal conv kernel
    max_seq_len: int = 1024  # generation limit
    ternary: bool = True  # BitNet b1.58 weights
    act_quant: bool = False  # 8-bit activations
    tie_embeddings: bool = True  # head shares the embedding
    norm_eps: float = 1e-5  # RMSNorm epsilon
    init_std: float = 0.02  # init std

    @classmethod
    def from_dict(cls, d: dict) -> NexusConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        aliases = {"t_inner": "T_inner", "dim": "d_model", "hidden_dim": "ffn_hidden"}
        kwargs = {}
        for k, v in d.items():
            k = aliases.get(k, k)
            if k not in names:
                raise ConfigError(f"NexusConfig field {k!r} is unknown (valid: {', '.join(sorted(names))})")
            kwargs[k] = v
        return cls(**kwargs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_model_config(self) -> ModelConfig:
        mc = ModelConfig(
            arch=RecurrentOptions(
                n_sup=self.n_sup,
                t_inner=self.T_inner,
                conv_kernel=self.conv_kernel,
                ternary=self.ternary,
                act_quant=self.act_quant,
            ),
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=1,
            ffn_hidden=self.ffn_hidden,
            max_seq_len=self.max_seq_len,
            tie_embeddings=self.tie_embeddings,
            norm_eps=self.norm_eps,
            init_std=self.init_std,
        )
        errors: list[str] = []
        mc.validate(errors)
        if errors:
            raise ConfigError("invalid NexusConfig: " + "; ".join(errors))
        return mc


class NexusModel(RecurrentLM):
    """`NexusModel(NexusConfig)` as in the v4.1 script; also accepts a nexus ModelConfig. Same weights/keys as
    RecurrentLM, so a nexus checkpoint's model.safetensors loads into it."""

    def __init__(self, cfg: NexusConfig | ModelConfig):
        super().__init__(cfg.to_model_config() if isinstance(cfg, NexusConfig) else cfg)
