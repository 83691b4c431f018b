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


from .errors import ConfigError  # re-exported: `from nexus.config import ConfigError` keeps working
from .plugins import import_submodules, load_plugins


def _check(errors: list[str], ok: bool, path: str, value: Any, valid: str) -> None:
    if not ok:
        errors.append(f"{path}={value!r} (valid: {valid})")


def _positive(errors, path, value):
    _check(errors, isinstance(value, (int, float)) and math.isfinite(value) and value > 0, path, value,
           "a finite number > 0")


def option(default, reason: str, **metadata):
    """A config field with its one-line reason (what `nexus config` prints beside it). A mutable
    default (list, dict) is copied per instance."""
    metadata = {"reason": reason, **metadata}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Choice:
    """One value a `choice` setting may take, declared by the module that implements it."""

    reason: str  # what choosing it does (listed by `nexus config`)
    check: typing.Callable | None = None  # check(section, errors, path): rules it adds on the rest of its section


_DECLARED: dict[str, dict[str, Choice]] = {}  # "train.optimizer" -> {value: Choice}


def declare_choice(setting: str, value: str, reason: str, check=None) -> None:
    """Make `value` valid for `setting` ("train.optimizer", ...): called at import by the module that
    implements it, as a layer kind declares its options in its own file, so a new optimizer, schedule,
    log sink or parallelism edits its owner only. A plugin declares its own the same way."""
    table = _DECLARED.setdefault(setting, {})
    if value in table:
        raise RuntimeError(f"{setting} {value!r} declared twice")
    table[value] = Choice(reason, check)


def choice(default: str | list, setting: str, declared_in: str, reason: str):
    """A setting whose valid values the module `declared_in` declares (imported by name on the first check:
    the config layer imports no layer above it; that module imports no torch)."""
    return option(default, reason, setting=setting, declared_in=declared_in)


def declared_choices(setting: str, declared_in: str) -> dict[str, Choice]:
    """Every value declared for `setting` (importing its owner module and the plugins first)."""
    import importlib

    importlib.import_module(declared_in)
    load_plugins()
    return dict(_DECLARED.get(setting, {}))


def _check_choices(section, errors: list[str], p: str) -> None:
    """Every `choice` field of `section` holds declared values (a list field: each of them)."""
    for f in dataclasses.fields(section):
        if "declared_in" not in f.metadata:
            continue
        v, table = getattr(section, f.name), declared_choices(f.metadata["setting"], f.metadata["declared_in"])
        values = v if isinstance(v, list) else [v]
        if not all(isinstance(x, str) and x in table for x in values):
            _check(errors, False, f"{p}.{f.name}", v, ("a list of " if isinstance(v, list) else "") + "|".join(table))
            continue
        for x in values:
            if table[x].check is not None:
                table[x].check(section, errors, p)


def _choices(tp) -> tuple | None:
    """The values a `Literal[...]` annotation (or a list of them) allows, else None."""
    if typing.get_origin(tp) is list:
        (tp,) = typing.get_args(tp) or (Any,)
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None


