"""HF parity: imported Llama/Qwen2/Qwen3 give HF's logits; exported baselines load in transformers unchanged."""

from __future__ import annotations

import json

import pytest
import torch
from hf_helpers import load_hf, max_diff, randomize_, tiny_hf, token_batch

from nexus.checkpoint import CheckpointError
from nexus.config import ConfigError, ModelConfig, RunConfig
from nexus.hf import export_hf, import_hf
from nexus.hf.config_map import check_exportable
from nexus.models import build_model

TOL = 1e-5


@pytest.mark.parametrize("variant", ["llama", "qwen2", "qwen3"])
def test_import_gives_hf_logits_and_loss(tmp_path, variant):
    hf = tiny_hf(variant)
    hf.save_pretrained(tmp_path)
    ours, cfg = import_hf(tmp_path)
    ids = token_batch()
    labels = ids.clone()
    labels[0, :5] = -100
    with torch.no_grad():
        ref = hf(ids, labels=labels)
        shifted = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)  # ours takes shifted labels
        out = ours(ids, labels=shifted)
    assert max_diff(out.logits, ref.logits) < TOL
    assert abs(float(out.loss) - float(ref.loss)) < TOL
    # the features each variant exists to exercise really arrived in the config
    m = cfg.model
    assert (m.attention_bias, m.qk_norm, m.tie_embeddings) == {
        "llama": (False, False, False),
        "qwen2": (True, False, False),
        "qwen3": (False, True, True),
    }[variant]
    assert m.hd == hf.config.head_dim if variant != "qwen2" else m.hd == 12


def test_import_cached_greedy_decoding_matches_hf(tmp_path):
    hf = tiny_hf("qwen3", seed=3)
    hf.save_pretrained(tmp_path)
    ours, _ = import_hf(tmp_path)
    prompt = token_batch(seed=5, batch=1, seq=6)
    ref = hf.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
    got = ours.generate(prompt, max_new_tokens=10, temperature=0.0)
    assert got.tolist() == ref.tolist()


def test_import_sharded_checkpoint(tmp_path):
    hf = tiny_hf("llama", seed=7)
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    ours, _ = import_hf(tmp_path)
    ids = token_batch()
    with torch.no_grad():
        assert max_diff(ours(ids).logits, hf(ids).logits) < TOL


def test_zero_output_bias_imports_and_nonzero_is_refused(tmp_path):
    hf = tiny_hf("llama", seed=2, attention_bias=True)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.o_proj.bias.zero_()
    hf.save_pretrained(tmp_path / "zero")
    ours, cfg = import_hf(tmp_path / "zero")
    assert cfg.model.attention_bias
    ids = token_batch()
    with torch.no_grad():
        assert max_diff(ours(ids).logits, hf(ids).logits) < TOL
        hf.model.layers[1].self_attn.o_proj.bias[3] = 0.5
    hf.save_pretrained(tmp_path / "nonzero")
    with pytest.raises(ConfigError, match="o_proj.bias is non-zero"):
        import_hf(tmp_path / "nonzero")


def _baseline(seed: int, **model_kw):
    cfg = RunConfig(model=ModelConfig(vocab_size=97, d_model=48, n_layers=2, n_heads=4, max_seq_len=64, **model_kw))
    cfg.data.seq_len = 32
    cfg.validate()
    torch.manual_seed(seed)
    return randomize_(build_model(cfg.model), seed).eval(), cfg


@pytest.mark.parametrize(
    "kw,arch",
    [
        (dict(n_kv_heads=2, tie_embeddings=False, rope_theta=321.0), "LlamaForCausalLM"),
        (dict(head_dim=16, tie_embeddings=True), "LlamaForCausalLM"),
        (dict(attention_bias=True, tie_embeddings=False), "Qwen2ForCausalLM"),
        (dict(qk_norm=True, n_kv_heads=1), "Qwen3ForCausalLM"),
        (dict(qk_norm=True, attention_bias=True), "Qwen3ForCausalLM"),
    ],
)
def test_export_loads_in_transformers_with_same_logits(tmp_path, kw, arch):
    model, cfg = _baseline(11, **kw)
    info = export_hf(model, cfg, tmp_path / "hf")
    assert info["architecture"] == arch
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [arch]
    hf = load_hf(tmp_path / "hf")
    assert type(hf).__name__ == arch
    ids = token_batch(seed=4)
    with torch.no_grad():
        assert max_diff(hf(ids).logits, model(ids).logits) < TOL
    # and back again: import of our own export is the identity on weights
    again, cfg2 = import_hf(tmp_path / "hf")
    for k, v in model.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k
    assert cfg2.model.hd == cfg.model.hd and cfg2.model.rope_theta == cfg.model.rope_theta


