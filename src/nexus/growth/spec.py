"""Typed growth specs: one dataclass per growth family, the union a growth hook's `spec` is parsed into, and the
command-line flags generated from the dataclasses' fields.

A family's spec subclasses `GrowthSpec`, declares each field with `option(default, reason, flag)` and
implements two checks:
  validate()            the spec alone (sizes > 0, known inits, ...): ConfigError naming field, value, valid
  applies_to(model_cfg) the spec against the model it would grow: ConfigError when it cannot apply
Both run before any training step (`nexus train`, the experiments, `GrowthHook.check` when the trainer is
built), so a bad spec of any family fails with exit 2 before step 0, not at the growth step.

`spec_from_dict` is the union parser: the "family" key picks the dataclass. `add_spec_flags` /
`spec_from_flags` give `nexus grow` and `nexus train` one flag per field, with the field's reason as its
help; a flag shared by several families (`--growth-seed`, `--noise-frac`, `--optimizer-state`) is one
option with one spelling.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import ClassVar

from ..config import ConfigError

OPTIMIZER_STATE_POLICIES = ("asymmetric", "copy", "drop", "scaled")


def option(
    default,
    reason: str,
    flag: str | None = None,
    *,
    kind=None,
    metavar: str | None = None,
    choices: tuple | None = None,
    consts: dict | None = None,
):
    """A spec field: its default, its one-line reason (also the flag's help) and its command-line flag.
    kind: the flag's value type (int | float | str); consts: {flag: value} for value-less flags
    (`--lossless` -> "lossless"), which replace the valued flag."""
    return field(
        default=default,
        metadata={
            "reason": reason,
            "flag": flag,
            "kind": kind or str,
            "metavar": metavar,
            "choices": choices,
            "consts": consts,
        },
    )


@dataclass
class GrowthSpec:
    """Fields every family shares."""

    family: ClassVar[str] = ""  # set by register_grower
    triggers: ClassVar[tuple[str, ...]] = ()  # fields whose flags select this family on the command line
    declared_after: ClassVar[str | None] = None  # the field the `declared_options` follow (in help and records)
    # families whose flags may be given beside this family's, as one growth: their spec is held in this spec's
    # field of the same name and the grower applies it (depth carries width: `--depth.* --width.*` in one call)
    carries: ClassVar[tuple[str, ...]] = ()

    optimizer_state: str = option(
        "asymmetric",
        "what the new entries' optimizer state starts from: asymmetric (old "
        "keep theirs, new start at zero) | copy | drop | scaled (asymmetric, and the old "
        "moments of rescaled fan-in tensors scaled like their weights)",
        "--optimizer-state",
        metavar="POLICY",
        choices=OPTIMIZER_STATE_POLICIES,
    )

    @classmethod
    def declared_options(cls) -> list:
        """Options this family takes from declarations made elsewhere (width growth: each MLP kind's inner
        axis), as `option(...)` fields with their names set; they are instance attributes, not dataclass
        fields, so a kind registered by a plugin adds its option without an edit to the family's file."""
        return []

    @classmethod
    def trigger_names(cls) -> tuple[str, ...]:
        """The options whose flags select this family on the command line (`triggers` unless computed)."""
        return cls.triggers

    def validate(self) -> GrowthSpec:
        """Check (and normalize) the fields; ConfigError names the field, the value and what is valid."""
        if self.optimizer_state not in OPTIMIZER_STATE_POLICIES:
            raise ConfigError(
                f"--optimizer-state={self.optimizer_state!r} (valid: {'|'.join(OPTIMIZER_STATE_POLICIES)})"
            )
        return self

    def applies_to(self, model_cfg) -> None:
        """Raise ConfigError when this spec cannot grow a model of `model_cfg` (the one place that says
        which models the family applies to)."""

    def to_dict(self) -> dict:
        """{"family": ..., every field}: what a growth record and a growth hook's `spec` store."""
        return {"family": self.family, **{f.name: getattr(self, f.name, f.default) for f in spec_fields(type(self))}}


@dataclass
class NewEntriesSpec(GrowthSpec):
    """Fields of the families that append units whose new entries may be drawn at random (Nexus-Rank,
    TokenFormer)."""

    noise_frac: float = option(
        0.1,
        "std of noise-initialized entries as a fraction of the pretrained std",
        "--noise-frac",
        kind=float,
        metavar="F",
    )
    seed: int = option(
        None, "seed of the random new entries (default: train.seed)", "--growth-seed", kind=int, metavar="S"
    )

    def validate(self) -> NewEntriesSpec:
        super().validate()
        frac = self.noise_frac
        if not isinstance(frac, (int, float)) or isinstance(frac, bool) or frac <= 0:
            raise ConfigError(f"--noise-frac={frac!r} (valid: a number > 0, e.g. 0.1 for 10% of the pretrained std)")
        self.noise_frac = float(frac)
        check_int(self.seed, "--growth-seed", minimum=0)
        return self

    def generator_seed(self, train_seed: int) -> int:
        return int(train_seed if self.seed is None else self.seed)


def spec_fields(cls: type[GrowthSpec]) -> list:
    """A family's options: its dataclass fields with the options it takes from declarations elsewhere
    placed after the field `declared_after` names (at the end when none)."""
    own = list(fields(cls))
    at = next((i + 1 for i, f in enumerate(own) if f.name == cls.declared_after), len(own))
    return [*own[:at], *cls.declared_options(), *own[at:]]


_SPECS: dict[str, type[GrowthSpec]] = {}


def register_spec(family: str, cls: type[GrowthSpec]) -> None:
    cls.family = family
    _SPECS[family] = cls


def spec_classes() -> dict[str, type[GrowthSpec]]:
    return dict(_SPECS)


def spec_from_dict(d, where: str = "growth spec") -> GrowthSpec:
    """The union parser: a mapping with "family" -> that family's validated spec dataclass. A spec
    dataclass this returned before, unchanged since, is not validated again (a run parses its spec once)."""
    if isinstance(d, GrowthSpec):
        return d if d.__dict__.get("_validated") == d.to_dict() else _validated(d.validate())
    family = d.get("family") if isinstance(d, dict) else None
    if family not in _SPECS:
        raise ConfigError(
            f"{where}={d!r} (valid: a mapping with family one of {', '.join(sorted(_SPECS))}, "
            "e.g. --growth '{family: width, hidden: 192}')"
        )
    cls = _SPECS[family]
    names = [f.name for f in spec_fields(cls)]
    unknown = sorted(set(d) - set(names) - {"family"})
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}={d[unknown[0]]!r} is not a {family} growth option "
            f"(valid: {', '.join(sorted(names))})"
        )
    return _validated(cls(**{k: v for k, v in d.items() if k != "family"}).validate())