# ----------------------------------------------------------------------------- model parts
@dataclass
class KindOptions:
    """A config section whose `kind` picks a registered entry: `{kind: name, **that kind's options}`.

    A kind declares its options, with its parameter count (`params`), in its own torch-free file
    (`nexus/kind_options/<kind>.py`) as a subclass, `class XOptions(AttentionOptions, kind="x")`, which
    registers it; the section's base class is the baseline kind and holds the options
    every kind of the section shares. Parsing a section looks its kind up here; a kind not registered
    yet is searched for by importing the modules of `package` and the installed plugins (by name: the
    config layer depends on no model code). Choices are `typing.Literal` annotations, checked by `validate` for every kind;
    `check` adds what a kind needs beyond its own fields."""

    kind: str = option("", "which registered kind this section builds")
    section: typing.ClassVar[str] = ""  # the field of ModelConfig that holds it; a section's base class sets it
    package: typing.ClassVar[str] = "nexus.kind_options"  # imported on a lookup of an unknown kind (no torch)
    registered: typing.ClassVar[dict]  # kind -> options class, one table per section
    kind_name: typing.ClassVar[str] = ""
    # the old spelling `model.<kind>.<option>` (a section per kind, written before the kind owned its options)
    # still addresses this section's options when that kind is selected
    addressed_by_kind: typing.ClassVar[bool] = False

    def __init_subclass__(cls, kind: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if "section" in cls.__dict__:
            cls.registered = {}  # a section's base class: its own table of kinds
        if kind is not None:
            if kind in cls.registered:
                raise RuntimeError(f"{cls.section}.kind {kind!r} registered twice")
            cls.registered[kind] = cls
            cls.kind_name = kind

    def __post_init__(self):
        self.kind = type(self).kind_name

    def __setattr__(self, name: str, value) -> None:
        # an option another kind has would otherwise be set here and read by nothing
        names = [f.name for f in dataclasses.fields(self)]
        if name not in names:
            raise AttributeError(f"{self.section} kind {self.kind!r} has no option {name!r} "
                                 f"(valid: {', '.join(n for n in names if n != 'kind')})")
        super().__setattr__(name, value)

    @classmethod
    def base(cls) -> type["KindOptions"]:
        """The section's base class (the baseline kind, with the options every kind shares)."""
        return next(b for b in cls.__mro__ if "section" in b.__dict__)

    @classmethod
    def kinds(cls) -> dict[str, type["KindOptions"]]:
        """Every registered kind of this section (importing the kinds' package once)."""
        base = cls.base()
        if not getattr(base, "_searched", False):
            base._searched = True
            import importlib

            # the kinds' package by name, as registries find theirs: the config layer imports no layer above it
            import_submodules(base.package, importlib.import_module(base.package).__path__)
            load_plugins()  # a third-party kind declares its options in its plugin module
        return dict(base.registered)

    @classmethod
    def options_class(cls, kind, where: str) -> type["KindOptions"]:
        base = cls.base()
        if not isinstance(kind, str):  # a list or mapping would not even hash: name the field instead
            raise ConfigError(f"{where}.kind={kind!r} (valid: one of {'|'.join(cls.kinds())})")
        if kind in base.registered:
            return base.registered[kind]
        kinds = cls.kinds()
        if kind not in kinds:
            raise ConfigError(f"{where}.kind={kind!r} (valid: {'|'.join(kinds)})")
        return kinds[kind]

    @classmethod
    def make(cls, kind: str, **options) -> "KindOptions":
        """The options of `kind` from keyword values, parsed and coerced like a config file's section."""
        return from_dict(cls.options_class(kind, f"model.{cls.section}"), {"kind": kind, **options},
                         f"model.{cls.section}.")

    def common(self) -> dict:
        """The values of the options every kind of this section shares (kept across a kind switch)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self.base()) if f.name != "kind"}

    def validate(self, errors: list[str], p: str, model: "ModelConfig") -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            allowed, v = _choices(hints[f.name]), getattr(self, f.name)
            if allowed is None:
                continue
            values = v if isinstance(v, list) else [v]
            _check(errors, all(x in allowed for x in values), f"{p}.{f.name}", v,
                   ("a subset of " + str(list(allowed))) if isinstance(v, list) else "|".join(map(str, allowed)))
        self.check(errors, p, model)

    def check(self, errors: list[str], p: str, model: "ModelConfig") -> None:
        """Rules beyond each field's own type and choices (a kind overrides it)."""

    def check_width_growth(self, model: "ModelConfig", targets: dict[str, int]) -> None:
        """Raise ConfigError for a width growth to `targets` ({axis: new size}, the axes given) that this kind
        cannot serve (growth/width.py asks the kind of every section, naming none)."""

    def pin_sizes(self, model: "ModelConfig") -> None:
        """Before a hidden-size growth: write explicitly each size this kind derives from d_model, so the
        grown model keeps it."""


@dataclass
class ArchitectureOptions(KindOptions, kind="transformer"):
    """The model's architecture, `model.arch: {kind, **its options}` (a bare name is its kind). The baseline,
    `transformer`, has no options here: its parts are model.attention, .projection, .mixing and .mlp. Another
    architecture registers its options, and its parameter count, in its own file (nexus/kind_options/)."""

    section: typing.ClassVar[str] = "arch"
    addressed_by_kind: typing.ClassVar[bool] = True  # model.<arch>.<option>: the form before model.arch held options

    def check(self, errors: list[str], p: str, model: "ModelConfig") -> None:
        """The transformer's rule across its parts: mixing g needs gate logits."""
        model.mixing.validate_with_model(errors, f"{p.rsplit('.', 1)[0]}.mixing", model)


@dataclass
class AttentionOptions(KindOptions, kind="standard"):
    """Attention of every layer. The baseline kind, `standard`, is causal GQA attention
    (models/attention.py); other kinds (`higher_order`, ...) register their options in their own files."""

    section: typing.ClassVar[str] = "attention"
    gate: typing.Literal["none", "elementwise", "headwise"] = option(
        "none", "gated attention: o * sigmoid(g) before W_o, per element or per head (every kind takes it)")


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

    def width_axes(self, model: "ModelConfig") -> dict[str, int]:
        """The inner axes width growth may grow in this MLP, with their sizes (growth/width.py)."""
        return {"ffn": model.ffn}

    def set_width_axes(self, model: "ModelConfig", sizes: dict[str, int]) -> None:
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


@dataclass
class ModelConfig:
    """Architecture. The baseline is a Llama-style Transformer++; sub-configs switch mechanisms on."""

    arch: ArchitectureOptions = field(default_factory=ArchitectureOptions)  # {kind: transformer|<registered>, **its options}; a bare name is its kind
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
    loss_chunk_tokens: int = 0  # >0: training head + CE this many tokens at a time, never the full logits (less memory; same loss to fp32 rounding); 0: plain
    attention_bias: bool = False  # bias in q/k/v projections (Qwen2)
    logit_scale: float = 1.0  # constant multiplier on the LM-head logits; SPARKLING hidden growth sets it to the tied head's fan-in factor
    attention: AttentionOptions = field(default_factory=AttentionOptions)  # {kind: standard|<registered>, **its options}
    projection: ProjectionOptions = field(default_factory=ProjectionOptions)  # {kind: linear|<registered>, **its options}
    mixing: MixingConfig = field(default_factory=MixingConfig)
    mlp: MLPOptions = field(default_factory=MLPOptions)  # {kind: dense|<registered>, **its options}
    growth_state: GrowthState = field(default_factory=GrowthState, metadata={"set_by_growth": True})  # scales growth pinned (not a user setting)

    def __setattr__(self, name: str, value) -> None:
        if name == "arch" and isinstance(value, str):  # arch="<kind>": that kind with its default options
            value = ArchitectureOptions.make(value)
        super().__setattr__(name, value)

    @classmethod
    def mechanism_sections(cls) -> list[str]:
        """The sub-configs each of which switches a mechanism of the transformer on, off at its defaults
        (attention, projection, mixing, mlp, and any section added later): not arch, which picks the
        architecture, nor growth_state, which growth sets."""
        return [f.name for f in dataclasses.fields(cls) if f.name != "arch" and not f.metadata.get("set_by_growth")
                and isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory)]

    def kind_sections(self) -> list[KindOptions]:
        """The sections whose `kind` picks a registered entry (arch, attention, projection, mlp)."""
        return [v for v in (getattr(self, f.name) for f in dataclasses.fields(self)) if isinstance(v, KindOptions)]

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
                _check(errors, self.d_model % self.n_heads == 0, f"{p}.d_model", self.d_model,
                       f"a multiple of n_heads ({self.n_heads}), or set {p}.head_dim")
            if isinstance(self.n_kv_heads, int) and self.n_kv_heads > 0:
                _check(errors, self.n_heads % self.n_kv_heads == 0, f"{p}.n_kv_heads", self.n_kv_heads,
                       f"a divisor of n_heads ({self.n_heads})")
        _positive(errors, f"{p}.rope_theta", self.rope_theta)
        _positive(errors, f"{p}.norm_eps", self.norm_eps)
        _check(errors, isinstance(self.init_std, (int, float)) and self.init_std >= 0, f"{p}.init_std", self.init_std, "a number >= 0")
        _check(errors, isinstance(self.z_loss, (int, float)) and self.z_loss >= 0, f"{p}.z_loss", self.z_loss, "a number >= 0")
        _check(errors, isinstance(self.loss_chunk_tokens, int) and not isinstance(self.loss_chunk_tokens, bool)
               and self.loss_chunk_tokens >= 0, f"{p}.loss_chunk_tokens", self.loss_chunk_tokens, "an integer >= 0 (0: off)")
        _positive(errors, f"{p}.logit_scale", self.logit_scale)
        self.attention.validate(errors, f"{p}.attention", self)
        self.projection.validate(errors, f"{p}.projection", self)
        self.growth_state.validate(errors, f"{p}.growth_state")
        self.mixing.validate(errors, f"{p}.mixing")
        self.mlp.validate(errors, f"{p}.mlp", self)
        self.arch.validate(errors, f"{p}.arch", self)  # last: an architecture's rules read the other sections


