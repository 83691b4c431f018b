"""Retrofit of trained standard Transformers to Nexus higher-order attention (paper way, lossless
way), through the growth API, the CLI (`nexus grow --retrofit ...` then `nexus train --resume`),
and on a model imported from a local HF Qwen2 checkpoint."""

from __future__ import annotations

import pytest
import torch

from nexus.config import ConfigError
from nexus.growth import grow
from nexus.models import build_model
from nexus.models.higher_order import HigherOrderAttention
from nexus.presets import get_preset


def _micro(seed=0):
    cfg = get_preset("baseline-micro")
    cfg.model.n_kv_heads, cfg.model.qk_norm = 1, True  # GQA + QK-norm, as in Qwen3-style checkpoints
    cfg.validate()
    torch.manual_seed(seed)
    return build_model(cfg.model).eval(), cfg


def _logits(model, ids):
    with torch.no_grad():
        return model.eval()(ids).logits


IDS = torch.randint(0, 259, (2, 24), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("order,targets,form", [(2, "qk", "projected"), (3, "qkv", "projected"), (2, "q", "self")])
def test_lossless_retrofit_keeps_logits_and_adds_only_gates(order, targets, form):
    model, cfg = _micro()
    new, new_cfg, _, res = grow(
        model, cfg, {"family": "retrofit", "mode": "lossless", "order": order, "targets": targets, "form": form}
    )
    assert all(isinstance(b.attn, HigherOrderAttention) for b in new.layers)
    assert new_cfg.model.attention.order == order and new_cfg.model.attention.ho_gate
    assert (_logits(new, IDS) - _logits(model, IDS)).abs().max() <= 1e-5
    new_names = {n for n, pm in res.param_maps.items() if pm.old_name is None}
    assert new_names and all(".ho_gate." in n for n in new_names)
    assert new_cfg.growth_history[-1]["retrofit"] == "higher-order"


def test_paper_retrofit_keeps_outer_projections_and_adds_random_inner_attention():
    model, cfg = _micro()
    new, new_cfg, _, res = grow(model, cfg, {"family": "retrofit", "mode": "paper", "order": 2})
    old_sd, new_sd = model.state_dict(), new.state_dict()
    for name, value in old_sd.items():  # every trained tensor, outer projections included, is kept
        assert torch.equal(new_sd[name], value), name
    inner = [n for n, pm in res.param_maps.items() if pm.old_name is None]
    assert inner and all(".attn.inner." in n for n in inner)
    assert all(new_sd[n].std() > 0 for n in inner if n.endswith("proj.weight"))  # random, not zero
    assert not new_cfg.model.attention.ho_shared
    assert (_logits(new, IDS) - _logits(model, IDS)).abs().max() > 1e-4  # the paper's way changes the function


def test_lossless_gate_opens_when_fine_tuned():
    model, cfg = _micro()
    new, new_cfg, opt, _ = grow(model, cfg, {"family": "retrofit", "mode": "lossless", "order": 2})
    new.train()
    x, y = IDS[:, :-1], IDS[:, 1:]
    for _ in range(3):
        opt.zero_grad()
        new(x, labels=y).loss.backward()
        opt.step()
    gates = torch.cat([p.detach().flatten() for n, p in new.named_parameters() if ".ho_gate." in n])
    assert gates.abs().max() > 0


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"order": 1}, "--order"),
        ({"order": 2, "targets": "kv"}, "ho_targets"),
        ({"order": 2, "mode": "halfway"}, "mode"),
        ({"order": 2, "kind": "lowrank"}, "--retrofit"),
    ],
)
def test_bad_retrofit_spec_is_one_config_error(spec, needle):
    model, cfg = _micro()
    with pytest.raises(ConfigError, match=needle):
        grow(model, cfg, {"family": "retrofit", **spec})


def test_retrofit_rejects_non_transformer_and_already_higher_order_models():
    cfg = get_preset("baseline-micro")
    cfg.model.arch = "recurrent"
    cfg.model.arch.n_sup, cfg.model.arch.t_inner = 1, 1
    cfg.validate()
    with pytest.raises(ConfigError, match="arch"):
        grow(build_model(cfg.model), cfg, {"family": "retrofit", "order": 2})
    model, cfg = _micro()
    new, new_cfg, _, _ = grow(model, cfg, {"family": "retrofit", "order": 2})
    with pytest.raises(ConfigError, match="already higher-order"):
        grow(new, new_cfg, {"family": "retrofit", "order": 3})


# ----------------------------------------------------------------------------- HF-imported model
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"])
def test_retrofit_of_a_model_imported_from_a_local_hf_checkpoint(arch, tmp_path):
    import transformers

    from nexus.hf import import_hf

    config_cls = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    hf_cfg = config_cls(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        head_dim=8,
    )
    torch.manual_seed(0)
    hf = getattr(transformers, arch)(hf_cfg).eval()
    hf.save_pretrained(tmp_path / "hf")
    model, cfg = import_hf(tmp_path / "hf")
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hf_logits = hf(ids).logits
    lossless, new_cfg, _, _ = grow(model, cfg, {"family": "retrofit", "mode": "lossless", "order": 2})
    assert new_cfg.model.qk_norm == (arch == "Qwen3ForCausalLM")  # the imported architecture is kept
    assert (_logits(lossless, ids) - hf_logits).abs().max() <= 1e-4
    paper, _, _, _ = grow(model, cfg, {"family": "retrofit", "mode": "paper", "order": 2})
    assert (_logits(paper, ids) - hf_logits).abs().max() > 1e-4
    for name, value in model.state_dict().items():  # every imported tensor (Qwen2's q/k/v bias too) is kept
        assert torch.equal(paper.state_dict()[name], value), name
