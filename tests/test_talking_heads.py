"""Talking-heads attention (models/talking_heads.py) against the paper's equations, written here per head
with explicit loops (Shazeer et al. 2020: J_h = Q_h K_h^T / sqrt(d); L_h' = sum_h J_h P_l[h,h'];
W = softmax(L + causal mask); U_h'' = sum_h' W_h' P_w[h',h'']; O_h = U_h V_h)."""

import math

import pytest
import torch

from nexus.analysis.param_formula import count
from nexus.config import AttentionOptions, ModelConfig
from nexus.models import build_model
from nexus.models.accounting import param_count_for_config
from nexus.models.attention import Attention
from nexus.models.talking_heads import TalkingHeadsAttention
from nexus.presets import get_preset


def reference(q, k, v, p_l, p_w):
    """q (B,H,T,d), k/v (B,H,T,d) (kv heads already repeated), p_l/p_w (H,H) or None."""
    B, H, T, d = q.shape
    J = [q[:, h] @ k[:, h].transpose(-1, -2) / math.sqrt(d) for h in range(H)]
    L = [sum(J[h] * p_l[h, g] for h in range(H)) if p_l is not None else J[g] for g in range(H)]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    W = [torch.softmax(L[g].masked_fill(future, float("-inf")), dim=-1) for g in range(H)]
    U = [sum(W[h] * p_w[h, g] for h in range(H)) if p_w is not None else W[g] for g in range(H)]
    return torch.stack([U[h] @ v[:, h] for h in range(H)], dim=1)


@pytest.mark.parametrize("mix_logits,mix_weights", [(True, True), (True, False), (False, True)])
def test_attend_matches_the_papers_equations(mix_logits, mix_weights):
    torch.manual_seed(0)
    H, KV, d, T = 4, 2, 8, 7
    layer = TalkingHeadsAttention(32, H, KV, d, mix_logits=mix_logits, mix_weights=mix_weights)
    with torch.no_grad():
        for p in (layer.logit_mix, layer.weight_mix):
            if p is not None:
                p.copy_(torch.randn(H, H))
    q, k, v = torch.randn(2, H, T, d), torch.randn(2, KV, T, d), torch.randn(2, KV, T, d)
    want = reference(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), layer.logit_mix, layer.weight_mix)
    torch.testing.assert_close(layer.attend(q, k, v, None), want, rtol=1e-5, atol=1e-5)


def test_identity_mixing_is_standard_attention():
    """P_l = P_w = I (the initialization): the layer computes what standard attention with its weights does."""
    torch.manual_seed(0)
    th = TalkingHeadsAttention(32, 4, 2, 8)
    std = Attention(32, 4, 2, 8)
    std.load_state_dict({k: v for k, v in th.state_dict().items() if not k.endswith("_mix")})
    x = torch.randn(2, 9, 32)
    from nexus.models.layers import RotaryEmbedding

    rope = RotaryEmbedding(8, 16, 10000.0).tables(0, 9)
    torch.testing.assert_close(th(x, rope), std(x, rope), rtol=1e-5, atol=1e-6)


def test_preset_builds_trains_and_decodes_with_the_cache_like_the_full_forward():
    cfg = get_preset("talking-heads-micro").validate()
    assert cfg.model.attention == AttentionOptions.make("talking_heads")
    torch.manual_seed(0)
    model = build_model(cfg.model)
    assert all(isinstance(layer.attn, TalkingHeadsAttention) for layer in model.layers)
    ids = torch.randint(0, cfg.model.vocab_size, (2, 12))
    out = model(ids, labels=ids)
    out.loss.backward()
    assert model.layers[0].attn.logit_mix.grad is not None and model.layers[0].attn.logit_mix.grad.abs().sum() > 0
    with torch.no_grad():
        for layer in model.layers:  # away from the identity, so the mixing matters in the check below
            layer.attn.logit_mix.add_(0.3 * torch.randn_like(layer.attn.logit_mix))
            layer.attn.weight_mix.add_(0.3 * torch.randn_like(layer.attn.weight_mix))
    model.eval()
    gen = model.generate(ids[:1, :5], max_new_tokens=6, temperature=0.0)
    seq = ids[:1, :5]
    for _ in range(6):  # greedy without a cache: the full forward each step
        seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(gen, seq)


@pytest.mark.parametrize("opts", [{}, {"mix_weights": False}, {"gate": "headwise"}])
def test_parameter_count_is_the_built_models(opts):
    cfg = ModelConfig(
        d_model=48, n_layers=2, n_heads=6, n_kv_heads=3, attention=AttentionOptions.make("talking_heads", **opts)
    )
    assert count(cfg)["total"] == param_count_for_config(cfg)["total"]
