"""SPARKLING width-growth presets: CPU-scale dense and MoE runs that grow mid-training, their
from-scratch wide counterparts, and the paper's OLMoE testbed (Table 3/4) with its three 2x growths.

Every preset here uses the paper's recipe (App. B: weight decay on all parameters, per-head QK-norm) and
grows one axis 2x unless its name says otherwise (`-both`; `-legacy` is the earlier preset, kept by name).
The small models keep head count and head size fixed (`head_dim` explicit) so that hidden growth
lands exactly on the wide model's shape. Growth happens at half the steps, the paper's mid-stage.
"""

from __future__ import annotations

from ..config import MLPOptions, ModelConfig, RunConfig, TrainConfig
from . import register
from .baseline import baseline_tiny

SPARKLING_GROWTH = {"init": "copy,copy", "preserve": "rms", "optimizer_state": "asymmetric"}  # the full recipe


def _with_growth(cfg: RunConfig, tau: int, **axes) -> RunConfig:
    cfg.train.set_hook(
        "growth", at=cfg.train.steps // 2, spec={"family": "width", **axes, **SPARKLING_GROWTH, "rewarmup": [1.3, tau]}
    )
    return cfg


def _paper_recipe(cfg: RunConfig) -> RunConfig:
    """App. B: weight decay 0.1 on every parameter, norms and embeddings included (Table 4), and per-head
    QK-norm over the head dimension (B.1)."""
    cfg.model.qk_norm = True
    cfg.train.weight_decay, cfg.train.decay_all = 0.1, True
    return cfg


def _dense_tiny(d_model: int = 64, ffn: int = 128) -> RunConfig:
    """4 layers, 4 heads of 16 (head size fixed, so hidden growth keeps heads), byte tokens, the paper's recipe."""
    cfg = _paper_recipe(baseline_tiny())
    m = cfg.model
    m.d_model, m.n_heads, m.head_dim, m.ffn_hidden = d_model, 4, 16, ffn
    return cfg


@register(
    "sparkling-dense-tiny",
    "dense 4x64 (4 heads of 16), FFN inner 128 -> 256 at step 150: one axis 2x, "
    "exact copy (SPARKLING recipe: wd on all params, per-head QK-norm)",
)
def sparkling_dense_tiny() -> RunConfig:
    cfg = _dense_tiny()
    cfg.train.out_dir = "runs/sparkling-dense-tiny"
    return _with_growth(cfg, tau=25, ffn=256)


@register("sparkling-dense-tiny-hidden", "sparkling-dense-tiny growing hidden 64 -> 128 instead (heads kept)")
def sparkling_dense_tiny_hidden() -> RunConfig:
    cfg = _dense_tiny()
    cfg.train.out_dir = "runs/sparkling-dense-tiny-hidden"
    return _with_growth(cfg, tau=25, hidden=128)


@register("sparkling-dense-tiny-both", "sparkling-dense-tiny growing hidden 64 -> 128 and FFN 128 -> 256 together")
def sparkling_dense_tiny_both() -> RunConfig:
    cfg = _dense_tiny()
    cfg.train.out_dir = "runs/sparkling-dense-tiny-both"
    return _with_growth(cfg, tau=25, hidden=128, ffn=256)


@register("sparkling-dense-tiny-wide", "the grown shape of sparkling-dense-tiny (FFN 256) trained from scratch")
def sparkling_dense_tiny_wide() -> RunConfig:
    cfg = _dense_tiny(ffn=256)
    cfg.train.out_dir = "runs/sparkling-dense-tiny-wide"
    return cfg


@register(
    "sparkling-dense-tiny-legacy",
    "the earlier sparkling-dense-tiny: 4x64, FFN 192, hidden 128 / FFN 384 at once, wd on matrices only, no QK-norm",
)
def sparkling_dense_tiny_legacy() -> RunConfig:
    cfg = baseline_tiny()
    m = cfg.model
    m.d_model, m.head_dim, m.ffn_hidden = 64, 16, 192
    cfg.train.out_dir = "runs/sparkling-dense-tiny-legacy"
    return _with_growth(cfg, tau=25, hidden=128, ffn=384)


