"""Attention heatmaps (outer / inner-Q / inner-K) and the higher-order presets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nexus.analysis.attention_maps import record_attention_maps, write_attention_maps
from nexus.config import AttentionOptions, ModelConfig
from nexus.models.accounting import param_count_for_config
from nexus.models.transformer import TransformerLM
from nexus.presets import get_preset


def _model(order=2, form="projected", **kw):
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=4, vocab_size=50, max_seq_len=32, init_std=0.2, **kw)
    if order > 1:
        cfg.attention = AttentionOptions.make("higher_order", order=order, ho_form=form)
    torch.manual_seed(0)
    return TransformerLM(cfg)


IDS = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_maps_are_uniform_causal_attention_when_queries_and_keys_are_zero(order):
    # W_q = W_k = 0 makes every level attend uniformly to the past: p[i, j] = 1/(i+1) for j <= i.
    model = _model(order=order)
    for layer in model.layers:
        layer.attn.q_proj.weight.data.zero_()
        layer.attn.k_proj.weight.data.zero_()
    maps = record_attention_maps(model, IDS)
    assert set(maps) == ({"outer"} if order == 1 else {"outer", "inner_q", "inner_k"})
    i = np.arange(12)[:, None]
    expected = np.where(np.arange(12)[None, :] <= i, 1.0 / (i + 1), 0.0)
    for name, m in maps.items():
        np.testing.assert_allclose(m, expected, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("form", ["projected", "self"])
def test_maps_are_causal_row_stochastic_and_written_as_png(form, tmp_path):
    import matplotlib.image

    model = _model(form=form)
    out = tmp_path / "maps"
    res = write_attention_maps(model, IDS, out)
    assert set(res["maps"]) == {"outer", "inner_q", "inner_k"}
    arrays = np.load(out / res["arrays"])
    for name, file in res["maps"].items():
        img = matplotlib.image.imread(out / file)
        assert img.ndim == 3 and img.shape[0] > 50
        m = arrays[name]
        np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
        assert np.abs(np.triu(m, 1)).max() == 0.0
    assert matplotlib.image.imread(out / res["figure"]).shape[1] > img.shape[1]  # the panels side by side
    if form == "self":  # eq. 7-8: Q Q^T and K K^T differ
        assert np.abs(arrays["inner_q"] - arrays["inner_k"]).max() > 1e-4
    else:  # eq. 12 with shared weights: one inner attention feeds both Q and K
        np.testing.assert_allclose(arrays["inner_q"], arrays["inner_k"], atol=1e-6)
    assert not list((tmp_path / "maps").glob(".*tmp*"))  # temp files renamed away


def test_recording_leaves_the_model_unchanged():
    model = _model(order=1)
    with torch.no_grad():
        before = model(IDS).logits
    record_attention_maps(model, IDS)
    assert "attend" not in vars(model.layers[0].attn)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS).logits, before, rtol=0, atol=0)


# ----------------------------------------------------------------------------- presets
TABLE2 = {
    "nexus-q": ("q", False, 2),
    "nexus-qk": ("qk", False, 2),
    "nexus-qkv": ("qkv", False, 2),
    "nexus-qk-shared": ("qk", True, 2),
    "nexus-recursive": ("qk", True, 3),
}


@pytest.mark.parametrize("scale,baseline", [("tiny", "baseline-tiny"), ("70m", "pythia-70m-baseline")])
def test_table2_presets_match_the_ablation_rows(scale, baseline):
    base = get_preset(baseline).validate()
    base_params = param_count_for_config(base.model)["total"]
    for name, (targets, shared, order) in TABLE2.items():
        cfg = get_preset(f"{name}-{scale}").validate()
        a = cfg.model.attention
        assert (a.ho_targets, a.ho_shared, a.order) == (targets, shared, order)
        rest = cfg.model
        assert (rest.d_model, rest.n_layers, rest.n_heads) == (
            base.model.d_model,
            base.model.n_layers,
            base.model.n_heads,
        )
        n = param_count_for_config(cfg.model)["total"]
        assert (n == base_params) if shared else (n > base_params)  # shared weights: O(1) parameters
    if scale == "70m":
        assert abs(base_params - PYTHIA["70m"][3]) / PYTHIA["70m"][3] < 0.01  # the Pythia-70M scale


# Pythia's published shapes and total parameter counts (Biderman et al. 2023, the suite's model table)
PYTHIA = {
    "70m": (512, 6, 8, 70_426_624),
    "160m": (768, 12, 12, 162_322_944),
    "410m": (1024, 24, 16, 405_334_016),
    "1b": (2048, 16, 8, 1_011_781_632),
}


@pytest.mark.parametrize("scale", ["160m", "410m", "1b"])
def test_table1_presets_at_pythia_scales(scale):
    d, layers, heads, params = PYTHIA[scale]
    base = get_preset(f"pythia-{scale}-baseline").validate()
    nexus = get_preset(f"nexus-qk-shared-{scale}").validate()
    m = base.model
    assert (m.d_model, m.n_layers, m.n_heads, m.max_seq_len, m.tie_embeddings) == (d, layers, heads, 2048, False)
    n = param_count_for_config(m)["total"]
    assert abs(n - params) / params < 0.01, (scale, n)  # SwiGLU 8/3 holds the parameters of Pythia's 4x MLP
    a = nexus.model.attention
    assert (a.order, a.ho_targets, a.ho_shared) == (2, "qk", True)
    assert param_count_for_config(nexus.model)["total"] == n  # shared inner weights: no new parameters
    nexus.model.attention = base.model.attention  # and nothing else differs
    nexus.train.out_dir = base.train.out_dir
    assert nexus.to_dict() | {"preset": ""} == base.to_dict() | {"preset": ""}


@pytest.mark.parametrize("task", ["mqar", "khop"])
def test_synthetic_comparison_presets_differ_only_in_attention_order(task):
    base = get_preset(f"{task}-baseline").validate()
    ho = get_preset(f"{task}-order2").validate()
    assert base.data.source == ho.data.source == f"synthetic:{task}"
    assert base.model.attention.kind == "standard" and ho.model.attention.order == 2
    ho.model.attention = base.model.attention
    ho.train.out_dir = base.train.out_dir
    assert ho.to_dict() | {"preset": ""} == base.to_dict() | {"preset": ""}


def test_analyze_attention_command_writes_the_higher_order_maps(tmp_path, capsys):
    import json

    from nexus.cli import main

    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "attention",
                "--preset",
                "nexus-qk-shared-tiny",
                "--model.n_layers",
                "1",
                "--out",
                str(out),
                "--batches",
                "1",
                "--batch-size",
                "2",
                "--seq-len",
                "16",
                "--json",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    maps = res["attention_maps"]["maps"]
    assert set(maps) == {"outer", "inner_q", "inner_k"}
    for file in maps.values():
        assert (out / file).is_file()
