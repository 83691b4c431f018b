"""Nexusformer (Nexus-Rank Q/K/V) and TokenFormer (Pattention) presets: tiny CPU runs and the paper's
Table 6 (main scales) / Table 7 (progressive-growth targets) shapes, plus the Qwen3 and Transformer++
baselines of Tables 6 and 7 (so Tables 1, 2 and 8 can be rerun).

The paper gives layers, hidden size, vocab, FFN size, M (TokenFormer: qkv_slot_num) and A. It does not
give head counts; we use head size 64 where the width allows (768 -> 12, 1024 -> 16) and 10 heads of
80 for width 800. Training recipe from appendix E: AdamW (0.9, 0.95), peak lr 7e-4, 4096 context
(continued training after growth: lr 1e-3). `nexus analyze params` prints the sizes these give.
"""

from __future__ import annotations

from ..config import ProjectionOptions, RunConfig
from . import register
from .baseline import baseline_micro, baseline_tiny

# (layers, hidden, ffn, M, A) -- Table 6 / Table 7 rows for Nexusformer
NEXUSFORMER_SHAPES = {
    "170m": (12, 768, 1706, 780, 800),
    "240m": (12, 768, 2048, 780, 960),
    "480m": (24, 800, 2304, 896, 968),
    "640m": (24, 1024, 2560, 1152, 1280),
    "300m": (12, 768, 2048, 1088, 1228),
    "380m": (12, 800, 2048, 1340, 1530),
    "440m": (12, 1024, 2048, 1540, 1730),
}
# (layers, hidden, ffn, qkv_slot_num) -- Table 6 / Table 7 rows for TokenFormer
TOKENFORMER_SHAPES = {
    "170m": (12, 768, 4096, 1024),
    "240m": (12, 768, 3072, 2088),
    "480m": (24, 800, 5888, 1472),
    "640m": (24, 1024, 6144, 1536),
    "300m": (12, 768, 3072, 2952),
    "380m": (12, 800, 3072, 3960),
    "440m": (12, 1024, 3072, 4824),
}
# (layers, hidden, ffn) -- the baselines of Table 6 (Qwen3, Transformer++) and Table 7 (Qwen3)
QWEN3_SHAPES = {
    "170m": (12, 848, 3392),
    "240m": (12, 1088, 4032),
    "480m": (24, 1344, 3760),
    "640m": (24, 1536, 4608),
    "300m": (12, 1240, 4880),
    "380m": (12, 1300, 6912),
    "440m": (12, 1360, 6912),
}
TRANSFORMER_PP_SHAPES = {
    "170m": (12, 512, 2048),
    "240m": (12, 1024, 2560),
    "480m": (24, 1408, 3648),
    "640m": (24, 1632, 4243),
}
GROWTH_TARGETS = ("300m", "380m", "440m")


