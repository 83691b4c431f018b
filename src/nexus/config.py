"""Typed configuration for nexus runs: model, data, training.

Every field carries a one-line reason. Sub-configs own their own validation so that a
feature (anchor mixing, Nexus-Rank, MoE, ...) can be added without touching the others.
`validate()` collects *all* problems and raises one ConfigError listing them.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """Bad user input in a config, a preset name or an override. CLI maps it to exit code 2."""


def _check(errors: list[str], ok: bool, path: str, value: Any, valid: str) -> None:
    if not ok:
        errors.append(f"{path}={value!r} (valid: {valid})")


def _positive(errors, path, value):
    _check(errors, isinstance(value, (int, float)) and math.isfinite(value) and value > 0, path, value,
           "a finite number > 0")


# ----------------------------------------------------------------------------- model parts
@dataclass
class ProjectionConfig:
    """Which module computes Q/K/V(/O/FFN): plain Linear, Nexus-Rank (Nexusformer) or Pattention."""

    kind: str = "linear"  # linear | nexus_rank | pattention: the projection family
    targets: list[str] = field(default_factory=lambda: ["q", "k", "v"])  # which projections use `kind` (q,k,v,o,ffn)
    rank_m: int = 0  # Nexus-Rank first hidden width M (0 -> 2*d_model)
    rank_a: int = 0  # Nexus-Rank second hidden width A (0 -> 4*d_model)
    form: str = "paper"  # paper: sigma(sigma(XW_M)W_A)W_D ; l2norm: public code's per-stage h/(||h||+1e-5)*sqrt(D_out) ; l2norm_width: its earlier h/||h||*sqrt(width)
    relax_order: bool = False  # allow M, A orders other than D < M < A (Table 9 ablation)
    param_tokens: int = 0  # Pattention parameter tokens per projection (0 -> d_model)
    pattention_act: str = "gelu_l2"  # gelu_l2: GELU(L2norm(scores)*sqrt(n)) ; softmax: the softmax variant
    freeze_scale: bool = True  # freeze Pattention's sqrt(n) at its pre-growth value so growth is exact
    ffn_param_tokens: int = 0  # Pattention parameter tokens of the FFN (0 -> model.ffn); TokenFormer sizes it apart from q/k/v/o

    KINDS = ("linear", "nexus_rank", "pattention")
    TARGETS = ("q", "k", "v", "o", "ffn")

    def validate(self, errors: list[str], p: str, d_model: int) -> None:
        _check(errors, self.kind in self.KINDS, f"{p}.kind", self.kind, "|".join(self.KINDS))
        bad = [t for t in self.targets if t not in self.TARGETS]
        _check(errors, not bad, f"{p}.targets", self.targets, f"subset of {list(self.TARGETS)}")
        _check(errors, self.form in ("paper", "l2norm", "l2norm_width"), f"{p}.form", self.form, "paper|l2norm|l2norm_width")
        _check(errors, self.pattention_act in ("gelu_l2", "softmax"), f"{p}.pattention_act", self.pattention_act, "gelu_l2|softmax")
        for name in ("rank_m", "rank_a", "param_tokens", "ffn_param_tokens"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{name}", v, "an integer >= 0 (0 = default)")
        if self.kind == "nexus_rank" and not self.relax_order:
            m, a = self.resolved_m(d_model), self.resolved_a(d_model)
            _check(errors, d_model < m < a, f"{p}.rank_m/rank_a", (m, a),
                   f"d_model ({d_model}) < rank_m < rank_a, or set {p}.relax_order=true")

    def resolved_m(self, d_model: int) -> int:
        return self.rank_m or 2 * d_model

    def resolved_a(self, d_model: int) -> int:
        return self.rank_a or 4 * d_model

    def uses(self, target: str) -> bool:
        return self.kind != "linear" and target in self.targets


@dataclass
class AttentionConfig:
    """Attention options beyond the baseline: output gate and higher-order (Nexus) refinement."""

    gate: str = "none"  # none | elementwise | headwise: gated attention, o * sigmoid(g) before W_o
    order: int = 1  # higher-order attention order m (1 = standard attention)
    ho_targets: str = "qk"  # q | qk | qkv: which of Q/K/V the inner attention refines
    ho_form: str = "projected"  # projected: eq.12 inner attention with the layer's W_q/W_k/W_v ; self: eq.7-8 softmax(QQ^T)Q
    ho_shared: bool = True  # share inner weights with the outer projections (parameters do not grow)
    ho_gate: bool = False  # zero-initialized gate on the refinement: lossless retrofit

    def validate(self, errors: list[str], p: str) -> None:
        _check(errors, self.gate in ("none", "elementwise", "headwise"), f"{p}.gate", self.gate, "none|elementwise|headwise")
        _check(errors, isinstance(self.order, int) and self.order >= 1, f"{p}.order", self.order, "an integer >= 1")
        _check(errors, self.ho_targets in ("q", "qk", "qkv"), f"{p}.ho_targets", self.ho_targets, "q|qk|qkv")
        _check(errors, self.ho_form in ("projected", "self"), f"{p}.ho_form", self.ho_form, "projected|self")
        _check(errors, self.ho_shared or self.ho_form != "self", f"{p}.ho_shared", self.ho_shared,
               "true when ho_form=self (eq. 7-8 has no inner weights to keep separate)")


@dataclass
class MixingConfig:
    """Anchor mixing across layers (ResFormer value residual, NuResFormer, ExoFormer)."""

    anchor: str = "none"  # none | value_residual | nures | exo: where the anchor projections come from
    components: list[str] = field(default_factory=lambda: ["q", "k", "v", "g"])  # which of Q/K/V/G are mixed
    granularity: str = "elementwise"  # elementwise (H, d_head) | headwise (H) | scalar: shape of lambda
    norm: str = "all"  # all: RMSNorm every anchor | qk: only Q/K anchors | none: no anchor norm (ablations)
    dynamic: bool = False  # per-token sigmoid factors gamma from a small MLP multiply the lambdas
    learnable: bool = True  # learnable lambdas (value residual with fixed 0.5/0.5 when false)
    dynamic_hidden: int = 16  # hidden width of the dynamic-mixing MLP (paper: 16)

    COMPONENTS = ("q", "k", "v", "g")

    def validate(self, errors: list[str], p: str) -> None:
        _check(errors, self.anchor in ("none", "value_residual", "nures", "exo"), f"{p}.anchor", self.anchor,
               "none|value_residual|nures|exo")
        bad = [c for c in self.components if c not in self.COMPONENTS]
        _check(errors, not bad, f"{p}.components", self.components, f"subset of {list(self.COMPONENTS)}")
        _check(errors, self.granularity in ("elementwise", "headwise", "scalar"), f"{p}.granularity",
               self.granularity, "elementwise|headwise|scalar")
        _check(errors, self.norm in ("all", "qk", "none"), f"{p}.norm", self.norm, "all|qk|none")
        _check(errors, not (self.dynamic and self.anchor == "none"), f"{p}.dynamic", self.dynamic,
               "false unless mixing.anchor is set (dynamic mixing needs an anchor)")
        _check(errors, isinstance(self.dynamic_hidden, int) and self.dynamic_hidden > 0, f"{p}.dynamic_hidden",
               self.dynamic_hidden, "an integer > 0")
        if self.anchor == "none":
            return
        _check(errors, isinstance(self.components, list) and len(self.components) > 0, f"{p}.components",
               self.components, f"a non-empty subset of {list(self.COMPONENTS)} when mixing.anchor is set")
        if self.anchor == "value_residual":
            _check(errors, list(self.components) == ["v"], f"{p}.components", self.components,
                   "['v'] with anchor=value_residual (ResFormer mixes values only; use anchor=nures for q/k/g)")
            _check(errors, self.norm == "none", f"{p}.norm", self.norm,
                   "none with anchor=value_residual (ResFormer reuses the raw v_1; use anchor=nures for normed anchors)")
        if self.dynamic:
            _check(errors, self.learnable, f"{p}.learnable", self.learnable, "true when mixing.dynamic is on")

    def validate_with_model(self, errors: list[str], p: str, model: "ModelConfig") -> None:
        """Checks that need the rest of the model: gate logits must exist to be mixed."""
        if self.anchor != "none" and "g" in self.components and model.attention.gate == "none":
            errors.append(f"{p}.components={self.components!r} (valid: drop 'g', or set "
                          f"{p.rsplit('.', 1)[0]}.attention.gate=elementwise|headwise: mixing g needs gate logits)")


@dataclass
class MoEConfig:
    """OLMoE-style token-choice mixture of experts in place of the dense MLP."""

    n_experts: int = 0  # number of experts (0 = dense SwiGLU MLP)
    top_k: int = 2  # experts per token
    expert_hidden: int = 0  # inner size of each SwiGLU expert (0 -> ffn_hidden // top_k)
    lb_loss_coef: float = 0.01  # load-balancing loss weight (Switch/OLMoE form)
    router_z_coef: float = 0.001  # router z-loss weight

    def validate(self, errors: list[str], p: str) -> None:
        _check(errors, isinstance(self.n_experts, int) and self.n_experts >= 0, f"{p}.n_experts", self.n_experts, "an integer >= 0")
        if self.n_experts:
            _check(errors, isinstance(self.top_k, int) and 1 <= self.top_k <= self.n_experts, f"{p}.top_k", self.top_k,
                   f"1..n_experts ({self.n_experts})")
        _check(errors, isinstance(self.expert_hidden, int) and self.expert_hidden >= 0, f"{p}.expert_hidden", self.expert_hidden,
               "an integer >= 0 (0 = default)")


@dataclass
class RecurrentConfig:
    """NEXUS v4.1 depth recurrence (used when model.arch == 'recurrent')."""

    n_sup: int = 4  # deep-supervision steps, each adds a loss term and detaches the state
    t_inner: int = 6  # iterations of f per supervision step; only the last carries gradient
    conv_kernel: int = 4  # depthwise causal conv kernel size (left padding only)
    ternary: bool = True  # BitNet b1.58 absmean ternary weights in every block linear
    act_quant: bool = False  # 8-bit per-token absmax activation quantization in BitLinear
    subln: bool = True  # parameter-free RMSNorm before the ternary down projection (BitNet SubLN: norm before quantization)
    sup_loss: str = "sum"  # sum (the seed: loss += CE per supervision step) | mean (divide by n_sup)
    full_backprop: bool = False  # ablation/control: backprop through every iteration (memory grows with t_inner)

    def validate(self, errors: list[str], p: str) -> None:
        for name in ("n_sup", "t_inner", "conv_kernel"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 1, f"{p}.{name}", v, "an integer >= 1")
        _check(errors, self.sup_loss in ("sum", "mean"), f"{p}.sup_loss", self.sup_loss, "sum|mean")


@dataclass
class GrowthState:
    """Scales a growth pinned so the grown model computes what the model before it did. Only growth sets
    them (never a user): `nexus config` does not list them and an override is refused. Configs written
    before this section carry them as model.projection.frozen_*; loading moves them here."""

    frozen_n: int = 0  # Pattention tau = sqrt(frozen_n) on q/k/v/o (0 -> current param_tokens); TokenFormer growth pins it with projection.freeze_scale
    ffn_frozen_n: int = 0  # the same for the FFN Pattention (0 -> current ffn tokens)
    frozen_m: int = 0  # l2norm_width form: width whose sqrt scales the M stage (0 -> rank_m); Nexus-Rank growth pins it so old units keep their scale
    frozen_a: int = 0  # l2norm_width form: width whose sqrt scales the A stage (0 -> rank_a)

    def validate(self, errors: list[str], p: str) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{f.name}", v, "an integer >= 0 (0 = not pinned)")


LEGACY_GROWTH_STATE = ("frozen_n", "ffn_frozen_n", "frozen_m", "frozen_a")  # once model.projection.<name>


@dataclass
class ModelConfig:
    """Architecture. The baseline is a Llama-style Transformer++; sub-configs switch mechanisms on."""

    arch: str = "transformer"  # transformer | recurrent (NEXUS v4.1)
    vocab_size: int = 259  # tokenizer size; byte tokenizer = 256 bytes + bos/eos/pad
    d_model: int = 128  # residual stream width
    n_layers: int = 4  # number of blocks (physical layers for the recurrent model)
    n_heads: int = 4  # query heads
    n_kv_heads: int = 0  # key/value heads for GQA (0 -> n_heads)
    head_dim: int = 0  # per-head size (0 -> d_model // n_heads); decoupled so width growth keeps heads
    ffn_hidden: int = 0  # SwiGLU inner size (0 -> 8/3 d_model rounded up to a multiple of 32)
    max_seq_len: int = 256  # longest sequence (RoPE tables, generation limit)
    rope_theta: float = 10000.0  # RoPE base frequency
    qk_norm: bool = False  # RMSNorm per head on q and k before RoPE (Qwen3, OLMo2)
    tie_embeddings: bool = True  # share the token embedding with the LM head
    norm_eps: float = 1e-5  # RMSNorm epsilon
    init_std: float = 0.02  # normal init std for matrices and embeddings
    zero_init_out: bool = False  # zero-init attention output and MLP down projections (ExoFormer recipe)
    zero_init_head: bool = False  # zero-init the untied LM head (ExoFormer recipe)
    z_loss: float = 0.0  # z-loss weight on log(sum exp logits)^2, added once (PaLM)
    attention_bias: bool = False  # bias in q/k/v projections (Qwen2)
    logit_scale: float = 1.0  # constant multiplier on the LM-head logits; SPARKLING hidden growth sets it to the tied head's fan-in factor
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    projection: ProjectionConfig = field(default_factory=ProjectionConfig)
    mixing: MixingConfig = field(default_factory=MixingConfig)
    moe: MoEConfig = field(default_factory=MoEConfig)
    recurrent: RecurrentConfig = field(default_factory=RecurrentConfig)
    growth_state: GrowthState = field(default_factory=GrowthState, metadata={"set_by_growth": True})  # scales growth pinned (not a user setting)

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hd(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def ffn(self) -> int:
        if self.ffn_hidden:
            return self.ffn_hidden
        return ((8 * self.d_model // 3) + 31) // 32 * 32

    def validate(self, errors: list[str], p: str = "model") -> None:
        _check(errors, self.arch in ("transformer", "recurrent"), f"{p}.arch", self.arch, "transformer|recurrent")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v > 0, f"{p}.{name}", v, "an integer > 0")
        for name in ("n_kv_heads", "head_dim", "ffn_hidden"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{name}", v, "an integer >= 0 (0 = default)")
        if isinstance(self.n_heads, int) and self.n_heads > 0 and isinstance(self.d_model, int) and self.d_model > 0:
            if not self.head_dim:
                _check(errors, self.d_model % self.n_heads == 0, f"{p}.d_model", self.d_model,
                       f"a multiple of n_heads ({self.n_heads}), or set {p}.head_dim")
            if isinstance(self.n_kv_heads, int) and self.n_kv_heads > 0:
                _check(errors, self.n_heads % self.n_kv_heads == 0, f"{p}.n_kv_heads", self.n_kv_heads,
                       f"a divisor of n_heads ({self.n_heads})")
        _positive(errors, f"{p}.rope_theta", self.rope_theta)
        _positive(errors, f"{p}.norm_eps", self.norm_eps)
        _check(errors, isinstance(self.init_std, (int, float)) and self.init_std >= 0, f"{p}.init_std", self.init_std, "a number >= 0")
        _check(errors, isinstance(self.z_loss, (int, float)) and self.z_loss >= 0, f"{p}.z_loss", self.z_loss, "a number >= 0")
        _positive(errors, f"{p}.logit_scale", self.logit_scale)
        self.attention.validate(errors, f"{p}.attention")
        self.projection.validate(errors, f"{p}.projection", self.d_model if isinstance(self.d_model, int) else 0)
        self.growth_state.validate(errors, f"{p}.growth_state")
        self.mixing.validate(errors, f"{p}.mixing")
        if self.arch == "transformer":
            self.mixing.validate_with_model(errors, f"{p}.mixing", self)
        self.moe.validate(errors, f"{p}.moe")
        self.recurrent.validate(errors, f"{p}.recurrent")
        if self.arch == "recurrent":
            non_default = [n for n, sub in (("attention", self.attention), ("projection", self.projection),
                                            ("mixing", self.mixing), ("moe", self.moe))
                           if sub != type(sub)()]
            _check(errors, not non_default, f"{p}.arch", self.arch,
                   f"transformer when {', '.join(non_default)} options are set (the recurrent model has no attention)")


# ----------------------------------------------------------------------------- data
@dataclass
class DataConfig:
    """Where tokens come from and how they are cut into training sequences."""

    source: str = "embedded"  # embedded | stdlib | a .txt/.jsonl/.parquet file, folder, glob or comma list | a prepared dir | a .bin token file | hf:<dataset>[:<config>] | synthetic:<mqar|khop|induction>
    tokenizer: str = "byte"  # byte | bpe (train on the corpus) | path to a tokenizer.json
    bpe_vocab_size: int = 2048  # vocabulary size when training a BPE tokenizer
    seq_len: int = 128  # tokens per training sequence
    val_fraction: float = 0.05  # share of documents held out for validation (deterministic split)
    split_seed: int = 1234  # seed of the document-level train/validation split
    text_field: str = "text"  # field that holds text in jsonl/parquet/hub rows
    cache_dir: str = ""  # where tokenized memory-mapped arrays live ('' -> ~/.cache/nexus)
    max_documents: int = 0  # cap on documents read (0 = all, everywhere); a cap is printed with the data summary
    dtype: str = "auto"  # token dtype of a bare .bin file: auto (uint16 for vocabularies up to 65,536, else uint32) | uint16 | uint32
    num_proc: int = 0  # worker processes that tokenize a corpus into the cache (0 = the usable cores, at most 8)
    chat: bool = False  # rows are chat conversations (messages); loss only on assistant tokens (SFT)
    synthetic: dict = field(default_factory=dict)  # generator options for synthetic:<task> (vocab, pairs, k, ...)

    def validate(self, errors: list[str], p: str = "data") -> None:
        _check(errors, isinstance(self.source, str) and bool(self.source), f"{p}.source", self.source,
               "embedded, a file path, hf:<name> or synthetic:<task>")
        _check(errors, isinstance(self.seq_len, int) and self.seq_len >= 2, f"{p}.seq_len", self.seq_len, "an integer >= 2")
        _check(errors, isinstance(self.bpe_vocab_size, int) and self.bpe_vocab_size >= 260, f"{p}.bpe_vocab_size",
               self.bpe_vocab_size, "an integer >= 260")
        _check(errors, isinstance(self.val_fraction, (int, float)) and 0 < self.val_fraction < 1, f"{p}.val_fraction",
               self.val_fraction, "a number in (0, 1)")
        _check(errors, self.dtype in ("auto", "uint16", "uint32"), f"{p}.dtype", self.dtype, "auto, uint16 or uint32")
        _check(errors, isinstance(self.num_proc, int) and self.num_proc >= 0, f"{p}.num_proc", self.num_proc,
               "an integer >= 0 (0 = the usable cores, at most 8)")
        _check(errors, isinstance(self.max_documents, int) and self.max_documents >= 0, f"{p}.max_documents",
               self.max_documents, "an integer >= 0 (0 = all)")


# ----------------------------------------------------------------------------- training
@dataclass
class TrainConfig:
    """Optimizer, schedule, loop, logging and checkpointing."""

    steps: int = 300  # optimizer steps
    schedule_steps: int = 0  # LR schedule horizon (0 = steps); a resume that changes steps keeps the old horizon here
    batch_size: int = 16  # sequences per micro-batch (per process)
    grad_accum: int = 1  # micro-batches per optimizer step
    optimizer: str = "adamw"  # adamw | muon (Muon for 2-D hidden matrices, AdamW for the rest)
    lr: float = 3e-3  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # final lr as a fraction of the peak
    schedule: str = "cosine"  # cosine | wsd | linear_warmdown | constant (all after linear warmup)
    warmup_steps: int = 30  # linear warmup steps
    decay_fraction: float = 0.2  # wsd / linear_warmdown: share of steps spent decaying at the end
    weight_decay: float = 0.1  # AdamW decoupled weight decay on matrices
    decay_all: bool = False  # also decay norms, biases and embeddings (off: the usual rule)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])  # AdamW betas
    eps: float = 1e-8  # AdamW epsilon
    muon_lr: float = 0.02  # Muon learning rate for 2-D hidden matrices
    muon_wd: float = 0.0  # Muon weight decay
    muon_momentum: float = 0.95  # Muon Nesterov momentum
    muon_ns: str = "newton_schulz"  # newton_schulz | polar_express orthogonalization
    muon_ns_steps: int = 5  # orthogonalization iterations
    cautious_wd: bool = False  # apply weight decay only where update and weight agree in sign
    grad_clip: float = 1.0  # global gradient-norm clip (0 = off)
    max_nonfinite: int = 5  # abort after this many non-finite losses in a row (each skips its step)
    seed: int = 0  # RNG seed for init, data order and sampling
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 (autocast on CUDA)
    compile: bool = False  # torch.compile the model
    parallel: str = "ddp"  # ddp | fsdp2 under torchrun: replicate the model (DDP) or shard params, grads and optimizer state (FSDP2)
    activation_checkpointing: bool = False  # recompute each block's activations in backward: less memory for ~1/3 more compute
    eval_every: int = 100  # validation every N steps (0 = only at the end)
    eval_batches: int = 8  # micro-batches per validation
    sample_every: int = 0  # print a generated sample every N steps (0 = only at the end)
    sample_tokens: int = 64  # tokens per sample
    sample_prompt: str = "The "  # prompt of the periodic sample
    save_every: int = 100  # step checkpoint every N steps, so a killed run can resume (0 = only at the end)
    keep_last: int = 2  # keep the last k step checkpoints
    log_every: int = 10  # metrics.jsonl / progress-bar refresh interval in steps
    log_to: list[str] = field(default_factory=lambda: ["jsonl"])  # jsonl | tensorboard | wandb: metric sinks (metrics.jsonl is always written)
    wandb_project: str = "nexus"  # W&B project when log_to has wandb (WANDB_MODE=offline works without an account)
    out_dir: str = "runs/default"  # run directory (metrics.jsonl, checkpoints)
    grow_at: int = 0  # grow the model at this step (0 = never); the growth spec is in `growth`
    growth: dict = field(default_factory=dict)  # growth spec applied at grow_at: a mapping whose "family" picks the spec dataclass (nexus.growth.spec)
    dist_timeout_s: int = 60  # torchrun, after the first step: a collective waiting this long (a stopped, hung or dead rank) ends every rank
    dist_init_timeout_s: int = 600  # torchrun, through set-up, compilation, the first step and each checkpoint save: slow but healthy there

    def validate(self, errors: list[str], p: str = "train") -> None:
        for name in ("steps", "batch_size", "grad_accum", "eval_batches", "sample_tokens", "keep_last", "log_every", "max_nonfinite"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v > 0, f"{p}.{name}", v, "an integer > 0")
        for name in ("warmup_steps", "eval_every", "sample_every", "save_every", "grow_at", "schedule_steps"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{name}", v, "an integer >= 0")
        _positive(errors, f"{p}.lr", self.lr)
        for name in ("dist_timeout_s", "dist_init_timeout_s"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{p}.{name}", v,
                   "an integer > 0 (seconds)")
        if isinstance(self.grow_at, int) and isinstance(self.steps, int) and self.grow_at:
            _check(errors, self.grow_at < self.steps, f"{p}.grow_at", self.grow_at,
                   f"a step below train.steps ({self.steps}), or 0 for no growth")
        _positive(errors, f"{p}.muon_lr", self.muon_lr)
        _positive(errors, f"{p}.eps", self.eps)
        _check(errors, isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed < 2 ** 32,
               f"{p}.seed", self.seed, "an integer in [0, 2**32)")  # numpy's seed range
        _check(errors, isinstance(self.muon_wd, (int, float)) and self.muon_wd >= 0, f"{p}.muon_wd", self.muon_wd,
               "a number >= 0")
        _check(errors, isinstance(self.muon_momentum, (int, float)) and 0 <= self.muon_momentum < 1,
               f"{p}.muon_momentum", self.muon_momentum, "a number in [0, 1)")
        _check(errors, isinstance(self.muon_ns_steps, int) and self.muon_ns_steps > 0, f"{p}.muon_ns_steps",
               self.muon_ns_steps, "an integer > 0")
        _check(errors, self.optimizer in ("adamw", "muon"), f"{p}.optimizer", self.optimizer, "adamw|muon")
        _check(errors, self.schedule in ("cosine", "wsd", "linear_warmdown", "constant"), f"{p}.schedule", self.schedule,
               "cosine|wsd|linear_warmdown|constant")
        _check(errors, self.muon_ns in ("newton_schulz", "polar_express"), f"{p}.muon_ns", self.muon_ns, "newton_schulz|polar_express")
        _check(errors, isinstance(self.min_lr_ratio, (int, float)) and 0 <= self.min_lr_ratio <= 1, f"{p}.min_lr_ratio",
               self.min_lr_ratio, "a number in [0, 1]")
        _check(errors, isinstance(self.decay_fraction, (int, float)) and 0 <= self.decay_fraction <= 1, f"{p}.decay_fraction",
               self.decay_fraction, "a number in [0, 1]")
        _check(errors, isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0, f"{p}.weight_decay",
               self.weight_decay, "a number >= 0")
        _check(errors, isinstance(self.betas, (list, tuple)) and len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
               f"{p}.betas", self.betas, "two numbers in [0, 1)")
        _check(errors, self.dtype in ("float32", "bfloat16"), f"{p}.dtype", self.dtype, "float32|bfloat16")
        _check(errors, self.parallel in ("ddp", "fsdp2"), f"{p}.parallel", self.parallel, "ddp|fsdp2")
        _check(errors, not (self.parallel == "fsdp2" and self.optimizer == "muon"), f"{p}.optimizer", self.optimizer,
               "adamw with train.parallel=fsdp2 (Muon orthogonalizes whole matrices, FSDP2 holds row shards)")
        _check(errors, isinstance(self.log_to, list) and all(t in ("jsonl", "tensorboard", "wandb") for t in self.log_to),
               f"{p}.log_to", self.log_to, "a list of jsonl|tensorboard|wandb")
        _check(errors, isinstance(self.grad_clip, (int, float)) and self.grad_clip >= 0, f"{p}.grad_clip", self.grad_clip, "a number >= 0")
        _check(errors, isinstance(self.device, str) and (self.device in ("auto", "cpu") or self.device.startswith("cuda")),
               f"{p}.device", self.device, "auto|cpu|cuda|cuda:N")


@dataclass
class RunConfig:
    """A whole run: what to build, what to feed it, how to train it, and how it got its shape."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    preset: str = ""  # preset this config came from (informational)
    growth_history: list[dict] = field(default_factory=list)  # growth records, appended by nexus.growth

    def validate(self) -> "RunConfig":
        errors: list[str] = []
        self.model.validate(errors, "model")
        self.data.validate(errors, "data")
        self.train.validate(errors, "train")
        if isinstance(self.data.seq_len, int) and isinstance(self.model.max_seq_len, int):
            _check(errors, self.data.seq_len <= self.model.max_seq_len, "data.seq_len", self.data.seq_len,
                   f"<= model.max_seq_len ({self.model.max_seq_len})")
        if errors:
            raise ConfigError("invalid config: " + "; ".join(errors))
        return self

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        return from_dict(cls, _upgrade(d), "")

    def save_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load_yaml(cls, path: str | Path, flag: str = "--config") -> "RunConfig":
        return cls.from_dict(read_config_file(path, flag))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _upgrade(d):
    """A config written before GrowthState existed: model.projection.frozen_* -> model.growth_state.*."""
    proj = d.get("model", {}).get("projection") if isinstance(d, dict) and isinstance(d.get("model"), dict) else None
    if not isinstance(proj, dict) or not any(k in proj for k in LEGACY_GROWTH_STATE):
        return d
    d = copy.deepcopy(d)
    proj = d["model"]["projection"]
    state = d["model"].setdefault("growth_state", {}) or {}
    for k in LEGACY_GROWTH_STATE:
        if k in proj:
            state.setdefault(k, proj.pop(k))
    d["model"]["growth_state"] = state
    return d


