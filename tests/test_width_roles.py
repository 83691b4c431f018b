"""Width growth finds tensors through the roles each module declares (models/width_roles.py), and a model
it cannot grow is refused by `applies_to`, before step 0, never at `grow_at`."""

import pytest
import torch

from nexus.config import ConfigError, RunConfig
from nexus.config_overrides import apply_override
from nexus.growth import grow, parse_growth_spec
from nexus.growth.diagnostics import probe_batch
from nexus.models import build_model

TINY = {
    "model.d_model": 32,
    "model.n_layers": 2,
    "model.n_heads": 2,
    "model.ffn_hidden": 64,
    "model.max_seq_len": 64,
    "data.seq_len": 32,
    "model.init_std": 0.2,
}  # large weights: peaked attention, so a scale error shows in the logits

# One model per layer kind and option that changes which tensors exist. Every one either grows or is
# refused by applies_to: there is no third outcome (accepted, then failing at grow_at).
KIND_CASES = {
    "baseline": {},
    "gqa-qknorm-bias": {"model.n_kv_heads": 1, "model.qk_norm": True, "model.attention_bias": True},
    "untied": {"model.tie_embeddings": False},
    "gate-elementwise": {"model.attention.gate": "elementwise"},
    "gate-headwise": {"model.attention.gate": "headwise"},
    "higher-order-shared": {"model.attention.kind": "higher_order"},
    "higher-order-unshared": {"model.attention.kind": "higher_order", "model.attention.ho_shared": False},
    "higher-order-unshared-qkv-gated": {
        "model.attention.kind": "higher_order",
        "model.attention.order": 3,
        "model.attention.ho_shared": False,
        "model.attention.ho_targets": "qkv",
        "model.attention.ho_gate": True,
    },
    "higher-order-self": {"model.attention.kind": "higher_order", "model.attention.ho_form": "self"},
    "nexus-rank-qkv": {
        "model.projection.kind": "nexus_rank",
        "model.projection.rank_m": 80,
        "model.projection.rank_a": 96,
    },
    "nexus-rank-o-ffn": {
        "model.projection.kind": "nexus_rank",
        "model.projection.targets": "q,k,v,o,ffn",
        "model.projection.rank_m": 80,
        "model.projection.rank_a": 96,
    },
    "pattention": {"model.projection.kind": "pattention", "model.projection.param_tokens": 16},
    "moe": {"model.mlp.kind": "moe", "model.mlp.n_experts": 4, "model.mlp.top_k": 2},
    "exo-mixing": {"model.mixing.anchor": "exo", "model.attention.gate": "elementwise"},
    "nures-mixing": {"model.mixing.anchor": "nures", "model.mixing.components": "q,k,v"},
    "recurrent": {"model.arch": "recurrent"},
}


def _cfg(overrides: dict) -> RunConfig:
    cfg = RunConfig()
    for k, v in {**TINY, **overrides}.items():
        apply_override(cfg, k, v)
    return cfg.validate()


@pytest.mark.parametrize("init,hidden", [("copy,copy", 64), ("zero,random", 48)])
@pytest.mark.parametrize("case", sorted(KIND_CASES))
def test_width_growth_either_applies_and_grows_exactly_or_is_refused_before_step_0(case, init, hidden):
    cfg = _cfg(KIND_CASES[case])
    spec = {"family": "width", "hidden": hidden, "init": init, "preserve": "exact"}
    if cfg.model.mlp.kind == "dense":
        spec["ffn"] = 128
    try:
        parse_growth_spec(spec).applies_to(cfg.model)
    except ConfigError as e:
        assert "width" in str(e) and "valid:" in str(e)
        return
    torch.manual_seed(0)
    model = build_model(cfg.model).eval()
    ids = probe_batch(cfg.model.vocab_size, batch=2, seq_len=24)
    new_model, new_cfg, _, _ = grow(model, cfg, spec)
    assert new_cfg.model.d_model == hidden
    with torch.no_grad():
        torch.testing.assert_close(new_model.eval()(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-5)


def test_higher_order_unshared_is_grown_through_its_inner_attentions_roles():
    """The bug: applies_to accepted ho_shared=false and the grower then met 'layers.0.attn.inner.q.q_proj.weight'
    with no role. The inner attentions are Attention modules and declare their roles like any other."""
    cfg = _cfg(KIND_CASES["higher-order-unshared"])
    spec = {"family": "width", "hidden": 64}
    parse_growth_spec(spec).applies_to(cfg.model)
    model = build_model(cfg.model)
    new_model, _, _, _ = grow(model, cfg, spec)
    assert new_model.layers[0].attn.inner["q"].q_proj.weight.shape == (32, 64)  # heads stay, d_model grows


@pytest.mark.parametrize("case", ["pattention", "exo-mixing", "nures-mixing", "recurrent"])
def test_a_module_that_refuses_width_growth_is_named_by_applies_to(case):
    cfg = _cfg(KIND_CASES[case])
    with pytest.raises(ConfigError, match=r"width growth of .*\(valid: "):
        parse_growth_spec({"family": "width", "hidden": 64}).applies_to(cfg.model)


def test_a_tensor_no_module_declares_a_role_for_is_refused_by_applies_to(monkeypatch):
    """A kind that forgets a role fails at applies_to (before step 0), naming the tensor."""
    from nexus.models.attention import Attention

    declared = Attention.width_roles
    monkeypatch.setattr(
        Attention, "width_roles", lambda self: {k: v for k, v in declared(self).items() if not k.startswith("v_proj")}
    )
    cfg = _cfg({})
    with pytest.raises(ConfigError, match=r"no role for 'layers\.0\.attn\.v_proj\.weight'"):
        parse_growth_spec({"family": "width", "hidden": 64}).applies_to(cfg.model)