def _validated(spec: GrowthSpec) -> GrowthSpec:
    spec.__dict__["_validated"] = spec.to_dict()  # not a field: never saved or compared
    return spec


# ----------------------------------------------------------------------------- command-line flags
def _dest(flag: str) -> str:
    return "growth_flag_" + flag.lstrip("-").replace("-", "_").replace(".", "_")


def _field_dest(f) -> str:
    """The argparse dest of a field: from its flag, or from its first value-less flag."""
    return _dest(f.metadata["flag"] or next(iter(f.metadata["consts"])))


def _flag_fields(cls: type[GrowthSpec]):
    return [f for f in spec_fields(cls) if f.metadata.get("flag") or f.metadata.get("consts")]


def add_spec_flags(parser: argparse.ArgumentParser) -> None:
    """One option per flagged field: the fields every family shares first, then each family's own,
    grouped by family. A flag several families share (`--growth-seed`) is one option, added once; its
    help gives each family's reason when they differ."""
    ordered = [("every family", GrowthSpec)] + [
        (f"{family} ({cls.__doc__.strip().splitlines()[0].rstrip('.')})", cls)
        for family, cls in sorted(_SPECS.items(), key=lambda kv: (kv[0] != "width", kv[0]))
    ]
    base_names = {f.name for f in fields(GrowthSpec)}
    by_flag: dict[str, list] = {}  # flag -> [(family, field)] over every family that has it
    for family, cls in _SPECS.items():
        for f in _flag_fields(cls):
            for flag in [f.metadata["flag"]] if f.metadata["flag"] else list(f.metadata["consts"]):
                by_flag.setdefault(flag, []).append((family, f))
    seen: set[str] = set()
    for title, cls in ordered:
        group = parser.add_argument_group(f"growth: {title}")
        for f in _flag_fields(cls):
            if cls is not GrowthSpec and f.name in base_names:
                continue
            md = f.metadata
            if md["consts"]:
                excl = group.add_mutually_exclusive_group() if len(md["consts"]) > 1 else group
                for flag, value in md["consts"].items():
                    if flag not in seen:
                        seen.add(flag)
                        excl.add_argument(
                            flag,
                            dest=_field_dest(f),
                            action="store_const",
                            const=value,
                            default=None,
                            help=f"{f.name}={value!r}: {md['reason']}",
                        )
                continue
            if md["flag"] in seen:
                continue
            seen.add(md["flag"])
            group.add_argument(
                md["flag"],
                dest=_field_dest(f),
                type=md["kind"],
                default=None,
                metavar=md["metavar"] or f.name.upper(),
                choices=md["choices"],
                help=_help(by_flag.get(md["flag"], [("", f)])),
            )