# ----------------------------------------------------------------------------- data
@dataclass
class DataConfig:
    """Where tokens come from and how they are cut into training sequences."""

    source: str = "embedded"  # embedded | stdlib | a .txt/.jsonl/.parquet file, folder, glob or comma list | a prepared dir | a .bin token file | hf:<dataset>[:<config>] | synthetic:<mqar|khop|induction>
    tokenizer: str = "byte"  # byte | bpe (train on the corpus) | a tokenizer.json / tokenizer.txt or a directory holding one
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
    document_per_file: bool = False  # each .txt/.md file is one document (default: blank lines separate documents)
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
    optimizer: str = choice("adamw", "train.optimizer", "nexus.optim.kinds", "the optimizer (each declared in optim/kinds.py)")
    lr: float = 3e-3  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # final lr as a fraction of the peak
    schedule: str = choice("cosine", "train.schedule", "nexus.optim.schedule", "the LR schedule after linear warmup (each declared in optim/schedule.py)")
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
    dtype: str = "float32"  # float32 | bfloat16 autocast (slower on a CPU without native bf16: benchmarks/README.md)
    compile: bool = False  # torch.compile the model (on a CPU its build takes minutes for a 0-2% faster step)
    compile_mode: str = "default"  # torch.compile mode with compile on: default | reduce-overhead (CUDA graphs; static shapes: fewer kernel launches for small models on a GPU)
    parallel: str = choice("ddp", "train.parallel", "nexus.train.parallelism", "how torchrun ranks share the model (each declared in train/parallelism.py)")
    activation_checkpointing: bool = False  # recompute each block's activations in backward: less memory for ~1/3 more compute
    eval_every: int = 100  # validation every N steps (0 = only at the end)
    eval_batches: int = 8  # micro-batches per validation
    sample_every: int = 0  # print a generated sample every N steps (0 = only at the end)
    sample_tokens: int = 64  # tokens per sample
    sample_prompt: str = "The "  # prompt of the periodic sample
    save_every: int = 100  # step checkpoint every N steps, so a killed run can resume (0 = only at the end)
    keep_last: int = 2  # keep the last k step checkpoints
    log_every: int = 10  # metrics.jsonl / progress-bar refresh interval in steps
    log_to: list[str] = choice(["jsonl"], "train.log_to", "nexus.train.loggers", "metric sinks (metrics.jsonl is always written; each declared in train/loggers.py)")
    wandb_project: str = "nexus"  # W&B project when log_to has wandb (WANDB_MODE=offline works without an account)
    out_dir: str = "runs/default"  # run directory (metrics.jsonl, checkpoints)
    hooks: list[dict] = field(default_factory=list)  # trainer hooks this run turns on, each {kind: <hook kind>, **its options}, e.g. {kind: growth, at: 150, spec: {family: width, hidden: 128}}
    dist_timeout_s: int = 60  # torchrun, after the first step: a collective waiting this long (a stopped, hung or dead rank) ends every rank
    dist_init_timeout_s: int = 600  # torchrun, through set-up, compilation, the first step and each checkpoint save: slow but healthy there

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
        for name in ("steps", "batch_size", "grad_accum", "eval_batches", "sample_tokens", "keep_last", "log_every", "max_nonfinite"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v > 0, f"{p}.{name}", v, "an integer > 0")
        for name in ("warmup_steps", "eval_every", "sample_every", "save_every", "schedule_steps"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and v >= 0, f"{p}.{name}", v, "an integer >= 0")
        _positive(errors, f"{p}.lr", self.lr)
        for name in ("dist_timeout_s", "dist_init_timeout_s"):
            v = getattr(self, name)
            _check(errors, isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{p}.{name}", v,
                   "an integer > 0 (seconds)")
        # each kind checks its own options when the trainer builds it (nexus.train.hooks.configured_hooks)
        for i, h in enumerate(self.hooks if isinstance(self.hooks, list) else [self.hooks]):
            _check(errors, isinstance(h, dict) and isinstance(h.get("kind"), str) and bool(h["kind"]), f"{p}.hooks[{i}]",
                   h, "a mapping with a kind, e.g. {kind: growth, at: 150, spec: {family: width, hidden: 128}}")
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
        _check(errors, self.compile_mode in ("default", "reduce-overhead"), f"{p}.compile_mode", self.compile_mode,
               "default|reduce-overhead")
        _check(errors, self.compile or self.compile_mode == "default", f"{p}.compile_mode", self.compile_mode,
               "default unless train.compile is true (a mode without compiling would do nothing)")
        _check(errors, isinstance(self.grad_clip, (int, float)) and self.grad_clip >= 0, f"{p}.grad_clip", self.grad_clip, "a number >= 0")
        _check_choices(self, errors, p)  # optimizer, schedule, parallel, log_to: declared by their owners
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
        self.__dict__["_passed"] = self.to_dict()  # not a field: never saved or compared
        return self

    def validated(self) -> "RunConfig":
        """This config, validated unless `validate()` already passed it and it has not changed since: the
        front door (cli/train.py) validates a run's config once and the trainer it hands it to does not
        repeat that, while `Trainer(cfg)` with a config built or edited by hand is still checked."""
        return self if self.__dict__.get("_passed") == self.to_dict() else self.validate()

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        """A config of the current form (an older one read from a file is upgraded where it is read:
        nexus.config_migration)."""
        return from_dict(cls, d, "")

    def save_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# ----------------------------------------------------------------------------- parsing
