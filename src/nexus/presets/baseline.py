"""Transformer++ baseline presets (Llama-style) from laptop to small-GPU scale."""

from __future__ import annotations

from ..config import ModelConfig, RunConfig, TrainConfig
from . import register


@register("baseline-tiny", "Transformer++ 4x128, byte tokens: the default CPU run (~1 CPU-minute)")
def baseline_tiny() -> RunConfig:
    return RunConfig(
        model=ModelConfig(d_model=128, n_layers=4, n_heads=4, max_seq_len=256),
        train=TrainConfig(
            steps=300, batch_size=16, lr=3e-3, warmup_steps=30, eval_every=100, out_dir="runs/baseline-tiny"
        ),
    )


@register("baseline-micro", "Transformer++ 2x64: seconds-scale runs for tests and smoke checks")
def baseline_micro() -> RunConfig:
    cfg = baseline_tiny()
    cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads = 64, 2, 2
    cfg.data.seq_len = 64
    cfg.train.steps, cfg.train.batch_size, cfg.train.warmup_steps = 40, 8, 5
    cfg.train.eval_every, cfg.train.eval_batches, cfg.train.out_dir = 20, 2, "runs/baseline-micro"
    return cfg


@register("baseline-small", "Transformer++ 8x512 GQA (8 q / 4 kv heads), QK-norm: the benchmark shape")
def baseline_small() -> RunConfig:
    cfg = baseline_tiny()
    m = cfg.model
    m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.qk_norm, m.max_seq_len = 512, 8, 8, 4, True, 1024
    cfg.data.seq_len = 256
    cfg.train.lr, cfg.train.steps, cfg.train.out_dir = 1e-3, 2000, "runs/baseline-small"
    return cfg


@register("llama-160m", "Llama-style 12x768, 12 heads, untied head: GPT-2-small scale for GPU runs")
def llama_160m() -> RunConfig:
    cfg = baseline_tiny()
    m = cfg.model
    m.d_model, m.n_layers, m.n_heads, m.max_seq_len, m.tie_embeddings = 768, 12, 12, 2048, False
    m.vocab_size = 50304
    cfg.data.seq_len, cfg.data.tokenizer = 1024, "bpe"
    cfg.data.bpe_vocab_size = 50304
    cfg.train.lr, cfg.train.steps, cfg.train.out_dir = 6e-4, 20000, "runs/llama-160m"
    return cfg
