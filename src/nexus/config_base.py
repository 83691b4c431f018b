"""How the config dataclasses are declared, checked and parsed (config.py holds the schema itself).

`option(default, reason)` declares a field with its one-line reason; `choice(...)` a setting whose values
the module that implements them declares (`declare_choice`); `KindOptions` is the base of a section whose
`kind` picks a registered entry; `from_dict` / `to_dict` / `coerce` turn mappings into config dataclasses
and back, naming the field of any bad value. Below config.py: nothing here names a field of the schema.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .plugins import import_submodules, load_plugins


def _check(errors: list[str], ok: bool, path: str, value: Any, valid: str) -> None:
    if not ok:
        errors.append(f"{path}={value!r} (valid: {valid})")


def _positive(errors, path, value):
    _check(
        errors,
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
        path,
        value,
        "a finite number > 0",
    )


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
    # what the value does (a schedule's shape object, ...): a setting declared with `implemented=True` refuses a
    # value declared without one, so a name never validates and then runs as something else
    implementation: typing.Any = None


_DECLARED: dict[str, dict[str, Choice]] = {}  # "train.optimizer" -> {value: Choice}


def declare_choice(setting: str, value: str, reason: str, check=None, implementation=None) -> None:
    """Make `value` valid for `setting` ("train.schedule", ...): called at import by the module that
    implements it, as a layer kind declares its options in its own file, so a new schedule, log sink or
    parallelism edits its owner only. A plugin declares its own the same way. `implementation` is what the
    value does (a setting declared `implemented=True` is looked up there and refuses a value without one)."""
    table = _DECLARED.setdefault(setting, {})
    if value in table:
        raise RuntimeError(f"{setting} {value!r} declared twice")
    table[value] = Choice(reason, check, implementation)


def choice(default: str | list, setting: str, declared_in: str, reason: str, implemented: bool = False):
    """A setting whose valid values the module `declared_in` declares (imported by name on the first check:
    the config layer imports no layer above it; that module imports no torch). A package is imported with
    every module in it, so a value declared in a new file of that package needs no import line anywhere.
    implemented: each value must be declared with its implementation (validation refuses one without)."""
    return option(default, reason, setting=setting, declared_in=declared_in, implemented=implemented)


def declared_choices(setting: str, declared_in: str) -> dict[str, Choice]:
    """Every value declared for `setting` (importing its owner module, every module of it when it is a
    package, and the plugins first)."""
    import importlib

    module = importlib.import_module(declared_in)
    if hasattr(module, "__path__") and declared_in not in _SCANNED:
        _SCANNED.add(declared_in)
        import_submodules(declared_in, module.__path__)
    load_plugins()
    return dict(_DECLARED.get(setting, {}))


_SCANNED: set[str] = set()  # packages whose modules declared_choices imported already


def _check_choices(section, errors: list[str], p: str) -> None:
    """Every `choice` field of `section` holds declared values (a list field: each of them)."""
    for f in dataclasses.fields(section):
        if "declared_in" not in f.metadata:
            continue
        v, table = getattr(section, f.name), declared_choices(f.metadata["setting"], f.metadata["declared_in"])
        values = v if isinstance(v, list) else [v]
        if f.metadata.get("implemented"):  # a value declared without its implementation would run as another
            table = {k: c for k, c in table.items() if c.implementation is not None}
        if not all(isinstance(x, str) and x in table for x in values):
            _check(errors, False, f"{p}.{f.name}", v, ("a list of " if isinstance(v, list) else "") + "|".join(table))
            continue
        for x in values:
            check = table[x].check
            if check is not None:
                check(section, errors, p)


def _choices(tp) -> tuple | None:
    """The values a `Literal[...]` annotation (or a list of them) allows, else None."""
    if typing.get_origin(tp) is list:
        (tp,) = typing.get_args(tp) or (Any,)
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None


@dataclass
class KindOptions:
    """A config section whose `kind` picks a registered entry: `{kind: name, **that kind's options}`.

    A kind declares its options, with its parameter count (`params`), in its own torch-free file
    (`nexus/kind_options/<kind>.py`) as a subclass, `class XOptions(AttentionOptions, kind="x")`, which
    registers it; the section's base class is the baseline kind and holds the options
    every kind of the section shares. Parsing a section looks its kind up here; a kind not registered
    yet is searched for by importing the modules of `package` and the installed plugins (by name: the
    config layer depends on no model code). \