def to_dict(obj) -> dict:
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = to_dict(v) if dataclasses.is_dataclass(v) else (list(v) if isinstance(v, tuple) else v)
    return out


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Coerce a YAML/CLI value to a field's declared type, or raise a ConfigError naming the field."""
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}={value!r} (valid: true|false)")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{path}={value!r} (valid: an integer)")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}={value!r} (valid: a number)")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
            raise ConfigError(f"{path}={value!r} (valid: a string)")
        return value
    if origin is list or tp is list:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}={value!r} (valid: a list)")
        (inner,) = typing.get_args(tp) or (Any,)
        return [_coerce(v, inner, f"{path}[{i}]") if inner is not Any else v for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}={value!r} (valid: a mapping)")
        return dict(value)
    return value


def from_dict(cls, d: dict, prefix: str):
    if not isinstance(d, dict):
        raise ConfigError(f"{prefix or 'config'}={d!r} (valid: a mapping)")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = [k for k in d if k not in names]
    if unknown:
        raise ConfigError(f"unknown field {prefix + unknown[0]!r} (valid: {', '.join(sorted(names))})")
    kwargs = {}
    for k, v in d.items():
        tp = hints[k]
        if dataclasses.is_dataclass(tp):
            kwargs[k] = from_dict(tp, v or {}, f"{prefix}{k}.")
        else:
            kwargs[k] = _coerce(v, tp, prefix + k)
    return cls(**kwargs)


