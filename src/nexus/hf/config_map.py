"""Translate between HF `transformers` configs (Llama, Qwen2, Qwen3) and nexus's ModelConfig.

Only what our baseline TransformerLM computes exactly is accepted; anything else (RoPE scaling,
sliding windows, MLP biases, other activations) is refused with one line naming the HF field,
because importing it silently would give different logits.
"""

from __future__ import annotations

from ..config import ConfigError, ModelConfig

# HF architecture name -> (model_type, has q/k/v bias always, has QK-norm)
HF_ARCHITECTURES = {
    "LlamaForCausalLM": ("llama", False, False),
    "Qwen2ForCausalLM": ("qwen2", True, False),
    "Qwen3ForCausalLM": ("qwen3", False, True),
}


def require_transformers():
    """Import `transformers` or explain how to get it (it is an optional dependency of nexus)."""
    try:
        import transformers
    except ImportError:
        raise ConfigError(
            "HF import/export needs the `transformers` package (valid: pip install 'nexus[hf]', "
            "the extra that installs it)"
        ) from None
    return transformers


def architecture_of(hf_cfg) -> str:
    archs = list(getattr(hf_cfg, "architectures", None) or [])
    by_type = {t: name for name, (t, _, _) in HF_ARCHITECTURES.items()}
    for a in archs:
        if a in HF_ARCHITECTURES:
            return a
    if not archs and hf_cfg.model_type in by_type:  # configs saved without `architectures`
        return by_type[hf_cfg.model_type]
    raise ConfigError(
        f"config.json architectures={archs or hf_cfg.model_type!r} (valid: one of {', '.join(HF_ARCHITECTURES)})"
    )


def model_config_from_hf(hf_cfg) -> tuple[ModelConfig, str]:
    """HF PreTrainedConfig -> (ModelConfig, architecture name). Raises ConfigError for features we lack."""
    arch = architecture_of(hf_cfg)
    _, qkv_bias, qk_norm = HF_ARCHITECTURES[arch]

    def refuse(field: str, value, valid: str):
        raise ConfigError(f"{arch} config {field}={value!r} is not supported by nexus (valid: {valid})")

    rope = dict(getattr(hf_cfg, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        refuse("rope_parameters.rope_type", rope.get("rope_type"), "default (no RoPE scaling)")
    if getattr(hf_cfg, "partial_rotary_factor", None) not in (None, 1.0):
        refuse("partial_rotary_factor", hf_cfg.partial_rotary_factor, "1.0")
    if hf_cfg.hidden_act != "silu":
        refuse("hidden_act", hf_cfg.hidden_act, "silu (SwiGLU MLP)")
    if getattr(hf_cfg, "mlp_bias", False):
        refuse("mlp_bias", True, "false")
    layer_types = getattr(hf_cfg, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        refuse("layer_types", sorted(set(layer_types)), "full_attention only (no sliding window)")
    if getattr(hf_cfg, "pretraining_tp", 1) not in (None, 1):
        refuse("pretraining_tp", hf_cfg.pretraining_tp, "1")

    n_heads = hf_cfg.num_attention_heads
    head_dim = getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // n_heads
    cfg = ModelConfig(
        vocab_size=hf_cfg.vocab_size,
        d_model=hf_cfg.hidden_size,
        n_layers=hf_cfg.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=hf_cfg.num_key_value_heads or n_heads,
        # Keep an explicit head size only where it is not the default, so the config stays minimal.
        head_dim=0 if head_dim * n_heads == hf_cfg.hidden_size else head_dim,
        ffn_hidden=hf_cfg.intermediate_size,
        max_seq_len=hf_cfg.max_position_embeddings,
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        qk_norm=qk_norm,
        tie_embeddings=bool(hf_cfg.tie_word_embeddings),
        norm_eps=float(hf_cfg.rms_norm_eps),
        init_std=float(getattr(hf_cfg, "initializer_range", 0.02)),
        attention_bias=qkv_bias or bool(getattr(hf_cfg, "attention_bias", False)),
    )
    errors: list[str] = []
    cfg.validate(errors, "model")
    if errors:
        raise ConfigError(f"{arch} config does not map to a valid nexus model: {'; '.join(errors)}")
    return cfg, arch


def check_exportable(cfg: ModelConfig) -> None:
    """Refuse every architecture HF Llama/Qwen cannot express (one line naming the first offender)."""
    if cfg.arch.kind != "transformer":
        raise ConfigError(f"model.arch.kind={cfg.arch.kind!r} cannot be exported to HF (valid: transformer baseline)")
    baseline = ModelConfig()
    # the sub-configs must keep their defaults: each switches on a mechanism HF Llama/Qwen lack
    offenders = [name for name in cfg.mechanism_sections() if getattr(cfg, name) != getattr(baseline, name)]
    if offenders:
        name = offenders[0]
        raise ConfigError(
            f"model.{name}={getattr(cfg, name)!r} cannot be exported to HF "
            f"(valid: the baseline Transformer++ with default model.{name} options)"
        )


def hf_architecture_for(cfg: ModelConfig) -> str:
    """The HF class that computes exactly what this baseline computes."""
    if cfg.qk_norm:
        return "Qwen3ForCausalLM"  # QK-norm; q/k/v biases via attention_bias (its o_proj bias written as zeros)
    if cfg.attention_bias:
        if cfg.head_dim and cfg.head_dim * cfg.n_heads != cfg.d_model:
            raise ConfigError(
                f"model.head_dim={cfg.head_dim} with attention_bias cannot be exported "
                f"(valid: head_dim 0 or d_model/n_heads, as Qwen2 requires)"
            )
        return "Qwen2ForCausalLM"
    return "LlamaForCausalLM"


def hf_config_from_model(cfg: ModelConfig, arch: str, special_ids: dict):
    transformers = require_transformers()
    cls = {
        "LlamaForCausalLM": transformers.LlamaConfig,
        "Qwen2ForCausalLM": transformers.Qwen2Config,
        "Qwen3ForCausalLM": transformers.Qwen3Config,
    }[arch]
    kw = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings and cfg.logit_scale == 1.0,  # else the scaled head is untied
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        hidden_act="silu",
        initializer_range=cfg.init_std,
        bos_token_id=special_ids.get("bos"),
        eos_token_id=special_ids.get("eos"),
        pad_token_id=special_ids.get("pad"),
    )
    if arch != "Qwen2ForCausalLM":
        kw["head_dim"] = cfg.hd
        kw["attention_bias"] = cfg.attention_bias
    hf_cfg = cls(**kw)
    hf_cfg.architectures = [arch]
    return hf_cfg
