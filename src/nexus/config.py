"""Typed configuration for nexus runs: model, data, training (the schema; how a field is declared, checked
and parsed is config_base.py, old configs are upgraded by config_migration.py, overrides merged by
config_overrides.py).

Every field carries a one-line reason. Sub-configs own their own validation so that a
feature (anchor mixing, Nexus-Rank, MoE, ...) can be added without touching the others.
`validate()` collects *all* problems and raises one ConfigError listing them.
"""

# A field's comment is its reason in `nexus config` and `--help` (config_help.py joins every comment inside the
# field's statement): a reason longer than a line continues on comment lines inside parentheses that
# `# fmt: off` keeps from the formatter.
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .config_base import KindOptions, _check, _check_choices, _positive, choice, from_dict, option, to_dict
from .errors import ConfigError  # re-exported: `from nexus.config import ConfigError` keeps working


# ----------------------------------------------------------------------------- model parts
@dataclass
class ArchitectureOptions(KindOptions, kind="transformer"):
    """The model's architecture, `model.arch: {kind, **its options}` (a bare name is its kind). The baseline,
    `transformer`, has no options here: its parts are model.attention, .projection, .mixing and .mlp. Another
    architecture registers its options, and its parameter count, in its own file (nexus/kind_options/)."""

    section: typing.ClassVar[str] = "arch"
    addressed_by_kind: typing.ClassVar[bool] = True  # model.<arch>.<option>: the form before model.arch held options

    def check(self, errors: list[str], p: str, model: ModelConfig) -> None:
        """The transformer's rule across its parts: mixing g needs gate logits."""
        model.mixing.validate_with_model(errors, f"{p.rsplit('.', 1)[0]}.mixing", model)


@dataclass
class AttentionOptions(KindOptions, kind="standard"):
    """Attention of every layer. The baseline kind, `standard`, is causal GQA attention
    (models/attention.py); other kinds (`higher_order`, ...) register their options in their own files."""

    section: typing.ClassVar[str] = "attention"
    gate: typing.Literal["none", "elementwise", "headwise"] = option(
        "none", "gated attention: o * sigmoid(g) before W_o, per element or per head (every kind takes it)"
    )


@dataclass
class ProjectionOptions(KindOptions, kind="linear"):
    """The module behind q/k/v(/o/ffn). The baseline kind, `linear`, is nn.Linear everywhere; other kinds
    (`nexus_rank`, `pattention`) register their options, with the targets they replace, in their own files."""

    section: typing.ClassVar[str] = "projection"

    def uses(self, target: str) -> bool:
        """Does this kind replace the projection `target` (q, k, v, o, ffn)?"""
        return target in getattr(self, "targets", ())


