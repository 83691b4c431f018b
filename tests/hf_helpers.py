"""Tiny random HF models and nexus baselines for the HF parity tests (no download)."""

from __future__ import annotations

import torch
import transformers

VOCAB = 97


def randomize_(model: torch.nn.Module, seed: int, std: float = 0.1) -> torch.nn.Module:
    """Every parameter random, norms and biases included: HF initializes norms to 1 and biases to 0,
    which would hide a swapped norm or a dropped bias. std 0.1 keeps logits O(1), where the 1e-5 fp32
    tolerance is ~10x the rounding noise (HF eager vs its own SDPA differ by about as much as we do)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name else 0.0  # norm gains near 1 keep activations in a sane range
            p.copy_(torch.randn(p.shape, generator=g) * std + centre)
    return model


HF_VARIANTS = {
    # GQA, untied head, head size that is not d_model / n_heads
    "llama": ("LlamaForCausalLM", "LlamaConfig", dict(head_dim=16, tie_word_embeddings=False)),
    # q/k/v biases, MHA
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(num_key_value_heads=4, tie_word_embeddings=False)),
    # QK-norm, tied embeddings
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(head_dim=12, tie_word_embeddings=True)),
}


def tiny_hf(variant: str, seed: int = 0, **overrides):
    cls_name, cfg_name, kw = HF_VARIANTS[variant]
    base = dict(
        vocab_size=VOCAB,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )
    base.update(kw)
    base.update(overrides)
    cfg = getattr(transformers, cfg_name)(**base)
    cfg._attn_implementation = "eager"
    return randomize_(getattr(transformers, cls_name)(cfg), seed).eval()


def load_hf(directory):
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(directory), attn_implementation="eager", dtype=torch.float32
    ).eval()


def token_batch(seed: int = 1, batch: int = 2, seq: int = 24) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())