def apply_override(cfg: RunConfig, dotted: str, raw: Any) -> None:
    """Set `model.n_layers`-style fields; `raw` strings are parsed as YAML scalars then coerced."""
    parts = dotted.split(".")
    obj = cfg
    for i, part in enumerate(parts):
        names = {f.name: f for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
        if part not in names:
            where = ".".join(parts[:i]) or "top level"
            valid = ", ".join(sorted(n for n, f in names.items() if not f.metadata.get("set_by_growth"))) or "no sub-fields"
            raise ConfigError(f"unknown field {dotted!r} (valid at {where}: {valid})")
        if names[part].metadata.get("set_by_growth"):
            raise ConfigError(f"{dotted} is set by growth only (valid: grow the model with `nexus grow` or "
                              "--grow-at; it records the scales the growth pinned)")
        if i == len(parts) - 1:
            tp = typing.get_type_hints(type(obj))[part]
            if dataclasses.is_dataclass(tp):
                raise ConfigError(f"{dotted} is a section; set one of its fields, e.g. {dotted}.<field>")
            value = raw
            if isinstance(raw, str):
                try:
                    value = yaml.safe_load(raw) if raw != "" else ""
                except yaml.YAMLError:
                    value = raw
                if tp is str or (tp in (list[str],) and isinstance(value, str)):
                    value = raw
            setattr(obj, part, _coerce(value, tp, dotted))
        else:
            obj = getattr(obj, part)


def read_config_file(path: str | Path, flag: str = "--config") -> dict:
    """A config YAML file as its (possibly partial) mapping; `flag` names the option in errors."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{flag}={str(path)!r} (valid: an existing YAML file)")
    try:
        d = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag}={str(path)!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{flag}={str(path)!r} (valid: a YAML mapping with model/data/train sections)")
    return _upgrade(d)


def config_file_overrides(path: str | Path, flag: str = "--config") -> list[str]:
    """A config file as the dotted overrides it amounts to (`--model.d_model=64`, ...): only the fields
    it names change, so it goes on top of a preset, and command-line overrides after it win. Being
    plain override strings, it travels wherever overrides do (experiments plan many runs from them)."""
    out: list[str] = []

    def walk(section, d: dict, prefix: str) -> None:
        for k, v in d.items():
            sub = getattr(section, str(k), None)
            if dataclasses.is_dataclass(sub) and isinstance(v, dict):
                walk(sub, v, f"{prefix}{k}.")
            else:  # strings as they are (a str field keeps them verbatim); the rest as YAML apply_override reads
                out.append(f"--{prefix}{k}=" + (v if isinstance(v, str) else
                                                yaml.safe_dump(v, default_flow_style=True, width=2 ** 30).strip()
                                                .removesuffix("\n...").strip()))

    walk(RunConfig(), read_config_file(path, flag), "")
    return out


def parse_overrides(cfg: RunConfig, args: list[str]) -> RunConfig:
    """Apply `--a.b value` / `--a.b=value` pairs from a command line."""
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or "." not in a.split("=")[0]:
            raise ConfigError(f"unrecognized argument {a!r} (valid: --section.field VALUE, e.g. --model.n_layers 4)")
        if "=" in a:
            key, val = a[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"{a} needs a value (e.g. {a} 4)")
            key, val = a[2:], args[i + 1]
            i += 2
        apply_override(cfg, key, val)
    return cfg