@register("sparkling-moe-tiny", "OLMoE-style 4x64, 8 experts top-2, GQA, QK-norm; expert inner 64 -> 128 at step 150")
def sparkling_moe_tiny() -> RunConfig:
    cfg = _paper_recipe(baseline_tiny())
    m = cfg.model
    m.d_model, m.n_heads, m.n_kv_heads, m.head_dim, m.qk_norm = 64, 4, 2, 16, True
    m.mlp = MLPOptions.make("moe", n_experts=8, top_k=2, expert_hidden=64)
    cfg.train.out_dir = "runs/sparkling-moe-tiny"
    return _with_growth(cfg, tau=25, expert_inner=128)


@register("sparkling-moe-tiny-wide", "sparkling-moe-tiny's grown shape (expert inner 128) trained from scratch")
def sparkling_moe_tiny_wide() -> RunConfig:
    cfg = sparkling_moe_tiny()
    cfg.model.mlp.expert_hidden = 128
    cfg.train.drop_hook("growth")
    cfg.train.out_dir = "runs/sparkling-moe-tiny-wide"
    return cfg


# ----------------------------------------------------------------------------- the paper's testbed
# Table 3 (OLMoE, 0.5B active / 2.5B total) and Table 4 (200B tokens, 768 x 4096 tokens per step).
TESTBED_STEPS = 200_000_000_000 // (768 * 4096)  # 63,578 optimizer steps


@register("sparkling-olmoe-testbed", "paper Table 3/4: 24x1024 MoE, 64 experts top-8, expert inner 512, 200B tokens")
def sparkling_olmoe_testbed() -> RunConfig:
    m = ModelConfig(
        vocab_size=50304,
        d_model=1024,
        n_layers=24,
        n_heads=16,
        n_kv_heads=4,
        head_dim=96,
        max_seq_len=4096,
        qk_norm=True,
        tie_embeddings=True,
        mlp=MLPOptions.make("moe", n_experts=64, top_k=8, expert_hidden=512),
    )
    # batch 3 x grad_accum 4 per process x 64 GPUs = the paper's global batch of 768 sequences
    t = TrainConfig(
        steps=TESTBED_STEPS,
        batch_size=3,
        grad_accum=4,
        lr=1.9556e-3,
        optimizer={"kind": "adamw", "betas": [0.9, 0.95], "eps": 1e-8},
        weight_decay=0.1,
        decay_all=True,
        schedule="cosine",
        warmup_steps=int(0.03 * TESTBED_STEPS),
        min_lr_ratio=0.01,
        dtype="bfloat16",
        out_dir="runs/sparkling-olmoe-testbed",
    )
    cfg = RunConfig(model=m, train=t)
    cfg.data.seq_len, cfg.data.tokenizer, cfg.data.bpe_vocab_size = 4096, "bpe", 50304
    return cfg


@register("sparkling-olmoe-inner2x", "testbed growing expert inner 512 -> 1024 at 100B tokens (Table 2, Inner 2x)")
def sparkling_olmoe_inner2x() -> RunConfig:
    return _with_growth(sparkling_olmoe_testbed(), tau=250, expert_inner=1024)


@register("sparkling-olmoe-hidden2x", "testbed growing hidden 1024 -> 2048 at 100B tokens (Table 2, Hidden 2x)")
def sparkling_olmoe_hidden2x() -> RunConfig:
    return _with_growth(sparkling_olmoe_testbed(), tau=250, hidden=2048)


@register("sparkling-olmoe-joint2x", "testbed growing hidden 2x and expert inner 2x at 100B tokens (Table 2)")
def sparkling_olmoe_joint2x() -> RunConfig:
    return _with_growth(sparkling_olmoe_testbed(), tau=250, hidden=2048, expert_inner=1024)