def _help(users: list) -> str:
    """A flag's help: its field's reason and default, per family when the families differ."""

    def one(f) -> str:
        return f.metadata["reason"] + (f"; default {f.default}" if f.default not in (None, "", 0, False) else "")

    texts: dict[str, list[str]] = {}
    for family, f in users:
        texts.setdefault(one(f), []).append(family)
    if len(texts) == 1:
        return next(iter(texts))
    return "; ".join(f"{'/'.join(fams)}: {text}" for text, fams in texts.items())


def spec_from_flags(args) -> dict | None:
    """The growth spec the command line asks for ({"family": ..., given fields}), None when no family's
    selecting flag was given. Several families, or a family's own flag without it, is a ConfigError."""
    claimed, given_by = [], {}
    for family, cls in _SPECS.items():
        given = {}
        for f in _flag_fields(cls):
            v = getattr(args, _field_dest(f), None)
            if v is not None:
                given[f.name] = v
        given_by[family] = given
        if any(t in given for t in cls.trigger_names()):
            claimed.append(family)
    carried: list[str] = []
    if len(claimed) > 1:
        host = next((f for f in claimed if set(claimed) - {f} <= set(_SPECS[f].carries)), None)
        if host is None:
            combos = [f"{f} with {'/'.join(_SPECS[f].carries)}" for f in sorted(_SPECS) if _SPECS[f].carries]
            raise ConfigError(
                f"several growth families requested ({', '.join(sorted(claimed))}); grow one at a time"
                + (f" (valid: one family, or {'; '.join(combos)})" if combos else "")
            )
        carried = [f for f in claimed if f != host]
        claimed = [host]
    if not claimed:
        stray = [(fam, name) for fam, given in given_by.items() for name in given if not _shared(name, fam)]
        if stray:
            fam, name = stray[0]
            flag = _field_flag(_SPECS[fam], name)
            fams = sorted(_users(flag))  # one family, or a carrier and the families it carries
            want = " or ".join(_field_flag(_SPECS[f], t) for f in fams for t in _SPECS[f].trigger_names())
            raise ConfigError(f"{flag} is a {'/'.join(fams)} growth option, given without {want} (valid: add {want})")
        return None
    family = claimed[0]
    own = {_field_flag(_SPECS[fam], f.name) for fam in [family, *carried] for f in _flag_fields(_SPECS[fam])}
    for fam, given in given_by.items():
        for name in given:
            flag = _field_flag(_SPECS[fam], name)
            if flag not in own:  # another family's option would be silently ignored
                raise ConfigError(
                    f"{flag} is a {fam} growth option, not a {family} one (valid: the {family} options, see --help)"
                )
    return {"family": family, **given_by[family], **{fam: {"family": fam, **given_by[fam]} for fam in carried}}


def _field_flag(cls, name: str) -> str:
    f = next(f for f in spec_fields(cls) if f.name == name)
    return f.metadata["flag"] or "/".join(f.metadata["consts"])


def _shared(name: str, family: str) -> bool:
    """A field whose flag another family (or the base) also has: not evidence of this family. Families one of
    which carries the other (depth carries width) count as one: their common flag (--rewarmup) alone is still
    an option given without the family flags that use it."""
    flag = _field_flag(_SPECS[family], name)
    users = _users(flag)
    carried = {c for u in users for c in _SPECS[u].carries}
    return name in {f.name for f in fields(GrowthSpec)} or len(users - carried) > 1


def _users(flag: str) -> set[str]:
    return {fam for fam, c in _SPECS.items() if any(_field_flag(c, f.name) == flag for f in _flag_fields(c))}


def check_int(value, flag: str, minimum: int = 1, allow_none: bool = True, what: str = "an integer"):
    """An int field (bool excluded) >= minimum; None passes when allow_none."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"{flag}={value!r} (valid: {what} >= {minimum})"
            if minimum != 1
            else f"{flag}={value!r} (valid: {what} > 0)"
        )
    return value


__all__ = [
    "GrowthSpec",
    "NewEntriesSpec",
    "option",
    "register_spec",
    "spec_classes",
    "spec_from_dict",
    "spec_fields",
    "add_spec_flags",
    "spec_from_flags",
    "check_int",
    "OPTIMIZER_STATE_POLICIES",
]
