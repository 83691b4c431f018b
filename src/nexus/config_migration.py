"""Configs written by earlier versions of nexus, upgraded to the current form where a file is read.

A config file (`--config`, a preset YAML), a checkpoint's config.json and a saved experiment plan are read
through `read_config_file` / `saved_run_config`; each upgrades the mapping once, before it is parsed
(`RunConfig.from_dict` parses the current form only). A value an upgrade drops that was not its default
(it had no effect) is named in one line on stderr.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import typing
from pathlib import Path

import yaml

from .config import KindOptions, ModelConfig, OptimizerOptions, ProjectionOptions, RunConfig
from .errors import ConfigError

# Every kind's growth pins, once model.projection.<name>, then all four always in model.growth_state (0 = not
# pinned); now model.growth_state holds only the pins a growth wrote, each declared by a selected kind.
LEGACY_GROWTH_STATE = ("frozen_n", "ffn_frozen_n", "frozen_m", "frozen_a")
# Before each kind owned its options, model.attention and model.projection held every kind's fields.
LEGACY_ATTENTION = {"order": 1, "ho_targets": "qk", "ho_form": "projected", "ho_shared": True, "ho_gate": False}
LEGACY_PROJECTION = {
    "targets": ["q", "k", "v"],
    "rank_m": 0,
    "rank_a": 0,
    "form": "paper",
    "relax_order": False,
    "param_tokens": 0,
    "pattention_act": "gelu_l2",
    "freeze_scale": True,
    "ffn_param_tokens": 0,
}
# Before the MLP was a kind, model.moe held the experts' options; n_experts 0 meant the dense MLP.
LEGACY_MOE = {"n_experts": 0, "top_k": 2, "expert_hidden": 0, "lb_loss_coef": 0.01, "router_z_coef": 0.001}


def upgrade(d):
    """Configs (and checkpoints) written by earlier versions, to the current form:
    model.attention without a kind -> {kind: higher_order when order > 1, else standard, **its options};
    model.projection holding every kind's fields -> {kind, **that kind's own fields};
    model.projection.frozen_* -> model.growth_state.*, which keeps only the set (non-0) pins the selected
    kinds declare; model.moe -> model.mlp {kind: moe, **its options},
    or {kind: dense} when it had no experts; model.arch: <name> beside model.<name>: {options} -> model.arch
    {kind, **options}; train.grow_at / train.growth -> a train.hooks growth entry; train.betas / train.eps ->
    train.optimizer {kind, betas, eps}; train.muon_* -> the muon kind's own options (named in one line). A dropped
    value that was not its default (it had no effect) is named in one line on stderr."""
    if not isinstance(d, dict):
        return d
    d = copy.deepcopy(d)
    _upgrade_train_growth(d)
    _move_optimizer_options(d)
    _move_muon_options(d)
    model = d.get("model")
    if not isinstance(model, dict):
        return d
    attn = model.get("attention")
    if isinstance(attn, dict) and "kind" not in attn:
        order = attn.get("order", 1)
        if not (isinstance(order, int) and not isinstance(order, bool) and order > 1):
            model["attention"] = {
                "kind": "standard",
                **_keep(attn, {"gate"}, "model.attention", "order 1 is standard attention"),
            }
        else:
            model["attention"] = {"kind": "higher_order", **attn}
    proj = model.get("projection")
    if isinstance(proj, dict) and set(LEGACY_PROJECTION) <= set(proj):
        kind = proj.get("kind", "linear")
        cls = ProjectionOptions.registered.get(kind) or ProjectionOptions.kinds().get(kind)
        own = {f.name for f in dataclasses.fields(cls)} if cls is not None else set(proj)
        model["projection"] = _keep(
            proj, own | set(LEGACY_GROWTH_STATE), "model.projection", f"not an option of projection kind {kind!r}"
        )
    if isinstance(model.get("projection"), dict) and any(k in model["projection"] for k in LEGACY_GROWTH_STATE):
        _move_growth_state(model)
    if isinstance(model.get("moe"), dict):
        _move_moe(model)
    _move_kind_sections(model)
    if isinstance(model.get("growth_state"), dict):
        _drop_unset_pins(model)
    return d


def _move_kind_sections(model: dict) -> None:
    """Written before a section's kinds owned their options: `model.<kind>: {options}` beside
    `model.<section>: <kind>` (model.arch: <kind>, model.<kind>: {options}) -> model.<section>:
    {kind, **options}. The sections of kinds not selected had no effect: dropped, a non-default value named
    in one line on stderr."""
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    stray = [k for k in model if k not in names and isinstance(model[k], dict)]
    if not stray:
        return
    hints = typing.get_type_hints(ModelConfig)
    for section, tp in hints.items():
        if not (isinstance(tp, type) and issubclass(tp, KindOptions) and tp.addressed_by_kind):
            continue
        if section not in model:  # a partial config file: its model.<kind>.<option> apply as overrides do
            continue
        kinds = tp.kinds()
        chosen = model.get(section, tp.kind_name)
        chosen = chosen if isinstance(chosen, dict) else {"kind": chosen}
        for k in [k for k in stray if k in kinds]:
            options = model.pop(k)
            if k == chosen.get("kind", tp.kind_name):
                chosen = {**options, **chosen}
                continue
            defaults = dataclasses.asdict(kinds[k]())
            for name, v in options.items():
                if name in defaults and v != defaults[name]:
                    print(
                        f"config: dropped model.{k}.{name}={v!r} from an old config (model.{section} is "
                        f"{chosen.get('kind', tp.kind_name)!r}; it had no effect)",
                        file=sys.stderr,
                    )
        model[section] = {"kind": chosen.pop("kind", tp.kind_name), **chosen}


def _move_moe(model: dict) -> None:
    """model.moe (written before the MLP was a kind) -> model.mlp."""
    if "mlp" in model:
        raise ConfigError(
            "model.moe and model.mlp given together (valid: model.mlp alone; model.moe is the "
            "old form of model.mlp: {kind: moe, n_experts: N, ...})"
        )
    moe = model.pop("moe")
    n = moe.get("n_experts", 0)
    if isinstance(n, int) and not isinstance(n, bool) and n == 0:
        model["mlp"] = {"kind": "dense", **_keep(moe, set(), "model.moe", "no experts: the dense MLP", LEGACY_MOE)}
    else:  # a bad n_experts is refused by the moe kind's own check, naming model.mlp.n_experts
        model["mlp"] = {"kind": "moe", **moe}


def _keep(section: dict, names: set, where: str, why: str, legacy: dict | None = None) -> dict:
    """`section` without the `legacy` fields (default: the old attention and projection ones) outside `names`;
    one stderr line for each non-default one."""
    legacy = legacy if legacy is not None else {**LEGACY_ATTENTION, **LEGACY_PROJECTION}
    for k, v in section.items():
        if k not in names and k != "kind" and k in legacy and v != legacy[k]:
            print(f"config: dropped {where}.{k}={v!r} from an old config ({why}; it had no effect)", file=sys.stderr)
    return {k: v for k, v in section.items() if k in names or k == "kind" or k not in legacy}


def _move_growth_state(model: dict) -> None:
    """A config written before model.growth_state existed: model.projection.frozen_* -> model.growth_state.*."""
    proj = model["projection"]
    state = model.setdefault("growth_state", {}) or {}
    for k in LEGACY_GROWTH_STATE:
        if k in proj:
            state.setdefault(k, proj.pop(k))
    model["growth_state"] = state


def _drop_unset_pins(model: dict) -> None:
    """The old model.growth_state held all four pins whatever the kinds: a 0 one (not pinned) is dropped, and
    one no selected kind declares (no module read it) is dropped too, named in one line on stderr when set.
    Any other name is left for validation to refuse."""
    state, declared = model["growth_state"], _declared_pins(model)
    for name in [k for k in LEGACY_GROWTH_STATE if k in state]:
        v = state[name]
        if v == 0 and not isinstance(v, bool):
            del state[name]
        elif declared is not None and name not in declared:
            print(
                f"config: dropped model.growth_state.{name}={state.pop(name)!r} from an old config (no selected "
                "kind reads it; it had no effect)",
                file=sys.stderr,
            )


def _declared_pins(model: dict) -> set[str] | None:
    """The growth pins the kinds `model` selects declare (None: a kind is not known; parsing will name it)."""
    names: set[str] = set()
    for section, tp in typing.get_type_hints(ModelConfig).items():
        if not (isinstance(tp, type) and issubclass(tp, KindOptions)):
            continue
        chosen = model.get(section) or tp.kind_name
        kind = chosen.get("kind", tp.kind_name) if isinstance(chosen, dict) else chosen
        cls = tp.kinds().get(kind) if isinstance(kind, str) else None
        if cls is None:
            return None
        names |= set(cls.growth_pins)
    return names


def _upgrade_train_growth(d: dict) -> None:
    """Written before growth was a configured hook: train.grow_at / train.growth -> a train.hooks entry
    {kind: growth, at, spec} (none when both were empty: no growth)."""
    train = d.get("train")
    if not isinstance(train, dict) or not ({"grow_at", "growth"} & set(train)):
        return
    at, spec = train.pop("grow_at", 0), train.pop("growth", None)
    if at or spec:
        hooks = train.setdefault("hooks", [])
        if isinstance(hooks, list) and not any(isinstance(h, dict) and h.get("kind") == "growth" for h in hooks):
            hooks.append({"kind": "growth", "at": at, "spec": spec or {}})


# train fields that were AdamW's (and Muon's AdamW half's) before each optimizer kind owned its options
LEGACY_OPTIMIZER_FIELDS = ("betas", "eps")


def _move_optimizer_options(d: dict) -> None:
    """Written before each optimizer kind owned its options: train.betas / train.eps (AdamW's, read by adamw and
    by muon's AdamW half) -> train.optimizer: {kind, betas, eps}, so a config that set them means what it meant.
    A bare train.optimizer name becomes {kind: name}; without one (a partial file) the options go onto the kind
    the file is merged onto."""
    train = d.get("train")
    if not isinstance(train, dict) or not any(k in train for k in LEGACY_OPTIMIZER_FIELDS):
        return
    opt = train.get("optimizer")
    opt = {"kind": opt} if isinstance(opt, str) else dict(opt) if isinstance(opt, dict) else {}
    for k in LEGACY_OPTIMIZER_FIELDS:
        if k in train:
            opt.setdefault(k, train.pop(k))
    train["optimizer"] = opt


# train fields that were Muon's own before the muon kind owned its options (issue 49): the old name -> the muon
# kind's option (each named as the Muon param-group key it sets, optim/kinds/muon.py)
LEGACY_MUON_FIELDS = {
    "muon_lr": "lr",
    "muon_wd": "weight_decay",
    "muon_momentum": "momentum",
    "muon_ns": "ns_method",
    "muon_ns_steps": "ns_steps",
}
MUON_KIND = "muon"


def muon_default(old: str):
    """The default of the muon kind's option that the old train field `old` (`muon_lr`) became."""
    return getattr(OptimizerOptions.options_class(MUON_KIND, "train.optimizer")(), LEGACY_MUON_FIELDS[old])


def dropped_muon_field(old: str, value, kind) -> None:
    """An old train.muon_* beside an optimizer kind that is not muon read by nothing: named in one line on stderr
    when it was not its default."""
    if value != muon_default(old):
        print(
            f"config: dropped train.{old}={value!r} from an old config (train.optimizer is {kind!r}, not muon; it "
            "had no effect)",
            file=sys.stderr,
        )


def _move_muon_options(d: dict, unnamed_kind: str | None = None) -> None:
    """Written before the muon kind owned its options: train.muon_lr / muon_wd / muon_momentum / muon_ns /
    muon_ns_steps -> train.optimizer: {kind: muon, lr, weight_decay, momentum, ns_method, ns_steps}, the move named
    in one line on stderr; beside another kind they had no effect: dropped (a non-default one named). An old and a
    new name of one option given with different values are refused in one line. A mapping that names no kind (a
    partial config file; `unnamed_kind` None) keeps them for its merge, which knows the kind it merges onto
    (config_overrides.set_field); a whole config without one has `unnamed_kind`, the default kind."""
    train = d.get("train")
    if not isinstance(train, dict) or not any(k in train for k in LEGACY_MUON_FIELDS):
        return
    opt = train.get("optimizer")
    if not (opt is None or isinstance(opt, (str, dict))):  # no kind at all: parsing names train.optimizer
        for k in LEGACY_MUON_FIELDS:
            train.pop(k, None)
        return
    kind = opt if isinstance(opt, str) else opt.get("kind") if isinstance(opt, dict) else None
    kind = kind if kind is not None else unnamed_kind
    if kind is None:
        return
    old = {k: train.pop(k) for k in LEGACY_MUON_FIELDS if k in train}
    if kind != MUON_KIND:
        for k, v in old.items():
            dropped_muon_field(k, v, kind)
        return
    opt = dict(opt) if isinstance(opt, dict) else {"kind": kind}
    for k, v in old.items():
        new = LEGACY_MUON_FIELDS[k]
        if new in opt and opt[new] != v:
            raise ConfigError(
                f"train.{k}={v!r} and train.optimizer.{new}={opt[new]!r} given together (train.{k} is the old name "
                f"of train.optimizer.{new}; valid: train.optimizer.{new} alone)"
            )
        opt[new] = v
    train["optimizer"] = opt
    print(
        f"config: moved an old config's train.{', '.join(f'{k}={v!r}' for k, v in old.items())} into "
        f"train.optimizer as {', '.join(LEGACY_MUON_FIELDS[k] for k in old)} (the muon kind's own options, issue 49)",
        file=sys.stderr,
    )


def _whole(d):
    """A whole config (not merged onto another): an old train.muon_* beside no train.optimizer was beside the
    default kind."""
    if isinstance(d, dict):
        _move_muon_options(d, OptimizerOptions.kind_name)
    return d


# Fields whose default changed: a whole config nexus saved before the change that lacks one ran with the old
# default, so it is read with that, not today's. (A config file a user writes is partial: read_config_file
# gives it today's defaults.) Today every saved config holds every field, so these fill only older ones.
SAVED_OLD_DEFAULTS = {("train", "dtype"): "float32"}  # issue 51: train.dtype's default became auto


def _old_defaults(d: dict) -> dict:
    for (section, name), old in SAVED_OLD_DEFAULTS.items():
        sec = d.get(section) if isinstance(d, dict) else None
        if isinstance(sec, dict) and name not in sec:
            sec[name] = old
    return d


def saved_run_config(d: dict) -> RunConfig:
    """A RunConfig from a mapping nexus saved (a checkpoint's config.json, an experiment plan), of any version: a
    field it lacks takes its default, or the default of its day where that changed since (SAVED_OLD_DEFAULTS)."""
    return RunConfig.from_dict(_old_defaults(_whole(upgrade(d))))


def read_config_file(path: str | Path, flag: str = "--config") -> dict:
    """A config YAML file as its (possibly partial) mapping; `flag` names the option in errors."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{flag}={str(path)!r} (valid: an existing YAML file)")
    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag}={str(path)!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    except UnicodeDecodeError as e:  # a binary file (a checkpoint, an archive) named by mistake
        raise ConfigError(
            f"{flag}={str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason}) (valid: a YAML "
            "mapping with model/data/train sections)"
        ) from None
    if not isinstance(d, dict):
        raise ConfigError(f"{flag}={str(path)!r} (valid: a YAML mapping with model/data/train sections)")
    return upgrade(d)


def load_config_file(path: str | Path, flag: str = "--config") -> RunConfig:
    """A whole config YAML file as a RunConfig (defaults for the fields it leaves out)."""
    return RunConfig.from_dict(_whole(read_config_file(path, flag)))
