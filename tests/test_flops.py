"""Analytic FLOPs per token (nexus.analysis.flops) against torch.utils.flop_counter on real forwards.

FlopCounterMode counts matmuls (and SDPA only through its math decomposition on CPU), so the math
SDPA backend is forced while counting. Architectures made only of matmuls must match exactly;
modules that also report elementwise work (MoE routing, anchor-mixing norms) within 2% (at
these tiny widths elementwise work is ~1.5% of the matmuls; FlopCounterMode does not count it).
"""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nexus.analysis.flops import flops_breakdown, forward_flops_per_token, linear_layer_flops
from nexus.config import AttentionOptions, MixingConfig, MLPOptions, ModelConfig, ProjectionOptions
from nexus.models import build_model

T = 24


def counted_per_token(model, vocab, seq_len=T) -> float:
    x = torch.randint(0, vocab, (1, seq_len))
    model.eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        model(x)
    return fc.get_total_flops() / seq_len


def small(**kw) -> ModelConfig:
    base = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=64)
    base.update(kw)
    return ModelConfig(**base)


EXACT = {
    "baseline": small(),
    "gqa_qknorm_untied": small(n_kv_heads=2, qk_norm=True, tie_embeddings=False),
    "gated": small(attention=AttentionOptions(gate="elementwise")),
    "nexus_rank_qkv": small(projection=ProjectionOptions.make("nexus_rank", rank_m=48, rank_a=64)),
    "nexus_rank_all_l2norm": small(
        projection=ProjectionOptions.make(
            "nexus_rank", rank_m=48, rank_a=64, form="l2norm", targets=["q", "k", "v", "o", "ffn"]
        )
    ),
    "pattention": small(
        projection=ProjectionOptions.make("pattention", targets=["q", "k", "v", "o", "ffn"], param_tokens=20)
    ),
    "pattention_softmax": small(
        projection=ProjectionOptions.make("pattention", param_tokens=20, pattention_act="softmax")
    ),
    "higher_order_shared": small(attention=AttentionOptions.make("higher_order", order=2)),
}
APPROX = {
    "moe": small(mlp=MLPOptions.make("moe", n_experts=4, top_k=2)),
    "exo": small(mixing=MixingConfig(anchor="exo"), attention=AttentionOptions(gate="elementwise")),
}


@pytest.mark.parametrize("name", list(EXACT))
def test_matmul_only_architectures_match_flop_counter_exactly(name):
    cfg = EXACT[name]
    torch.manual_seed(0)
    model = build_model(cfg)
    assert forward_flops_per_token(model, T) == pytest.approx(counted_per_token(model, cfg.vocab_size), rel=1e-9)


@pytest.mark.parametrize("name", list(APPROX))
def test_architectures_with_elementwise_work_match_within_two_percent(name):
    cfg = APPROX[name]
    torch.manual_seed(0)
    model = build_model(cfg)
    assert forward_flops_per_token(model, T) == pytest.approx(counted_per_token(model, cfg.vocab_size), rel=0.02)


def test_config_path_uses_meta_device_and_agrees_with_the_model():
    cfg = EXACT["nexus_rank_qkv"]
    assert forward_flops_per_token(cfg, T) == forward_flops_per_token(build_model(cfg), T)
    parts = flops_breakdown(build_model(cfg), T)
    assert parts["total"] == pytest.approx(forward_flops_per_token(cfg, T))
    assert parts["(model)"] == 2 * 32 * 259  # the tied head


def test_nexus_rank_linear_flops_formula():
    """Per projection 2(DM + MA + AD) instead of 2 D^2: the paper's linear-layer comparison (sec. 4.3)."""
    base, nr = EXACT["baseline"], EXACT["nexus_rank_qkv"]
    extra = linear_layer_flops(nr, T) - linear_layer_flops(base, T)
    assert extra == 2 * 3 * 2 * ((32 * 48 + 48 * 64 + 64 * 32) - 32 * 32)


@pytest.mark.slow
def test_every_small_preset_matches_flop_counter():
    from nexus.models.accounting import param_count_for_config
    from nexus.presets import get_preset, names

    bad = {}
    for name in names():
        cfg = get_preset(name).model
        if param_count_for_config(cfg)["total"] > 3e6:
            continue
        torch.manual_seed(0)
        model = build_model(cfg)
        counted = counted_per_token(model, cfg.vocab_size, 32)
        if cfg.arch.kind == "recurrent":
            # FlopCounterMode sees only matmuls; the recurrent block's conv taps and SwiGLU products are
            # elementwise work that the analytic count includes once per application of f.
            rc = cfg.arch
            own = sum(
                m.flops_per_token(32)
                for layer in model.layers
                for m in layer.modules()
                if m is not layer and hasattr(m, "flops_per_token")
            )
            counted += rc.n_sup * rc.t_inner * own
        ratio = forward_flops_per_token(model, 32) / counted
        if abs(ratio - 1) > 0.01:
            bad[name] = round(ratio, 4)
    assert not bad, f"analytic / counted FLOPs off by > 1%: {bad}"


def test_calflops_mode_adds_norms_activations_and_softmax_counted_by_hand():
    """Nexus-Rank q/k/v, SwiGLU FFN, 2 layers, 4 heads: the matmul part equals the analytic count;
    activations are the GELUs on M and A of 3 projections plus the FFN's SiLU; softmax one FLOP per
    score (heads x T per token); elementwise covers norms, RoPE, the SwiGLU product and residuals."""
    from nexus.analysis.flops import calflops_like_counts

    cfg = EXACT["nexus_rank_qkv"]
    c = calflops_like_counts(cfg, T)
    L, H, d, ffn = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.ffn
    assert c["matmul"] == forward_flops_per_token(cfg, T)
    assert c["activation"] == L * (3 * (48 + 64) + ffn)
    assert c["softmax"] == L * H * T
    rms = 4 * d  # pow, mean, mul by rsqrt, mul by gain (the +eps and rsqrt are per token)
    assert c["elementwise"] >= (2 * L + 1) * rms + L * (ffn + 2 * d)  # norms, SwiGLU product, two residual adds
    assert c["total"] == pytest.approx(sum(v for k, v in c.items() if k != "total"))


def test_table6_7_baseline_presets():
    from nexus.presets import get_preset
    from nexus.presets.nexusformer import QWEN3_SHAPES, TRANSFORMER_PP_SHAPES

    for fam, shapes in (("qwen3", QWEN3_SHAPES), ("transformer-pp", TRANSFORMER_PP_SHAPES)):
        for size, (layers, d, ffn) in shapes.items():
            m = get_preset(f"{fam}-{size}").validate().model
            assert (m.n_layers, m.d_model, m.ffn, m.vocab_size, m.max_seq_len) == (layers, d, ffn, 32000, 4096)
            assert m.hd % 2 == 0 and m.hd * m.n_heads == d and m.qk_norm == (fam == "qwen3")
