"""growth/spec.py in-process: the flags `add_spec_flags` generates from the spec fields, the family
`spec_from_flags` picks (and its refusals), the union parser's refusals, `check_int`'s bounds and the
fields every family shares. The contract is spec.py's docstring: one option per flagged field with the
field's reason (and default) as its help, a flag several families share is one option, a family's own
flag without its selecting flag or beside another family's is refused."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from nexus.config import ConfigError
from nexus.growth import spec as S
from nexus.growth.nexus_rank_growth import NexusRankSpec
from nexus.growth.registry import GROWERS
from nexus.growth.retrofit import RetrofitSpec
from nexus.growth.tokenformer_growth import TokenFormerSpec
from nexus.growth.width import WidthSpec

GROWERS.load()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grow", add_help=False)
    S.add_spec_flags(p)
    return p


def _flags(argv: list[str]):
    return S.spec_from_flags(_parser().parse_args(argv))


def _words(text: str) -> str:
    # argparse wraps help lines, also after a hyphen ("in-" / "weights"): words, with such breaks rejoined
    return " ".join(text.split()).replace("- ", "-")


def test_no_growth_flag_asks_for_no_spec_and_every_flag_defaults_to_none():
    args = _parser().parse_args([])
    assert S.spec_from_flags(args) is None
    assert S.spec_from_flags(argparse.Namespace()) is None  # a command whose parser has no growth flags
    assert vars(args) and all(v is None for v in vars(args).values())
    # a flag every family has, or several share, selects nothing on its own
    for argv in (["--optimizer-state", "drop"], ["--growth-seed", "3"], ["--noise-frac", "0.2"]):
        assert _flags(argv) is None, argv


def test_each_family_is_selected_by_its_own_flag_with_typed_values():
    w = _flags(
        [
            "--width.hidden",
            "96",
            "--width.ffn",
            "384",
            "--perturb",
            "0.25",
            "--init",
            "random,copy",
            "--growth-seed",
            "7",
            "--optimizer-state",
            "copy",
        ]
    )
    assert w == {
        "family": "width",
        "hidden": 96,
        "ffn": 384,
        "perturb": 0.25,
        "init": "random,copy",
        "seed": 7,
        "optimizer_state": "copy",
    }
    assert type(w["hidden"]) is int and type(w["perturb"]) is float and type(w["seed"]) is int
    assert _flags(["--width.expert_inner", "64"]) == {"family": "width", "expert_inner": 64}
    n = _flags(["--delta-a", "4", "--noise-frac", "0.5", "--rank-init", "noise", "--growth-seed", "2"])
    assert n == {"family": "nexus_rank", "delta_a": 4, "noise_frac": 0.5, "init": "noise", "seed": 2}
    assert type(n["noise_frac"]) is float and type(n["delta_a"]) is int
    assert _flags(["--delta-m", "8"]) == {"family": "nexus_rank", "delta_m": 8}
    t = _flags(["--add-ffn-tokens", "8", "--token-init", "zero", "--noise-frac", "0.3"])
    assert t == {"family": "tokenformer", "add_ffn_tokens": 8, "init": "zero", "noise_frac": 0.3}
    assert _flags(["--add-tokens", "2"]) == {"family": "tokenformer", "add_tokens": 2}


def test_value_less_flags_store_their_constant():
    r = _flags(
        [
            "--retrofit",
            "higher-order",
            "--order",
            "3",
            "--lossless",
            "--ho-separate",
            "--ho-targets",
            "qkv",
            "--ho-form",
            "self",
            "--growth-seed",
            "0",
        ]
    )
    assert r == {
        "family": "retrofit",
        "kind": "higher-order",
        "order": 3,
        "mode": "lossless",
        "shared": False,
        "targets": "qkv",
        "form": "self",
        "seed": 0,
    }
    assert _flags(["--retrofit", "higher-order", "--ho-shared"]) == {
        "family": "retrofit",
        "kind": "higher-order",
        "shared": True,
    }
    assert _flags(["--retrofit", "higher-order"]) == {"family": "retrofit", "kind": "higher-order"}
    with pytest.raises(SystemExit):  # --ho-shared and --ho-separate exclude each other
        _parser().parse_args(["--retrofit", "higher-order", "--ho-shared", "--ho-separate"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--optimizer-state", "keep"],
        ["--rank-init", "warm"],
        ["--token-init", "x"],
        ["--retrofit", "lower-order"],
        ["--width.hidden", "x"],
        ["--noise-frac", "x"],
        ["--lossless", "1"],
    ],
)
def test_argparse_refuses_a_value_outside_the_fields_choices_or_type(argv, capsys):
    with pytest.raises(SystemExit) as e:
        _parser().parse_args(argv)
    assert e.value.code == 2


def test_several_families_or_a_stray_family_flag_is_one_config_error():
    with pytest.raises(ConfigError, match=r"several growth families requested \(nexus_rank, width\)"):
        _flags(["--width.hidden", "8", "--delta-m", "4"])
    cases = [  # argv, the whole message
        (
            ["--perturb", "0.1"],
            "--perturb is a width growth option, given without --width.hidden or --width.ffn or "
            "--width.expert_inner (valid: add --width.hidden or --width.ffn or --width.expert_inner)",
        ),
        (["--lossless"], "--lossless is a retrofit growth option, given without --retrofit (valid: add --retrofit)"),
        (["--ho-separate"], "--ho-shared/--ho-separate is a retrofit growth option, given without --retrofit"),
        (["--cut", "out"], "--cut is a nexus_rank growth option, given without --delta-m or --delta-a"),
        (
            ["--width.hidden", "8", "--noise-frac", "0.2"],
            "--noise-frac is a nexus_rank growth option, not a width one (valid: the width options, see --help)",
        ),
        (
            ["--retrofit", "higher-order", "--token-init", "zero"],
            "--token-init is a tokenformer growth option, not a retrofit one",
        ),
        (["--add-tokens", "4", "--lossless"], "--lossless is a retrofit growth option, not a tokenformer one"),
    ]
    for argv, message in cases:
        with pytest.raises(ConfigError) as e:
            _flags(argv)
        assert str(e.value).startswith(message), (argv, str(e.value))


def test_help_groups_every_flag_once_under_its_family_with_its_reason_and_default(builtin_growth_families):
    text = _words(_parser().format_help())
    # every registered family has its section (the built-ins among them): width first, the others by name
    families = sorted(S.spec_classes())
    assert {"width", "nexus_rank", "retrofit", "tokenformer"} <= set(families)
    titles = ["growth: every family:", "growth: width ("] + [f"growth: {f} (" for f in families if f != "width"]
    at = [text.index(t) for t in titles]
    assert at == sorted(at), at  # shared fields first, then width, then the others by name
    assert "growth: retrofit (Nexus higher-order attention retrofit of a standard-attention Transformer)" in text
    assert "growth: width (" + _words(WidthSpec.__doc__).split(".")[0] + ")" in text
    section = {t: text[a:b] for t, a, b in zip(titles, at, at[1:] + [len(text)])}
    assert "--optimizer-state POLICY" in section["growth: every family:"]
    assert "--growth-seed S" in section["growth: width ("]  # the first family that has it, not again later
    assert "--growth-seed" not in section["growth: retrofit ("]
    assert (
        "--noise-frac F" in section["growth: nexus_rank ("] and "--noise-frac" not in section["growth: tokenformer ("]
    )
    assert (
        "--order M" in text and "--rank-init INIT" in text and "--retrofit KIND" in text
    )  # metavar or the field's name
    assert "--width.hidden N" in text and "--rewarmup RHO,TAU" in text
    # the field's reason, its default when it has one worth saying (not None, "", 0, False)
    assert "--order M higher-order attention order m (>= 2); default 2" in text
    assert "--width.hidden N " + _words(_reason(WidthSpec, "hidden")) + " --width.ffn" in text  # default 0: unsaid
    assert "--lossless mode='lossless': " + _words(_reason(RetrofitSpec, "mode")) in text
    assert "--ho-separate shared=False: " in text and "--ho-shared shared=True: " in text
    assert "--noise-frac F " + _words(_reason(NexusRankSpec, "noise_frac")) + "; default 0.1 " in text
    # --growth-seed: one option whose help gives each family's reason (and default)
    width = section["growth: width ("]
    seed_help = width[width.index("--growth-seed S") + len("--growth-seed S ") :]
    per_reason: dict[str, list[str]] = {}  # families that share a reason are named together
    for fam in families:
        if "seed" in {f.name for f in fields(S.spec_classes()[fam])}:
            per_reason.setdefault(_reason(S.spec_classes()[fam], "seed"), []).append(fam)
    assert ["nexus_rank", "tokenformer"] in per_reason.values()  # the built-ins' shared reason
    for reason, fams in per_reason.items():
        assert f"{'/'.join(fams)}: {_words(reason)}" in seed_help, (fams, seed_help)


def _reason(cls, name: str) -> str:
    return next(f for f in fields(cls) if f.name == name).metadata["reason"]


def test_the_union_parser_refuses_what_is_not_a_spec_and_names_the_field(builtin_growth_families):
    with pytest.raises(
        ConfigError,
        match=r"^growth spec=\['width'\] \(valid: a mapping with family one of depth, "
        r"nexus_rank, retrofit, tokenformer, width",
    ):
        S.spec_from_dict(["width"])
    with pytest.raises(ConfigError, match=r"^hook\.spec=\{'hidden': 8\}"):
        S.spec_from_dict({"hidden": 8}, "hook.spec")
    with pytest.raises(
        ConfigError,
        match=r"^growth spec\.aaa=1 is not a width growth option \(valid: expert_inner, "
        r"ffn, hidden, init, optimizer_state, perturb, preserve, rewarmup",
    ):
        S.spec_from_dict({"family": "width", "hidden": 8, "zzz": 2, "aaa": 1})
    spec = WidthSpec(hidden=8)
    assert S.spec_from_dict(spec) is spec
    with pytest.raises(ConfigError, match="--optimizer-state='keep'"):  # a dataclass is validated too
        S.spec_from_dict(WidthSpec(hidden=8, optimizer_state="keep"))
    assert S.spec_from_dict({"family": "width", "hidden": 8}).to_dict()["family"] == "width"


@pytest.mark.parametrize("policy", S.OPTIMIZER_STATE_POLICIES)
def test_every_optimizer_state_policy_is_accepted(policy):
    assert S.spec_from_dict({"family": "retrofit", "optimizer_state": policy}).optimizer_state == policy


def test_new_entries_fields_are_normalized_and_bounded():
    s = S.spec_from_dict({"family": "tokenformer", "add_tokens": 4, "noise_frac": 2})
    assert s.noise_frac == 2.0 and type(s.noise_frac) is float and s.seed is None
    assert s.generator_seed(11) == 11 and type(s.generator_seed(11)) is int
    s = S.spec_from_dict({"family": "nexus_rank", "delta_m": 4, "seed": 0, "noise_frac": 1e-9})
    assert s.generator_seed(11) == 0 and s.noise_frac == 1e-9
    for bad in (0, -0.5, True, "0.1", None):
        with pytest.raises(ConfigError, match=r"--noise-frac=.* \(valid: a number > 0"):
            S.spec_from_dict({"family": "tokenformer", "add_tokens": 4, "noise_frac": bad})
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match=r"--growth-seed=.* \(valid: an integer >= 0\)"):
            S.spec_from_dict({"family": "nexus_rank", "delta_m": 4, "seed": bad})


def test_check_int_bounds():
    assert S.check_int(None, "--n") is None
    assert S.check_int(1, "--n") == 1 and S.check_int(0, "--n", minimum=0) == 0
    with pytest.raises(ConfigError, match=r"^--n=None \(valid: an integer > 0\)$"):
        S.check_int(None, "--n", allow_none=False)
    with pytest.raises(ConfigError, match=r"^--n=0 \(valid: an integer > 0\)$"):
        S.check_int(0, "--n")
    with pytest.raises(ConfigError, match=r"^--n=True \(valid: a count > 0\)$"):
        S.check_int(True, "--n", what="a count")
    with pytest.raises(ConfigError, match=r"^--n=-1 \(valid: an integer >= 0\)$"):
        S.check_int(-1, "--n", minimum=0)
    with pytest.raises(ConfigError, match=r"^--n=2 \(valid: an integer >= 3\)$"):
        S.check_int(2, "--n", minimum=3)
    with pytest.raises(ConfigError, match=r"^--n=2.0 "):
        S.check_int(2.0, "--n")


def test_a_spec_records_its_family_and_every_field_and_the_registry_is_a_copy(builtin_growth_families):
    d = RetrofitSpec(order=3).to_dict()
    assert d == {
        "family": "retrofit",
        "optimizer_state": "asymmetric",
        "kind": "higher-order",
        "order": 3,
        "mode": "paper",
        "targets": None,
        "form": None,
        "shared": None,
        "seed": 0,
    }
    classes = S.spec_classes()
    assert {
        "width": WidthSpec,
        "nexus_rank": NexusRankSpec,
        "tokenformer": TokenFormerSpec,
        "retrofit": RetrofitSpec,
    }.items() <= classes.items()  # the built-ins, among whatever is registered
    classes.pop("width")
    assert "width" in S.spec_classes()
    assert S.GrowthSpec().validate().optimizer_state == "asymmetric" and S.GrowthSpec().applies_to(None) is None


def test_option_records_the_default_the_reason_and_the_flag_settings():
    f = S.option(3, "why it exists", "--x", kind=int, metavar="X", choices=(1, 3), consts={"--y": 1})
    assert f.default == 3 and dict(f.metadata) == {
        "reason": "why it exists",
        "flag": "--x",
        "kind": int,
        "metavar": "X",
        "choices": (1, 3),
        "consts": {"--y": 1},
    }
    f = S.option(None, "plain")
    assert f.default is None and dict(f.metadata) == {
        "reason": "plain",
        "flag": None,
        "kind": str,
        "metavar": None,
        "choices": None,
        "consts": None,
    }


def test_register_spec_names_the_family_on_its_class(monkeypatch):
    monkeypatch.setattr(S, "_SPECS", {})

    class ToySpec(S.GrowthSpec):
        """A toy family."""

    S.register_spec("toy", ToySpec)
    assert ToySpec.family == "toy" and S.spec_classes() == {"toy": ToySpec} and S.GrowthSpec.family == ""


def test_flags_of_toy_families_one_shared_value_less_flag_and_defaults_worth_saying(monkeypatch):
    """Two toy families that share a value-less flag (one option, added once, not a conflict), with a default
    of 1 (said) and of "" (unsaid), one family's docstring ending in a capital X."""
    from dataclasses import dataclass

    monkeypatch.setattr(S, "_SPECS", {})

    @dataclass
    class ASpec(S.GrowthSpec):
        """Grows the toy matrix X."""

        triggers = ("size",)
        size: int = S.option(1, "the toy size", "--toy-size", kind=int)
        label: str = S.option("", "a toy label", "--toy-label")
        quick: str = S.option(None, "toy quick mode", consts={"--quick": "yes"})

    @dataclass
    class BSpec(S.GrowthSpec):
        """Grows the other toy."""

        triggers = ("other",)
        other: int = S.option(None, "the other size", "--toy-other", kind=int)
        quick: str = S.option(None, "toy quick mode", consts={"--quick": "yes"})

    S.register_spec("a", ASpec)
    S.register_spec("b", BSpec)
    p = _parser()
    text = _words(p.format_help())
    assert "growth: a (Grows the toy matrix X): " in text and "growth: b (Grows the other toy): " in text
    assert "--toy-size SIZE the toy size; default 1 " in text
    assert "--toy-label LABEL a toy label --" in text  # a default of "" is not worth saying
    assert text.count("--quick quick='yes': toy quick mode") == 1
    assert S.spec_from_flags(p.parse_args(["--toy-other", "3", "--quick"])) == {
        "family": "b",
        "other": 3,
        "quick": "yes",
    }


def test_with_no_family_registered_the_shared_flags_still_have_their_help(monkeypatch):
    monkeypatch.setattr(S, "_SPECS", {})
    text = _words(_parser().format_help())
    assert (
        "growth: every family: --optimizer-state POLICY "
        + _words(_reason(S.GrowthSpec, "optimizer_state"))
        + "; default asymmetric"
        in text
    )