@dataclass
class MLPOptions(KindOptions, kind="dense"):
    """The MLP of every layer. The baseline kind, `dense`, is SwiGLU of inner size model.ffn_hidden, or one
    projection of model.projection's kind when its targets include ffn (TokenFormer's FFN); other kinds
    (`moe`) register their options in their own files."""

    section: typing.ClassVar[str] = "mlp"
    # the inner axes this kind's `width_axes` can return, each with the reason of its --width.<axis> flag
    # (growth/width.py makes one option per axis any registered MLP kind declares)
    width_axis_reasons: typing.ClassVar[dict[str, str]] = {"ffn": "new dense FFN inner size (0 = unchanged)"}

    def width_axes(self, model: ModelConfig) -> dict[str, int]:
        """The inner axes width growth may grow in this MLP, with their sizes (growth/width.py)."""
        return {"ffn": model.ffn}

    def set_width_axes(self, model: ModelConfig, sizes: dict[str, int]) -> None:
        """Write grown sizes of `width_axes` into `model` (this section belongs to it)."""
        model.ffn_hidden = sizes["ffn"]  # explicit: the default would follow d_model


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
        _check(
            errors,
            self.anchor in ("none", "value_residual", "nures", "exo"),
            f"{p}.anchor",
            self.anchor,
            "none|value_residual|nures|exo",
        )
        bad = [c for c in self.components if c not in self.COMPONENTS]
        _check(errors, not bad, f"{p}.components", self.components, f"subset of {list(self.COMPONENTS)}")
        _check(
            errors,
            self.granularity in ("elementwise", "headwise", "scalar"),
            f"{p}.granularity",
            self.granularity,
            "elementwise|headwise|scalar",
        )
        _check(errors, self.norm in ("all", "qk", "none"), f"{p}.norm", self.norm, "all|qk|none")
        _check(
            errors,
            not (self.dynamic and self.anchor == "none"),
            f"{p}.dynamic",
            self.dynamic,
            "false unless mixing.anchor is set (dynamic mixing needs an anchor)",
        )
        _check(
            errors,
            isinstance(self.dynamic_hidden, int) and self.dynamic_hidden > 0,
            f"{p}.dynamic_hidden",
            self.dynamic_hidden,
            "an integer > 0",
        )
        if self.anchor == "none":
            return
        _check(
            errors,
            isinstance(self.components, list) and len(self.components) > 0,
            f"{p}.components",
            self.components,
            f"a non-empty subset of {list(self.COMPONENTS)} when mixing.anchor is set",
        )
        if self.anchor == "value_residual":
            _check(
                errors,
                list(self.components) == ["v"],
                f"{p}.components",
                self.components,
                "['v'] with anchor=value_residual (ResFormer mixes values only; use anchor=nures for q/k/g)",
            )
            _check(
                errors,
                self.norm == "none",
                f"{p}.norm",
                self.norm,
                "none with anchor=value_residual (ResFormer reuses the raw v_1; use anchor=nures for normed anchors)",
            )
        if self.dynamic:
            _check(errors, self.learnable, f"{p}.learnable", self.learnable, "true when mixing.dynamic is on")

    def validate_with_model(self, errors: list[str], p: str, model: ModelConfig) -> None:
        """Checks that need the rest of the model: gate logits must exist to be mixed."""
        if self.anchor != "none" and "g" in self.components and model.attention.gate == "none":
            errors.append(
                f"{p}.components={self.components!r} (valid: drop 'g', or set "
                f"{p.rsplit('.', 1)[0]}.attention.gate=elementwise|headwise: mixing g needs gate logits)"
            )


