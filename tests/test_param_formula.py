"""`nexus presets` counts parameters by arithmetic (nexus.analysis.param_formula); every count is held
to a real build of the model, and the listing must not import torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nexus.analysis.param_formula import sizes
from nexus.config import ModelConfig, RunConfig
from nexus.config_overrides import parse_overrides
from nexus.models.accounting import param_count_for_config
from nexus.presets import get_preset, names

# one config per mechanism the formula has a term for; small enough to build for real in a second
VARIANTS = [
    [],
    [
        "--model.n_kv_heads",
        "2",
        "--model.qk_norm",
        "true",
        "--model.attention_bias",
        "true",
        "--model.tie_embeddings",
        "false",
    ],
    ["--model.attention.gate", "elementwise"],
    [
        "--model.attention.gate",
        "headwise",
        "--model.mixing.anchor",
        "exo",
        "--model.mixing.granularity",
        "headwise",
        "--model.mixing.dynamic",
        "true",
        "--model.n_kv_heads",
        "2",
    ],
    ["--model.attention.gate", "elementwise", "--model.mixing.anchor", "nures", "--model.mixing.norm", "qk"],
    [
        "--model.mixing.anchor",
        "value_residual",
        "--model.mixing.components",
        "v",
        "--model.mixing.norm",
        "none",
        "--model.mixing.learnable",
        "false",
    ],
    ["--model.mixing.anchor", "exo", "--model.mixing.components", "q,k,v", "--model.mixing.granularity", "scalar"],
    ["--model.mlp.kind", "moe", "--model.mlp.n_experts", "4", "--model.mlp.top_k", "2"],
    ["--model.projection.kind", "nexus_rank", "--model.projection.targets", "q,k,v,o"],
    [
        "--model.projection.kind",
        "pattention",
        "--model.projection.targets",
        "q,k,v,o,ffn",
        "--model.projection.param_tokens",
        "48",
        "--model.projection.ffn_param_tokens",
        "80",
        "--model.attention_bias",
        "true",
    ],
    [
        "--model.attention.kind",
        "higher_order",
        "--model.attention.ho_shared",
        "false",
        "--model.attention.ho_gate",
        "true",
        "--model.attention.ho_targets",
        "qkv",
    ],
    ["--model.attention.kind", "higher_order", "--model.attention.order", "3", "--model.attention.ho_form", "self"],
    ["--model.arch", "recurrent", "--model.arch.conv_kernel", "3"],
    ["--model.arch", "recurrent", "--model.arch.ternary", "false", "--model.tie_embeddings", "false"],
]


def _cfg(overrides) -> ModelConfig:
    cfg = RunConfig()
    cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads, cfg.model.vocab_size = 64, 3, 4, 97
    return parse_overrides(cfg, list(overrides)).validate().model


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: "-".join(a.split(".")[-1] for a in o[::2]) or "base")
def test_formula_equals_a_real_build(overrides):
    import torch

    from nexus.models import build_model

    cfg = _cfg(overrides)
    model = build_model(cfg)  # a real (CPU) build, not the meta one
    real = sum(p.numel() for p in model.parameters())
    assert sizes(cfg)["total"] == real
    assert sizes(cfg) == param_count_for_config(cfg)
    if cfg.arch.kind == "recurrent" and cfg.arch.ternary:
        assert sizes(cfg)["ternary_mb"] < sizes(cfg)["fp16_mb"]
    del torch


@pytest.mark.parametrize(
    "name",
    [
        "baseline-tiny",
        "exo-dynamic-e-tiny",
        "nexusformer-tiny",
        "sparkling-moe-tiny",
        "nexus-qk-tiny",
        "nexus-tiny",
        "tokenformer-tiny",
    ],
)
def test_formula_equals_the_meta_build_for_presets(name):
    cfg = get_preset(name).model
    assert sizes(cfg) == param_count_for_config(cfg)


@pytest.mark.slow
def test_formula_equals_the_meta_build_for_every_preset():
    bad = [n for n in names() if sizes(get_preset(n).model) != param_count_for_config(get_preset(n).model)]
    assert bad == []


TORCH_FREE = (
    "import sys, io, contextlib; from nexus.cli import main\n"
    "out = io.StringIO()\n"
    "with contextlib.redirect_stdout(out): rc = main(sys.argv[1:])\n"
    "print(rc, 'torch' in sys.modules); print(out.getvalue(), end='')"
)


@pytest.mark.parametrize(
    "argv", [["presets"], ["--help"], ["config", "--preset", "khop-order2"], ["config", "--preset", "tokenformer-tiny"]]
)
def test_listing_and_config_commands_do_not_import_torch(argv):
    """Every preset, registered kinds included (their options and counts are torch-free: nexus/kind_options/),
    is listed and counted without importing torch, and so are the top-level help and a kind preset's config."""
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, *rows = proc.stdout.splitlines()
    assert status == "0 False", f"nexus {' '.join(argv)}: exit code and 'torch imported' = {status}"
    if argv == ["presets"]:
        assert rows[0].startswith("preset") and len(rows) == 1 + len(names())
        for name in ("baseline-tiny", "khop-order2", "nexus-tiny", "tokenformer-tiny", "sparkling-moe-tiny"):
            row = next(r for r in rows if r.startswith(name + " "))
            assert f"{sizes(get_preset(name).model)['total'] / 1e6:.2f}M" in row
