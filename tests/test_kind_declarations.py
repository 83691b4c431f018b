"""Every registered kind (attention, projection, MLP, architecture) declares, in its own file, what the rest
of nexus asks of it: its options (a registered options dataclass), its parameter count (held to a real
build) and its width-growth roles (every tensor width growth reshapes has one, or a module says why it
refuses). A kind that forgets one fails here, not in a user's run."""

import pytest

from nexus.analysis.param_formula import count
from nexus.config import (
    ArchitectureOptions,
    AttentionOptions,
    ConfigError,
    MLPOptions,
    ModelConfig,
    ProjectionOptions,
    RunConfig,
)
from nexus.growth.width import WidthSpec
from nexus.models.accounting import param_count_for_config
from nexus.models.kinds import ARCHITECTURES, ATTENTION_KINDS, MLP_KINDS
from nexus.models.projections import PROJECTIONS

TINY = dict(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=64, max_seq_len=32)


def _model(**sections) -> ModelConfig:
    cfg = RunConfig(model=ModelConfig(**TINY, **sections))
    cfg.data.seq_len = 32
    return cfg.validate().model


def _grows_or_refuses(m: ModelConfig) -> None:
    """applies_to passes (every reshaped tensor has a role) or a module refused; never a missing role."""
    try:  # hidden growth reshapes a tensor of every kind; 40 keeps Nexus-Rank's D < M (= 2 * 32) order
        WidthSpec(hidden=40).validate().applies_to(m)
    except ConfigError as e:
        assert str(e).startswith("width growth of "), str(e)  # a declared refusal, not 'no role for ...'


def _cases():
    attention = [("attention", k) for k in ATTENTION_KINDS.names()] + [("attention", "standard")]
    projection = [("projection", k) for k in PROJECTIONS.names()]
    mlp = [("mlp", k) for k in MLP_KINDS.names()] + [("mlp", "dense")]
    arch = [("arch", k) for k in ARCHITECTURES.names()] + [("arch", "transformer")]
    return attention + projection + mlp + arch


def test_the_registries_and_the_options_tables_name_the_same_kinds():
    assert set(AttentionOptions.kinds()) == set(ATTENTION_KINDS.names()) | {"standard"}
    assert set(ProjectionOptions.kinds()) == set(PROJECTIONS.names()) | {"linear"}
    assert set(MLPOptions.kinds()) == set(MLP_KINDS.names()) | {"dense"}
    assert set(ArchitectureOptions.kinds()) == set(ARCHITECTURES.names()) | {"transformer"}
    for registry in (ATTENTION_KINDS, PROJECTIONS, MLP_KINDS, ARCHITECTURES):
        assert all(callable(k.build) for _, k in registry.items()), registry.what
    # every registered kind but the baselines counts its own parameters in its options class
    for section in (AttentionOptions, ProjectionOptions, MLPOptions, ArchitectureOptions):
        lacking = [k for k, c in section.kinds().items() if c is not section and "params" not in vars(c)]
        assert lacking == [], f"{section.section} kinds without a params count in their options: {lacking}"


@pytest.mark.parametrize("section,kind", _cases())
def test_each_kind_counts_its_parameters_and_declares_its_width_roles(section, kind):
    base = {
        "attention": AttentionOptions,
        "projection": ProjectionOptions,
        "mlp": MLPOptions,
        "arch": ArchitectureOptions,
    }[section]
    opts = {"targets": ["q", "k", "v", "o", "ffn"]} if section == "projection" else {}
    m = _model(**{section: base.make(kind, **opts)})
    assert count(m)["total"] == param_count_for_config(m)["total"]
    _grows_or_refuses(m)


def test_the_dense_mlp_as_a_projection_kinds_ffn_is_counted_and_grown():
    """The dense baseline MLP is one projection when model.projection targets ffn (TokenFormer's FFN)."""
    m = _model(projection=ProjectionOptions.make("nexus_rank", targets=["q", "k", "v", "o", "ffn"]))
    assert count(m)["total"] == param_count_for_config(m)["total"]
    _grows_or_refuses(m)