@dataclass
class ModelConfig:
    """Architecture. The baseline is a Llama-style Transformer++; sub-configs switch mechanisms on."""

    arch: ArchitectureOptions = field(
        default_factory=ArchitectureOptions
    )  # {kind: transformer|<registered>, **its options}; a bare name is its kind
    vocab_size: int = 259  # tokenizer size; byte tokenizer = 256 bytes + bos/eos/pad
    d_model: int = 128  # residual stream width
    n_layers: int = 4  # number of blocks (physical layers of a depth-recurrent architecture)
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
    loss_chunk_tokens: int = (
        0  # >0: training head + CE this many tokens at a time, never the full logits (less memory; same loss to fp32
        # rounding); 0: plain
    )
    attention_bias: bool = False  # bias in q/k/v projections (Qwen2)
    # fmt: off
    logit_scale: float = (
        1.0  # constant multiplier on the LM-head logits; SPARKLING hidden growth sets it to the tied head's fan-in
        # factor
    )
    # fmt: on
    attention: AttentionOptions = field(
        default_factory=AttentionOptions
    )  # {kind: standard|<registered>, **its options}
    projection: ProjectionOptions = field(
        default_factory=ProjectionOptions
    )  # {kind: linear|<registered>, **its options}
    mixing: MixingConfig = field(default_factory=MixingConfig)
    mlp: MLPOptions = field(default_factory=MLPOptions)  # {kind: dense|<registered>, **its options}
    growth_state: dict[str, int] = field(
        default_factory=dict,
        metadata={
            "set_by_growth": True
        },  # scales growth pinned so the grown model computes what the model before it did, {name: value}; each name
        # declared by a selected kind (growth_pins); set by growth only
    )

    def __setattr__(self, name: str, value) -> None:
        if name == "arch" and isinstance(value, str):  # arch="<kind>": that kind with its default options
            value = ArchitectureOptions.make(value)
        super().__setattr__(name, value)

    @classmethod
    def mechanism_sections(cls) -> list[str]:
        """The sub-configs each of which switches a mechanism of the transformer on, off at its defaults
        (attention, projection, mixing, mlp, and any section added later): not arch, which picks the
        architecture, nor growth_state, which growth sets."""
        return [
            f.name
            for f in dataclasses.fields(cls)
            if f.name != "arch"
            and not f.metadata.get("set_by_growth")
            and isinstance(f.default_factory, type)
            and dataclasses.is_dataclass(f.default_factory)
        ]

    def kind_sections(self) -> list[KindOptions]:
        """The sections whose `kind` picks a registered entry (arch, attention, projection, mlp)."""
        return [v for v in (getattr(self, f.name) for f in dataclasses.fields(self)) if isinstance(v, KindOptions)]

    def growth_pins(self) -> dict[str, str]:
        """{name: reason} of the scales the selected kinds let growth pin in `growth_state`."""
        return {name: why for section in self.kind_sections() for name, why in type(section).growth_pins.items()}

    def pinned(self, name: str) -> int:
        """The scale growth pinned under `name` (0: not pinned, the module uses its current size)."""
        return self.growth_state.get(self._declared_pin(name), 0)

    def pin(self, name: str, value: int) -> None:
        """Record a scale a growth pins (growth only: a user cannot set these)."""
        self.growth_state[self._declared_pin(name)] = value

    def _declared_pin(self, name: str) -> str:
        # a misspelt or foreign name would otherwise read 0 (not pinned) and silently change the function
        if name not in self.growth_pins():
            raise RuntimeError(
                f"growth pin {name!r} is not declared by the selected kinds (declared: "
                f"{', '.join(self.growth_pins()) or 'none'})"
            )
        return name

    def _validate_growth_state(self, errors: list[str], p: str) -> None:
        state = self.growth_state
        if not isinstance(state, dict):
            _check(errors, False, p, state, "a mapping of pinned scales, written by growth")
            return
        declared = self.growth_pins()
        for name, v in state.items():
            if name not in declared:
                _check(
                    errors, False, f"{p}.{name}", v, f"a scale the selected kinds pin: {', '.join(declared) or 'none'}"
                )
            else:
                _check(
                    errors,
                    isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                    f"{p}.{name}",
                    v,
                    "an integer >= 0 (0 = not pinned)",
                )

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
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v > 0, f"{p}.{name}", v, "an integer > 0")
        for name in ("n_kv_heads", "head_dim", "ffn_hidden"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{name}", v, "an integer >= 0 (0 = default)")
        if isinstance(self.n_heads, int) and self.n_heads > 0 and isinstance(self.d_model, int) and self.d_model > 0:
            if not self.head_dim:
                _check(
                    errors,
                    self.d_model % self.n_heads == 0,
                    f"{p}.d_model",
                    self.d_model,
                    f"a multiple of n_heads ({self.n_heads}), or set {p}.head_dim",
                )
            if isinstance(self.n_kv_heads, int) and self.n_kv_heads > 0:
                _check(
                    errors,
                    self.n_heads % self.n_kv_heads == 0,
                    f"{p}.n_kv_heads",
                    self.n_kv_heads,
                    f"a divisor of n_heads ({self.n_heads})",
                )
        _positive(errors, f"{p}.rope_theta", self.rope_theta)
        _positive(errors, f"{p}.norm_eps", self.norm_eps)
        _check(
            errors,
            isinstance(self.init_std, (int, float)) and self.init_std >= 0,
            f"{p}.init_std",
            self.init_std,
            "a number >= 0",
        )
        _check(
            errors,
            isinstance(self.z_loss, (int, float)) and self.z_loss >= 0,
            f"{p}.z_loss",
            self.z_loss,
            "a number >= 0",
        )
        _check(
            errors,
            isinstance(self.loss_chunk_tokens, int)
            and not isinstance(self.loss_chunk_tokens, bool)
            and self.loss_chunk_tokens >= 0,
            f"{p}.loss_chunk_tokens",
            self.loss_chunk_tokens,
            "an integer >= 0 (0: off)",
        )
        _positive(errors, f"{p}.logit_scale", self.logit_scale)
        self.attention.validate(errors, f"{p}.attention", self)
        self.projection.validate(errors, f"{p}.projection", self)
        self._validate_growth_state(errors, f"{p}.growth_state")
        self.mixing.validate(errors, f"{p}.mixing")
        self.mlp.validate(errors, f"{p}.mlp", self)
        self.arch.validate(errors, f"{p}.arch", self)  # last: an architecture's rules read the other sections


# ----------------------------------------------------------------------------- data
@dataclass
class DataConfig:
    """Where tokens come from and how they are cut into training sequences."""

    source: str = "embedded"  # embedded | stdlib | hf:<name> | synthetic:<task> | prepared dir | files (train --help)
    tokenizer: str = (
        "byte"  # byte | bpe (train on the corpus) | a tokenizer.json / tokenizer.txt or a directory holding one
    )
    bpe_vocab_size: int = 2048  # vocabulary size when training a BPE tokenizer
    seq_len: int = 128  # tokens per training sequence
    val_fraction: float = 0.05  # share of documents held out for validation (deterministic split)
    split_seed: int = 1234  # seed of the document-level train/validation split
    text_field: str = "text"  # field that holds text in jsonl/parquet/hub rows
    cache_dir: str = ""  # where tokenized memory-mapped arrays live ('' -> ~/.cache/nexus)
    max_documents: int = 0  # cap on documents read (0 = all, everywhere); a cap is printed with the data summary
    # fmt: off
    dtype: str = (
        "auto"  # token dtype of a bare .bin file: auto (uint16 for vocabularies up to 65,536, else uint32) | uint16 |
        # uint32
    )
    # fmt: on
    num_proc: int = 0  # worker processes that tokenize a corpus into the cache (0 = the usable cores, at most 8)
    chat: bool = False  # rows are chat conversations (messages); loss only on assistant tokens (SFT)
    document_per_file: bool = False  # each text file is one document (default: split at blank lines; code: always)
    synthetic: dict = field(default_factory=dict)  # generator options for synthetic:<task> (vocab, pairs, k, ...)

    def validate(self, errors: list[str], p: str = "data") -> None:
        _check(
            errors,
            isinstance(self.source, str) and bool(self.source),
            f"{p}.source",
            self.source,
            "embedded, a file path, hf:<name> or synthetic:<task>",
        )
        _check(
            errors, isinstance(self.seq_len, int) and self.seq_len >= 2, f"{p}.seq_len", self.seq_len, "an integer >= 2"
        )
        _check(
            errors,
            isinstance(self.bpe_vocab_size, int) and self.bpe_vocab_size >= 260,
            f"{p}.bpe_vocab_size",
            self.bpe_vocab_size,
            "an integer >= 260",
        )
        _check(
            errors,
            isinstance(self.val_fraction, (int, float)) and 0 < self.val_fraction < 1,
            f"{p}.val_fraction",
            self.val_fraction,
            "a number in (0, 1)",
        )
        _check(errors, self.dtype in ("auto", "uint16", "uint32"), f"{p}.dtype", self.dtype, "auto, uint16 or uint32")
        _check(
            errors,
            isinstance(self.num_proc, int) and self.num_proc >= 0,
            f"{p}.num_proc",
            self.num_proc,
            "an integer >= 0 (0 = the usable cores, at most 8)",
        )
        _check(
            errors,
            isinstance(self.max_documents, int) and self.max_documents >= 0,
            f"{p}.max_documents",
            self.max_documents,
            "an integer >= 0 (0 = all)",
        )


# ----------------------------------------------------------------------------- training
@dataclass
class OptimizerOptions(KindOptions):
    """The optimizer, `train.optimizer: {kind, **its options}` (a bare name is its kind with its defaults).

    Each kind declares its own options, with defaults from its paper, as a subclass in its own torch-free file
    (`class LionOptions(OptimizerOptions, kind="lion")` in nexus/optim/kinds/), and names the function that
    builds it (`builder = "module:function"`, optim/param_groups.py's contract); the torch optimizer it builds
    meets optim/base.py's `GrowableOptimizer` contract. The baseline kind, `adamw`, is below. Kinds share no
    option: a kind switch takes the new kind's defaults (Lion's betas are not AdamW's)."""

    section: typing.ClassVar[str] = "optimizer"
    package: typing.ClassVar[str] = "nexus.optim.kinds"
    kind_name: typing.ClassVar[str] = "adamw"  # a mapping without a kind
    builder: typing.ClassVar[str] = ""  # "module:function" that builds it (optim/param_groups.py)
    # whether each update is elementwise in the parameter (FSDP2 steps each rank's row shard on its own)
    elementwise: typing.ClassVar[bool] = True

    def validate(self, errors: list[str], p: str, model=None) -> None:
        super().validate(errors, p, model)
        # a kind declared without its builder would validate and then build nothing (or another optimizer)
        _check(
            errors,
            _resolvable(self.builder),
            f"{p}.kind",
            self.kind,
            "a kind whose options name an importable builder, module:function (this one names "
            f"{self.builder or 'none'!r})",
        )


def _resolvable(builder: str) -> bool:
    """Whether `module:function`'s module exists (found without importing it: no torch at validation)."""
    import importlib.util

    module, _, fn = builder.partition(":")
    try:
        return bool(fn) and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class AdamWOptions(OptimizerOptions, kind="adamw"):
    """AdamW (Loshchilov & Hutter, 2019) for every parameter, torch's fused/foreach kernel where no growth state
    needs the hand-written one (optim/optimizers.py)."""

    builder: typing.ClassVar[str] = "nexus.optim.param_groups:build_adamw"
    betas: list[float] = option(
        [0.9, 0.95],
        "AdamW's (beta1, beta2); beta2 0.95, not the paper's 0.999, as "
        "LLM pretraining uses (and new entries' bias correction is gentler, DESIGN.md)",
    )
    eps: float = option(1e-8, "AdamW's epsilon")

    def check(self, errors: list[str], p: str, model) -> None:
        betas = self.betas
        _check(
            errors,
            isinstance(betas, (list, tuple)) and len(betas) == 2 and all(0 <= b < 1 for b in betas),
            f"{p}.betas",
            betas,
            "two numbers in [0, 1)",
        )
        _positive(errors, f"{p}.eps", self.eps)


def optimizer_options(value) -> OptimizerOptions:
    """A bare kind name (`"muon"`) as its options with the kind's defaults, a mapping {kind, **options} as those
    options; options pass through."""
    if isinstance(value, str):
        value = {"kind": value}
    if isinstance(value, dict):  # {kind, **options}, as a config file writes it
        kind = value.get("kind", OptimizerOptions.kind_name)
        return from_dict(
            OptimizerOptions.options_class(kind, "train.optimizer"), {**value, "kind": kind}, "train.optimizer."
        )
    return value


@dataclass
class TrainConfig:
    """Optimizer, schedule, loop, logging and checkpointing."""

    steps: int = 300  # optimizer steps
    schedule_steps: int = 0  # LR schedule horizon (0 = steps); a resume that changes steps keeps the old horizon here
    batch_size: int = 16  # sequences per micro-batch (per process)
    grad_accum: int = 1  # micro-batches per optimizer step
    # the optimizer and its own options, {kind, **options}: --train.optimizer muon, --train.optimizer.betas 0.9,0.99
    optimizer: OptimizerOptions = field(
        default_factory=AdamWOptions,
        metadata={
            "reason": (
                "the optimizer and its own options (each kind declared in optim/kinds/, with its paper's defaults)"
            )
        },
    )
    lr: float = 3e-3  # peak AdamW learning rate (under muon its AdamW half's; Muon's own: train.optimizer.lr)
    min_lr_ratio: float = 0.1  # final lr as a fraction of the peak
    schedule: str = choice(
        "cosine",
        "train.schedule",
        "nexus.optim.schedules",
        "the LR schedule after linear warmup (each kind one module of optim/schedules/)",
        implemented=True,
    )
    warmup_steps: int = 30  # linear warmup steps
    decay_fraction: float = 0.2  # wsd / linear_warmdown: share of steps spent decaying at the end
    weight_decay: float = 0.1  # AdamW decoupled weight decay on matrices (Muon's own: train.optimizer.weight_decay)
    decay_all: bool = False  # also decay norms, biases and embeddings (off: the usual rule)
    cautious_wd: bool = False  # apply weight decay only where update and weight agree in sign
    grad_clip: float = 1.0  # global gradient-norm clip (0 = off)
    max_nonfinite: int = 5  # abort after this many non-finite losses in a row (each skips its step)
    seed: int = 0  # RNG seed for init, data order and sampling
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # issue 51: auto became the default (it was float32); a saved config without the field means float32
    # (config_migration.saved_run_config), and every study plan and the main job pin float32
    dtype: str = option(
        "auto",
        "auto | float32 | bfloat16 autocast; auto: bf16 where the device computes it natively and the model is wide "
        "enough to gain (nexus/train/precision.py, benchmarks/results/dtype-auto.md), else float32",
    )
    compile: bool = False  # torch.compile the model (on a CPU its build takes minutes for a 0-2% faster step)
    compile_mode: str = (
        "default"  # torch.compile mode with compile on: default | reduce-overhead (CUDA graphs; static shapes: fewer
        # kernel
        # launches for small models on a GPU)
    )
    parallel: str = choice(
        "ddp",
        "train.parallel",
        "nexus.train.parallelism",
        "how torchrun ranks share the model (each declared in train/parallelism.py)",
    )
    activation_checkpointing: bool = (
        False  # recompute each block's activations in backward: less memory for ~1/3 more compute
    )
    eval_every: int = 100  # validation every N steps (0 = only at the end)
    eval_batches: int = 8  # micro-batches per validation
    sample_every: int = 0  # print a generated sample every N steps (0 = only at the end)
    sample_tokens: int = 64  # tokens per sample
    sample_prompt: str = "The "  # prompt of the periodic sample
    save_every: int = 100  # step checkpoint every N steps, so a killed run can resume (0 = only at the end)
    keep_last: int = 2  # keep the last k step checkpoints
    log_every: int = 10  # metrics.jsonl / progress-bar refresh interval in steps
    log_to: list[str] = choice(
        ["jsonl"],
        "train.log_to",
        "nexus.train.loggers",
        "metric sinks (metrics.jsonl is always written; each declared in train/loggers.py)",
    )
    wandb_project: str = "nexus"  # W&B project when log_to has wandb (WANDB_MODE=offline works without an account)
    out_dir: str = "runs/default"  # run directory (metrics.jsonl, checkpoints)
    hooks: list[dict] = field(
        default_factory=list  # trainer hooks this run turns on, each {kind: <hook kind>, **its options}, e.g. {kind:
        # growth, at: 150, spec:
        # {family: width, hidden: 128}}
    )
    # fmt: off
    dist_timeout_s: int = (
        60  # torchrun, after the first step: a collective waiting this long (a stopped, hung or dead rank) ends every
        # rank
    )
    # fmt: on
    dist_init_timeout_s: int = (
        600  # torchrun, through set-up, compilation, the first step and each checkpoint save: slow but healthy there
    )

    def __setattr__(self, name: str, value) -> None:
        if name == "optimizer":  # `TrainConfig(optimizer="muon")`, `tcfg.optimizer = "muon"`: a bare name is its kind
            value = optimizer_options(value)
        super().__setattr__(name, value)

    def hook(self, kind: str) -> dict | None:
        """The `hooks` entry of `kind` (None: the run does not configure one)."""
        return next((h for h in self.hooks if isinstance(h, dict) and h.get("kind") == kind), None)

    def set_hook(self, kind: str, **options) -> dict:
        """Configure the `kind` hook: its entry's options are updated, or the entry is added."""
        entry = self.hook(kind)
        if entry is None:
            entry = {"kind": kind}
            self.hooks.append(entry)
        entry.update(options)
        return entry

    def drop_hook(self, kind: str) -> None:
        self.hooks = [h for h in self.hooks if not (isinstance(h, dict) and h.get("kind") == kind)]

    def validate(self, errors: list[str], p: str = "train") -> None:
        for name in (
            "steps",
            "batch_size",
            "grad_accum",
            "eval_batches",
            "sample_tokens",
            "keep_last",
            "log_every",
            "max_nonfinite",
        ):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v > 0, f"{p}.{name}", v, "an integer > 0")
        for name in ("warmup_steps", "eval_every", "sample_every", "save_every", "schedule_steps"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{name}", v, "an integer >= 0")
        _positive(errors, f"{p}.lr", self.lr)
        for name in ("dist_timeout_s", "dist_init_timeout_s"):
            v = getattr(self, name)
            _check(
                errors,
                isinstance(v, int) and not isinstance(v, bool) and v > 0,
                f"{p}.{name}",
                v,
                "an integer > 0 (seconds)",
            )
        # each kind checks its own options when the trainer builds it (nexus.train.hooks.configured_hooks)
        for i, h in enumerate(self.hooks if isinstance(self.hooks, list) else [self.hooks]):
            _check(
                errors,
                isinstance(h, dict) and isinstance(h.get("kind"), str) and bool(h["kind"]),
                f"{p}.hooks[{i}]",
                h,
                "a mapping with a kind, e.g. {kind: growth, at: 150, spec: {family: width, hidden: 128}}",
            )
        _check(
            errors,
            isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed < 2**32,
            f"{p}.seed",
            self.seed,
            "an integer in [0, 2**32)",
        )  # numpy's seed range
        _check(
            errors,
            isinstance(self.min_lr_ratio, (int, float)) and 0 <= self.min_lr_ratio <= 1,
            f"{p}.min_lr_ratio",
            self.min_lr_ratio,
            "a number in [0, 1]",
        )
        _check(
            errors,
            isinstance(self.decay_fraction, (int, float)) and 0 <= self.decay_fraction <= 1,
            f"{p}.decay_fraction",
            self.decay_fraction,
            "a number in [0, 1]",
        )
        _check(
            errors,
            isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0,
            f"{p}.weight_decay",
            self.weight_decay,
            "a number >= 0",
        )
        if isinstance(self.optimizer, OptimizerOptions):
            self.optimizer.validate(errors, f"{p}.optimizer", None)
        else:
            _check(errors, False, f"{p}.optimizer", self.optimizer, "an optimizer kind or {kind, **options}")
        _check(errors, self.dtype in ("auto", "float32", "bfloat16"), f"{p}.dtype", self.dtype, "auto|float32|bfloat16")
        _check(
            errors,
            self.compile_mode in ("default", "reduce-overhead"),
            f"{p}.compile_mode",
            self.compile_mode,
            "default|reduce-overhead",
        )
        _check(
            errors,
            self.compile or self.compile_mode == "default",
            f"{p}.compile_mode",
            self.compile_mode,
            "default unless train.compile is true (a mode without compiling would do nothing)",
        )
        _check(
            errors,
            isinstance(self.grad_clip, (int, float)) and self.grad_clip >= 0,
            f"{p}.grad_clip",
            self.grad_clip,
            "a number >= 0",
        )
        _check_choices(self, errors, p)  # optimizer, schedule, parallel, log_to: declared by their owners
        _check(
            errors,
            isinstance(self.device, str) and (self.device in ("auto", "cpu") or self.device.startswith("cuda")),
            f"{p}.device",
            self.device,
            "auto|cpu|cuda|cuda:N",
        )


@dataclass
class RunConfig:
    """A whole run: what to build, what to feed it, how to train it, and how it got its shape."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    preset: str = ""  # preset this config came from (informational)
    growth_history: list[dict] = field(default_factory=list)  # growth records, appended by nexus.growth

    def validate(self) -> RunConfig:
        errors: list[str] = []
        self.model.validate(errors, "model")
        self.data.validate(errors, "data")
        self.train.validate(errors, "train")
        if isinstance(self.data.seq_len, int) and isinstance(self.model.max_seq_len, int):
            _check(
                errors,
                self.data.seq_len <= self.model.max_seq_len,
                "data.seq_len",
                self.data.seq_len,
                f"<= model.max_seq_len ({self.model.max_seq_len})",
            )
        if errors:
            raise ConfigError("invalid config: " + "; ".join(errors))
        self.__dict__["_passed"] = self.to_dict()  # not a field: never saved or compared
        return self

    def validated(self) -> RunConfig:
        """This config, validated unless `validate()` already passed it and it has not changed since: the
        front door (cli/train.py) validates a run's config once and the trainer it hands it to does not
        repeat that, while `Trainer(cfg)` with a config built or edited by hand is still checked."""
        return self if self.__dict__.get("_passed") == self.to_dict() else self.validate()

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """A config of the current form (an older one read from a file is upgraded where it is read:
        nexus.config_migration)."""
        return from_dict(cls, d, "")

    def save_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