def _even_heads(d: int) -> int:
    """Head count for widths the paper gives without one: an even head size (RoPE rotates pairs) as
    close to 64 as the width allows (848 -> 8 x 106, 1240 -> 20 x 62, 1300 -> 25 x 52, 1632 -> 24 x 68)."""
    return min((h for h in range(1, d + 1) if d % h == 0 and (d // h) % 2 == 0), key=lambda h: (abs(d // h - 64), h))


def _heads(d: int) -> int:
    return d // 64 if d % 64 == 0 else 10


def _paper_scale(cfg: RunConfig, layers: int, d: int, name: str, growth_target: bool) -> RunConfig:
    m = cfg.model
    m.n_layers, m.d_model, m.n_heads = layers, d, _heads(d)
    m.vocab_size, m.max_seq_len, m.tie_embeddings = 32000, 4096, False
    cfg.data.seq_len, cfg.data.tokenizer, cfg.data.bpe_vocab_size = 4096, "bpe", 32000
    t = cfg.train
    t.lr = 1e-3 if growth_target else 7e-4  # appendix E: continued training after growth uses 1e-3
    t.optimizer.betas, t.batch_size, t.steps, t.warmup_steps = [0.9, 0.95], 8, 20000, 1000
    t.out_dir = f"runs/{name}"
    return cfg


@register("nexusformer-micro", "Nexusformer 2x64, Nexus-Rank Q/K/V (M=96, A=128): seconds-scale tests and growth demos")
def nexusformer_micro() -> RunConfig:
    cfg = baseline_micro()
    cfg.model.projection = ProjectionOptions.make("nexus_rank", targets=["q", "k", "v"], rank_m=96, rank_a=128)
    cfg.train.out_dir = "runs/nexusformer-micro"
    return cfg


@register(
    "nexusformer-tiny", "Nexusformer 4x128, Nexus-Rank Q/K/V (M=192, A=256): CPU run, grow with --delta-m/--delta-a"
)
def nexusformer_tiny() -> RunConfig:
    cfg = baseline_tiny()
    cfg.model.projection = ProjectionOptions.make("nexus_rank", targets=["q", "k", "v"], rank_m=192, rank_a=256)
    cfg.train.out_dir = "runs/nexusformer-tiny"
    return cfg


@register("tokenformer-micro", "TokenFormer 2x64: Pattention q/k/v/o (64 tokens) and FFN (128 tokens), for tests")
def tokenformer_micro() -> RunConfig:
    cfg = baseline_micro()
    cfg.model.projection = ProjectionOptions.make(
        "pattention", targets=["q", "k", "v", "o", "ffn"], param_tokens=64, ffn_param_tokens=128
    )
    cfg.train.out_dir = "runs/tokenformer-micro"
    return cfg


@register("tokenformer-tiny", "TokenFormer 4x128: Pattention q/k/v/o (128 tokens) and FFN (384 tokens), CPU run")
def tokenformer_tiny() -> RunConfig:
    cfg = baseline_tiny()
    cfg.model.projection = ProjectionOptions.make(
        "pattention", targets=["q", "k", "v", "o", "ffn"], param_tokens=128, ffn_param_tokens=384
    )
    cfg.train.out_dir = "runs/tokenformer-tiny"
    return cfg


def _nexusformer_paper(size: str):
    def fn() -> RunConfig:
        layers, d, ffn, m, a = NEXUSFORMER_SHAPES[size]
        cfg = _paper_scale(baseline_tiny(), layers, d, f"nexusformer-{size}", size in GROWTH_TARGETS)
        cfg.model.ffn_hidden = ffn
        cfg.model.projection = ProjectionOptions.make("nexus_rank", targets=["q", "k", "v"], rank_m=m, rank_a=a)
        return cfg

    return fn


def _tokenformer_paper(size: str):
    def fn() -> RunConfig:
        layers, d, ffn, slots = TOKENFORMER_SHAPES[size]
        cfg = _paper_scale(baseline_tiny(), layers, d, f"tokenformer-{size}", size in GROWTH_TARGETS)
        cfg.model.projection = ProjectionOptions.make(
            "pattention", targets=["q", "k", "v", "o", "ffn"], param_tokens=slots, ffn_param_tokens=ffn
        )
        return cfg

    return fn


def _baseline_paper(size: str, shapes: dict, name: str, qwen3: bool):
    def fn() -> RunConfig:
        layers, d, ffn = shapes[size]
        cfg = _paper_scale(baseline_tiny(), layers, d, f"{name}-{size}", False)
        m = cfg.model
        m.n_heads, m.ffn_hidden = _even_heads(d), ffn
        if qwen3:  # Qwen3's block: Transformer++ plus per-head QK-norm, RoPE base 1e6; its small models tie the head
            m.qk_norm, m.rope_theta, m.tie_embeddings = True, 1_000_000.0, True
        return cfg

    return fn


for _size, (_l, _d, _f) in QWEN3_SHAPES.items():
    _table = "Table 7" if _size in GROWTH_TARGETS else "Table 6"
    register(
        f"qwen3-{_size}",
        f"Qwen3-style baseline {_size.upper()} ({_table}): {_l} layers, d={_d}, SwiGLU {_f}, "
        f"QK-norm, {_even_heads(_d)} heads (the paper gives none)",
    )(_baseline_paper(_size, QWEN3_SHAPES, "qwen3", True))
for _size, (_l, _d, _f) in TRANSFORMER_PP_SHAPES.items():
    register(
        f"transformer-pp-{_size}",
        f"Transformer++ baseline {_size.upper()} (Table 6): {_l} layers, d={_d}, SwiGLU {_f}, "
        f"{_even_heads(_d)} heads (the paper gives none)",
    )(_baseline_paper(_size, TRANSFORMER_PP_SHAPES, "transformer-pp", False))

for _size in NEXUSFORMER_SHAPES:
    _table = "Table 7 growth target" if _size in GROWTH_TARGETS else "Table 6"
    register(
        f"nexusformer-{_size}",
        f"Nexusformer {_size.upper()} ({_table}): {NEXUSFORMER_SHAPES[_size][0]} layers, "
        f"d={NEXUSFORMER_SHAPES[_size][1]}, M={NEXUSFORMER_SHAPES[_size][3]}, A={NEXUSFORMER_SHAPES[_size][4]}",
    )(_nexusformer_paper(_size))
    register(
        f"tokenformer-{_size}",
        f"TokenFormer {_size.upper()} ({_table}): {TOKENFORMER_SHAPES[_size][0]} layers, "
        f"d={TOKENFORMER_SHAPES[_size][1]}, {TOKENFORMER_SHAPES[_size][3]} qkv tokens, "
        f"{TOKENFORMER_SHAPES[_size][2]} FFN tokens",
    )(_tokenformer_paper(_size))