Choices are `typing.Literal` annotations, checked by `validate` for every kind;
    `check` adds what a kind needs beyond its own fields."""

    kind: str = option("", "which registered kind this section builds")
    section: typing.ClassVar[str] = ""  # the field of ModelConfig that holds it; a section's base class sets it
    package: typing.ClassVar[str] = "nexus.kind_options"  # imported on a lookup of an unknown kind (no torch)
    registered: typing.ClassVar[dict]  # kind -> options class, one table per section
    kind_name: typing.ClassVar[str] = ""
    # the old spelling `model.<kind>.<option>` (a section per kind, written before the kind owned its options)
    # still addresses this section's options when that kind is selected
    addressed_by_kind: typing.ClassVar[bool] = False
    # the scales this kind's growth pins in model.growth_state so a grown model computes what the model before
    # it did, {name: one-line reason}; only growth writes them, 0 (or absent) = not pinned
    growth_pins: typing.ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, kind: str | None = None, **kw):
        super().__init_subclass__(**kw)
        _claim_growth_pins(cls)
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
            raise AttributeError(
                f"{self.section} kind {self.kind!r} has no option {name!r} "
                f"(valid: {', '.join(n for n in names if n != 'kind')})"
            )
        super().__setattr__(name, value)

    @classmethod
    def base(cls) -> type[KindOptions]:
        """The section's base class (the baseline kind, with the options every kind shares)."""
        return next(b for b in cls.__mro__ if "section" in b.__dict__)

    @classmethod
    def kinds(cls) -> dict[str, type[KindOptions]]:
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
    def options_class(cls, kind, where: str) -> type[KindOptions]:
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
    def make(cls, kind: str, **options) -> KindOptions:
        """The options of `kind` from keyword values, parsed and coerced like a config file's section."""
        return from_dict(
            cls.options_class(kind, f"model.{cls.section}"), {"kind": kind, **options}, f"model.{cls.section}."
        )

    def common(self) -> dict:
        """The values of the options every kind of this section shares (kept across a kind switch)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self.base()) if f.name != "kind"}

    def validate(self, errors: list[str], p: str, model) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            allowed, v = _choices(hints[f.name]), getattr(self, f.name)
            if allowed is None:
                continue
            values = v if isinstance(v, list) else [v]
            _check(
                errors,
                all(x in allowed for x in values),
                f"{p}.{f.name}",
                v,
                ("a subset of " + str(list(allowed))) if isinstance(v, list) else "|".join(map(str, allowed)),
            )
        self.check(errors, p, model)

    def check(self, errors: list[str], p: str, model) -> None:
        """Rules beyond each field's own type and choices (a kind overrides it)."""

    def check_width_growth(self, model, targets: dict[str, int]) -> None:
        """Raise ConfigError for a width growth to `targets` ({axis: new size}, the axes given) that this kind
        cannot serve (growth/width.py asks the kind of every section, naming none)."""

    def pin_sizes(self, model) -> None:
        """Before a hidden-size growth: write explicitly each size this kind derives from d_model, so the
        grown model keeps it."""


_PIN_SECTIONS: dict[str, str] = {}  # growth-pin name -> the section whose kinds declare it


def _claim_growth_pins(cls) -> None:
    """A pin name belongs to one section: kinds of two sections are selected together, and one value read by
    both would pin two different scales. (Kinds of one section may share a name: one is selected at a time.)"""
    for name in cls.__dict__.get("growth_pins", {}):
        owner = _PIN_SECTIONS.setdefault(name, cls.section)
        if owner != cls.section:
            raise RuntimeError(
                f"{cls.__name__} declares growth pin {name!r} for {cls.section}, but {owner} kinds "
                "declare it already (valid: a name of its own)"
            )


def to_dict(obj) -> dict:
    """Plain mappings and lists, each a copy: a snapshot (`RunConfig.validated`) must not follow later edits."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            v = to_dict(v)
        elif isinstance(v, (list, tuple, dict)):
            v = copy.deepcopy(list(v) if isinstance(v, tuple) else v)
        out[f.name] = v
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