@pytest.mark.parametrize("tied", [True, False])
def test_export_folds_a_logit_scale_into_an_untied_head(tmp_path, tied):
    """Width growth gives a tied head a logit multiplier HF has no field for: the export must still give
    equal logits (an export that dropped the scale would differ by the factor)."""
    model, cfg = _baseline(12, tie_embeddings=tied)
    cfg.model.logit_scale = model.cfg.logit_scale = 0.37
    export_hf(model, cfg, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["tie_word_embeddings"] is False
    hf = load_hf(tmp_path / "hf")
    ids = token_batch(seed=5)
    with torch.no_grad():
        ours = model(ids).logits
        assert max_diff(hf(ids).logits, ours) < TOL
        again, cfg2 = import_hf(tmp_path / "hf")
        assert cfg2.model.logit_scale == 1.0 and not cfg2.model.tie_embeddings
        assert max_diff(again(ids).logits, ours) < TOL
        assert torch.equal(again.embed.weight, model.embed.weight)  # inputs keep the unscaled table


@pytest.mark.parametrize(
    "field,value",
    [
        ("attention.gate", "headwise"),
        ("attention.kind", "higher_order"),
        ("projection.kind", "nexus_rank"),
        ("mixing.anchor", "exo"),
        ("mlp.kind", "moe"),
        ("arch", "recurrent"),
    ],
)
def test_non_baseline_export_is_refused(tmp_path, field, value):
    from nexus.config_overrides import apply_override

    cfg = RunConfig()
    apply_override(cfg, f"model.{field}", value)
    mcfg = cfg.model
    with pytest.raises(ConfigError, match=field.split(".")[0]):
        check_exportable(mcfg)


def test_export_of_gated_model_writes_nothing(tmp_path):
    model, cfg = _baseline(0)
    cfg.model.attention.gate = "headwise"
    gated = build_model(cfg.model)
    with pytest.raises(ConfigError, match="model.attention"):
        export_hf(gated, cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary directory left behind either


@pytest.mark.parametrize(
    "edit,field",
    [
        (
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "rope_theta": 500.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32,
                }
            },
            "rope_type",
        ),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"architectures": ["GPT2LMHeadModel"]}, "architectures"),
    ],
)
def test_unsupported_hf_features_are_refused(tmp_path, edit, field):
    tiny_hf("llama").save_pretrained(tmp_path)
    cfg_file = tmp_path / "config.json"
    d = json.loads(cfg_file.read_text())
    d.update(edit)
    cfg_file.write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=field):
        import_hf(tmp_path)


def test_sliding_window_qwen2_is_refused(tmp_path):
    tiny_hf("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=1).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="layer_types"):
        import_hf(tmp_path)


def test_bad_hf_directories(tmp_path):
    with pytest.raises(CheckpointError, match="existing HF model directory"):
        import_hf(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="no config.json"):
        import_hf(tmp_path)
    tiny_hf("llama").save_pretrained(tmp_path / "ok")
    weights = tmp_path / "ok" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        import_hf(tmp_path / "ok")
    weights.unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        import_hf(tmp_path / "ok")
    (tmp_path / "ok" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not a usable HF config"):
        import_hf(tmp_path / "ok")


def test_weights_that_do_not_match_config_are_refused(tmp_path):
    tiny_hf("llama").save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d["intermediate_size"] = 96  # weights were saved with 80
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(CheckpointError, match="gate_proj.weight has shape"):
        import_hf(tmp_path)


def test_bias_with_custom_head_dim_has_no_hf_class(tmp_path):
    model, cfg = _baseline(0, attention_bias=True, head_dim=16)  # Qwen2 cannot express head_dim != d/heads
    with pytest.raises(ConfigError, match="model.head_dim=16"):
        export_hf(model, cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