def to_dict(obj) -> dict:
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = to_dict(v) if dataclasses.is_dataclass(v) else (list(v) if isinstance(v, tuple) else v)
    return out


def coerce(value: Any, tp: Any, path: str) -> Any:
    """Coerce a YAML/CLI value to a field's declared type, or raise a ConfigError naming the field."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{path}={value!r} (valid: {'|'.join(map(str, allowed))})")
        return value
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
        return [coerce(v, inner, f"{path}[{i}]") if inner is not Any else v for i, v in enumerate(value)]
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
        if isinstance(tp, type) and issubclass(tp, KindOptions) and "section" in tp.__dict__:
            v = v or {}
            if isinstance(v, str):  # a bare name is the kind with its default options
                v = {"kind": v}
            if not isinstance(v, dict):
                raise ConfigError(f"{prefix}{k}={v!r} (valid: a kind name or a mapping {{kind: ..., options}})")
            kind_cls = tp.options_class(v.get("kind", tp.kind_name), f"{prefix}{k}")
            kwargs[k] = from_dict(kind_cls, v, f"{prefix}{k}.")
        elif dataclasses.is_dataclass(tp):
            kwargs[k] = from_dict(tp, v or {}, f"{prefix}{k}.")
        else:
            kwargs[k] = coerce(v, tp, prefix + k)
    return cls(**kwargs)
