"""`nexus analyze` and the ExoFormer analyses: statistics against hand computations, CLI outputs,
parameter/FLOP overheads against the paper's appendix F formulas."""

from __future__ import annotations

import json
import math

import pytest
import torch

from nexus.analysis.attention_stats import attention_probs, attention_statistics, mixing_coefficients
from nexus.analysis.representations import (
    anchor_removal,
    cross_layer_cosine,
    effective_rank,
    representation_statistics,
    token_similarity,
)
from nexus.cli import main
from nexus.models import build_model
from nexus.models.mixing import mixers
from nexus.presets import get_preset


def micro(preset: str):
    m = get_preset(preset).model
    m.d_model, m.n_heads, m.n_layers, m.max_seq_len = 32, 2, 3, 32
    m.zero_init_out = m.zero_init_head = False
    return m


# ----------------------------------------------------------------------------- statistics
def test_attention_probs_match_sdpa_and_stats_match_hand_computation():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    p = attention_probs(q, k)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(p @ v.repeat_interleave(2, dim=1), sdpa, rtol=1e-5, atol=1e-5)
    model = build_model(micro("gated-tiny"))
    x = torch.randint(0, 259, (2, 6))
    stats = attention_statistics(model, [(x, None)])
    # hand computation for layer 0 from its own q/k
    attn = model.layers[0].attn
    with torch.no_grad():
        h = model.layers[0].attn_norm(model.embed(x))
        parts = attn.project(h)
        q0, k0 = attn.qk_norm(parts["q"], parts["k"])
    from nexus.models.layers import apply_rope

    cos, sin = model.rope.tables(0, 6)
    p0 = attention_probs(apply_rope(q0.transpose(1, 2), cos, sin), apply_rope(k0.transpose(1, 2), cos, sin))
    ent = -(p0 * p0.clamp_min(1e-30).log()).sum(-1).mean()
    assert stats["entropy"][0] == pytest.approx(float(ent), rel=1e-5)
    assert stats["sink_share"][0] == pytest.approx(float(p0[:, :, 1:, 0].mean()), rel=1e-5)
    assert stats["gate_activation"][0] == pytest.approx(float(torch.sigmoid(parts["g"]).mean()), rel=1e-5)
    assert len(stats["entropy"]) == 3
    # hooks are removed afterwards
    assert "attend" not in vars(attn) and "output" not in vars(attn)


def test_attention_stats_on_a_mixed_model_match_hand_computation():
    """Dynamic E-ExoFormer, layer 0 (mixed with the exogenous anchor): q, k, g are mixed by hand from
    eq. 1 / 5 / 6 / 7 with perturbed coefficients, then QK-normed and rotated; the statistics must be
    those of the mixed tensors, not of the raw projections."""
    import torch.nn.functional as F

    from nexus.models.layers import apply_rope

    torch.manual_seed(1)
    m = micro("exo-dynamic-e-tiny")
    model = build_model(m)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, mx in mixers(model):
            for c in mx.components:
                mx.anchor_coef[c].copy_(0.2 + 2 * torch.rand(mx.anchor_coef[c].shape, generator=g))
                mx.current_coef[c].copy_(0.2 + 2 * torch.rand(mx.current_coef[c].shape, generator=g))
            mx.dynamic.fc2.weight.normal_(0, 1.0, generator=g)
            mx.dynamic.fc2.bias.normal_(0, 1.0, generator=g)
    x = torch.randint(0, 259, (2, 6))
    stats = attention_statistics(model, [(x, None)])
    H, hd, eps, T = m.n_heads, m.d_model // m.n_heads, m.norm_eps, x.shape[1]
    attn, mx = model.layers[0].attn, model.layers[0].attn.mixer

    def rms(t, gain):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gain

    with torch.no_grad():
        h0 = model.embed.weight[x]  # H_0
        h = rms(h0, model.layers[0].attn_norm.weight)  # the layer's pre-normed input
        raw = {c: (h @ getattr(attn, f"{c}_proj").weight.t()).view(2, T, H, hd) for c in "qkvg"}
        anc = (h0 @ model.anchor.proj.weight.t()).split(H * hd, dim=-1)  # eq. 5, q/k/v/g
        gam = torch.sigmoid(F.gelu(h @ mx.dynamic.fc1.weight.t()) @ mx.dynamic.fc2.weight.t() + mx.dynamic.fc2.bias)
        mixed = {}
        for i, c in enumerate("qkvg"):  # eq. 7
            a = rms(anc[i].view(2, T, H, hd), model.anchor.norms[c].norm.weight)
            l1, l2 = mx.anchor_coef[c].view(H, hd), mx.current_coef[c].view(H, hd)
            mixed[c] = (l1 * gam[..., 2 * i, None, None]) * a + (l2 * gam[..., 2 * i + 1, None, None]) * raw[c]
        cos, sin = model.rope.tables(0, T)

        def probs(q, k):
            q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
            return attention_probs(apply_rope(q.transpose(1, 2), cos, sin), apply_rope(k.transpose(1, 2), cos, sin))

        p = probs(mixed["q"], mixed["k"])
        p_raw = probs(raw["q"], raw["k"])
    ent = float(-(p * p.clamp_min(1e-30).log()).sum(-1).mean())
    ent_raw = float(-(p_raw * p_raw.clamp_min(1e-30).log()).sum(-1).mean())
    assert abs(ent - ent_raw) > 1e-3  # mixing moves the statistic: the check can tell the two apart
    assert stats["entropy"][0] == pytest.approx(ent, rel=1e-5)
    assert stats["sink_share"][0] == pytest.approx(float(p[:, :, 1:, 0].mean()), rel=1e-5)
    assert stats["gate_activation"][0] == pytest.approx(float(torch.sigmoid(mixed["g"]).mean()), rel=1e-5)
    assert stats["gate_activation"][0] != pytest.approx(float(torch.sigmoid(raw["g"]).mean()), rel=1e-3)


def test_entropy_of_uniform_attention_is_log_t():
    model = build_model(micro("base-transformer-tiny"))
    with torch.no_grad():  # zero q projections -> uniform causal attention in every layer
        for layer in model.layers:
            layer.attn.q_proj.weight.zero_()
    T = 8
    stats = attention_statistics(model, [(torch.randint(0, 259, (1, T)), None)])
    expect = sum(math.log(t + 1) for t in range(T)) / T
    assert stats["entropy"][0] == pytest.approx(expect, rel=1e-5)
    assert stats["sink_share"][0] == pytest.approx(sum(1 / (t + 1) for t in range(1, T)) / (T - 1), rel=1e-5)
    assert stats["gate_activation"][0] is None


def test_representation_measures():
    a = torch.randn(1, 5, 16)
    states = [[a, a.clone(), -a]]
    cos = cross_layer_cosine(states)
    assert cos[0][1] == pytest.approx(1.0, abs=1e-6) and cos[0][2] == pytest.approx(-1.0, abs=1e-6)
    same = torch.ones(1, 4, 8)
    assert token_similarity([[same]])[0] == pytest.approx(1.0, abs=1e-6)
    assert effective_rank(torch.eye(6)) == pytest.approx(6.0, rel=1e-6)
    assert effective_rank(torch.outer(torch.randn(10), torch.randn(5))) == pytest.approx(1.0, abs=1e-6)


def test_anchor_removal_changes_the_exo_model_and_is_restored():
    torch.manual_seed(0)
    model = build_model(micro("exo-e-tiny"))
    x = torch.randint(0, 259, (2, 12))
    batches = [(x, x)]
    before = representation_statistics(model, batches)
    res = anchor_removal(model, batches)
    assert res["available"] and res["loss_before"] != res["loss_after"]
    assert res["token_similarity_before"] == pytest.approx(before["token_similarity"])
    assert res["token_similarity_after"] != pytest.approx(before["token_similarity"])
    assert not any(m._forward_pre_hooks for m in model.modules())  # the removal hooks are gone again
    assert anchor_removal(build_model(micro("gated-tiny")), batches)["available"] is False


def test_mixing_coefficients_shapes():
    model = build_model(micro("nures-h-tiny"))
    with torch.no_grad():
        mixers(model)[0][1].anchor_coef["q"].fill_(2.0)
    coefs = mixing_coefficients(model)
    assert set(coefs) == {"q", "k", "v", "g"}
    assert coefs["q"]["layers"] == [1, 2]  # NuRes: layer 0 is the anchor
    assert len(coefs["q"]["anchor"][0]) == 2  # headwise: one column per head
    assert coefs["q"]["ratio"][0] == pytest.approx([4.0, 4.0])


# ----------------------------------------------------------------------------- paper findings
def test_fig4_ratio_by_layer_and_c1_near_zero_share():
    from nexus.analysis.exo_findings import lambda_ratio_by_layer, near_zero_anchor_share

    model = build_model(micro("exo-e-tiny"))  # elementwise: 2 heads x 16 channels per component
    with torch.no_grad():
        for i, mx in mixers(model):
            for c in mx.components:
                a, b = mx.anchor_coef[c], mx.current_coef[c]
                a.copy_(torch.linspace(0.5, 1.5, a.numel()) * (i + 1))
                b.fill_(2.0)
        first = mixers(model)[0][1]
        first.anchor_coef["v"][:5] = torch.tensor([0.0, 5e-4, -5e-4, 1e-3, -2e-3])  # 3 are < 0.001 in magnitude
    coefs = mixing_coefficients(model)
    by_layer = lambda_ratio_by_layer(coefs)
    n = 32
    lin = torch.linspace(0.5, 1.5, n)
    assert by_layer["q"]["layers"] == [0, 1, 2]
    for i in range(3):  # mean over channels of lambda1 / lambda2
        assert by_layer["q"]["mean_ratio"][i] == pytest.approx(float((lin * (i + 1) / 2.0).mean()), rel=1e-6)
        assert by_layer["k"]["mean_lambda2"][i] == pytest.approx(2.0)
    v0 = lin.clone()
    v0[:5] = torch.tensor([0.0, 5e-4, -5e-4, 1e-3, -2e-3])
    assert by_layer["v"]["mean_lambda1"][0] == pytest.approx(float(v0.mean()), rel=1e-6)
    nz = near_zero_anchor_share(coefs)
    assert nz["per_component"]["v"] == pytest.approx(3 / (3 * n)) and nz["per_component"]["q"] == 0
    assert nz["all"] == pytest.approx(3 / (4 * 3 * n))


def test_first_layer_gate_selectivity_summary():
    from nexus.analysis.exo_findings import gate_selectivity

    g = torch.tensor([0.05, 0.05, 0.2, 0.5, 0.95, 0.99, 0.6, 0.08])
    sel = gate_selectivity(g)
    assert sel["mean"] == pytest.approx(float(g.mean()))
    assert sel["share_below_0.1"] == pytest.approx(3 / 8) and sel["share_above_0.9"] == pytest.approx(2 / 8)
    assert sum(sel["histogram"]) == pytest.approx(1.0) and sel["histogram"][1] == pytest.approx(3 / 8)  # [0.05, 0.1)
    # attention_statistics feeds it the first layer's sigmoid(g_hat), all of it
    torch.manual_seed(0)
    model = build_model(micro("gated-tiny"))
    x = torch.randint(0, 259, (2, 6))
    stats = attention_statistics(model, [(x, None)])
    with torch.no_grad():
        h = model.layers[0].attn_norm(model.embed(x))
        act = torch.sigmoid(model.layers[0].attn.project(h)["g"])
    assert stats["first_layer_gate"]["mean"] == pytest.approx(stats["gate_activation"][0], rel=1e-6)
    assert stats["first_layer_gate"]["share_below_0.1"] == pytest.approx(float((act < 0.1).float().mean()))
    assert attention_statistics(build_model(micro("base-transformer-tiny")), [(x, None)])["first_layer_gate"] is None


@pytest.mark.parametrize(
    "curve,onset,share",
    [
        ([0.2, 0.5, 0.3, 0.4, 0.6, 0.7], 2, 3 / 5),  # minimum after layer 2 of 5: layers 3-5 refine
        ([0.2, 0.6, 0.7, 0.4, 0.5, 0.45, 0.8], 3, 3 / 6),  # two minima (3 and 5): the lower one counts
        ([0.1, 0.2, 0.3, 0.4], None, None),  # no interior local minimum
    ],
)
def test_refinement_stage_share_from_token_similarity(curve, onset, share):
    from nexus.analysis.exo_findings import refinement_stage

    out = refinement_stage(curve)
    assert out["onset_layer"] == onset and out["n_layers"] == len(curve) - 1
    assert (out["share"] is None) if share is None else out["share"] == pytest.approx(share)


# ----------------------------------------------------------------------------- appendix F
def _counts(cfg) -> tuple[int, int, object]:
    """(non-embedding params without RMSNorm gains, as the paper counts them; the meta model)."""
    from nexus.models.accounting import build_on_meta
    from nexus.models.layers import RMSNorm

    model = build_on_meta(cfg)
    gains = sum(m.weight.numel() for m in model.modules() if isinstance(m, RMSNorm) and m.weight is not None)
    emb = model.embed.weight.numel() + (model.lm_head.weight.numel() if model.lm_head is not None else 0)
    return sum(p.numel() for p in model.parameters()) - emb - gains, model


@pytest.mark.parametrize("d,L", [(64, 3), (1024, 32)])
def test_param_and_flop_overheads_match_appendix_f(d, L):
    from nexus.analysis.flops import forward_flops_per_token

    def cfg(preset):
        m = get_preset(preset).model
        m.d_model, m.n_layers, m.n_heads, m.ffn_hidden = d, L, 16 if d >= 1024 else 4, 2 * d
        return m

    d_dm = get_preset("exo-dynamic-e-tiny").model.mixing.dynamic_hidden
    (base, gated), (static, _), (dynamic, dyn_model) = (
        _counts(cfg(n)) for n in ("gated-tiny", "exo-e-tiny", "exo-dynamic-e-tiny")
    )
    # parameters, RMSNorm gains excluded as in the paper; DM's second matrix + bias (16*8 + 8) are the
    # "negligible" 136 per layer of eq. 11
    assert base == 11 * L * d * d  # eq. 8 with the FFN's 6 d^2
    assert static - base == 4 * d * d + 8 * L * d  # eq. 12
    assert dynamic - base == 4 * d * d + 8 * L * d + L * d * d_dm + L * (16 * 8 + 8)  # eq. 13
    # FLOPs: eq. 17-18; the DM's 16x8 matmul (2*16*8 per layer) is what the paper's "approx" drops
    seq = 64
    delta = forward_flops_per_token(dyn_model, seq) - forward_flops_per_token(gated, seq)
    assert delta == 8 * d * d + L * (2 * d * d_dm + 12 * d) + L * 2 * 16 * 8


def test_executed_flop_overhead_of_the_450m_preset_matches_appendix_f():
    """torch's FlopCounterMode counts the matmuls the 450M presets really run (on the meta device, so
    no memory), on the anchor path they take (64 tokens < 57,601 vocabulary rows: direct). The
    paper's base is 22 L d^2 per token, its overhead 8 d^2 + L (2 d d_DM + 12 d), about 1.33% at
    L = 32, d = 1024 (eq. 19). The counter sees the matmuls only, not the 12 d elementwise mixing."""
    from torch.utils.flop_counter import FlopCounterMode

    from nexus.models.accounting import build_on_meta

    T = 64

    def executed(name):
        m = get_preset(name).model
        m.n_layers = 32  # the paper's example L (the 29-layer presets differ only in depth)
        model = build_on_meta(m)
        with FlopCounterMode(display=False) as counter:
            model(torch.randint(0, 100, (1, T), device="meta"))
        return model, counter.get_total_flops() / T, counter.get_flop_counts()

    gated, g_total, g_parts = executed("gated-450m")
    dyn, d_total, _ = executed("exo-dynamic-e-450m")
    d, L, d_dm = gated.cfg.d_model, gated.cfg.n_layers, dyn.cfg.mixing.dynamic_hidden
    assert dyn.cfg.vocab_size > T  # the direct anchor path (the table gather needs more tokens than rows)
    projections = [
        f"TransformerLM.layers.{i}.{p}"
        for i in range(L)
        for p in (
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.g_proj",
            "attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    ]
    base = sum(sum(g_parts[n].values()) for n in projections) / T
    assert base == 22 * L * d * d  # eq. 16: the preset's layers are the paper's 11 L d^2 parameters
    delta = d_total - g_total
    assert delta == 8 * d * d + L * (2 * d * d_dm + 2 * 16 * 8)  # eq. 17 + eq. 18's matmuls, once per token
    assert delta / base == pytest.approx(0.0133, abs=1e-3)  # "approximately 1.33%" less the 12 d mixing


# ----------------------------------------------------------------------------- CLI
def test_cli_params_and_flops_for_a_preset(tmp_path, capsys):
    rc = main(["analyze", "params", "--preset", "exo-e-450m", "--out", str(tmp_path / "p"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and round(out["total"] / 1e6) == 457
    assert json.loads((tmp_path / "p" / "params.json").read_text())["total"] == out["total"]
    rc = main(["analyze", "flops", "--preset", "exo-dynamic-e-tiny", "--out", str(tmp_path / "f"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["breakdown"]["anchor"] == 2 * 128 * 4 * 128 and out["counting"] == "analytic"
    rc = main(
        [
            "analyze",
            "flops",
            "--preset",
            "nexusformer-micro",
            "--counting",
            "calflops",
            "--out",
            str(tmp_path / "c"),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    cats = out["calflops_categories"]
    assert rc == 0 and cats["matmul"] == out["analytic_forward_flops_per_token"]
    assert out["forward_flops_per_token"] == cats["total"] > cats["matmul"] and cats["activation"] > 0


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from nexus.train.trainer import Trainer

    root = tmp_path_factory.mktemp("run")
    text = root / "corpus.txt"  # a small local corpus: tokenizing the embedded one costs most of a minute here
    words = ["anchor", "layer", "token", "value", "query", "key", "gate", "mixing", "exogenous", "norm"]
    g = torch.Generator().manual_seed(0)
    text.write_text(
        "\n\n".join(" ".join(words[int(i)] for i in torch.randint(0, 10, (40,), generator=g)) for _ in range(60))
    )
    cfg = get_preset("exo-dynamic-e-tiny")
    cfg.data.source = str(text)
    cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers, cfg.model.max_seq_len = 32, 2, 2, 32
    cfg.data.seq_len = 32
    t = cfg.train
    t.steps, t.batch_size, t.warmup_steps, t.eval_every, t.eval_batches = 4, 4, 1, 0, 1
    t.out_dir = str(root / "out")
    return Trainer(cfg, quiet=True).fit()["checkpoint"]


@pytest.mark.parametrize(
    "kind,files",
    [
        (
            "attention",
            ["attention.json", "entropy.png", "sink_share.png", "gate_activation.png", "first_layer_gate.png"],
        ),
        ("mixing", ["mixing.json", "lambda_ratio_q.png", "lambda_current_g.png", "lambda_ratio_by_layer.png"]),
        (
            "representations",
            ["representations.json", "cross_layer_cosine.png", "token_similarity.png", "effective_rank.png"],
        ),
    ],
)
def test_cli_analyses_write_json_and_png(kind, files, tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / kind
    rc = main(
        ["analyze", kind, "--checkpoint", tiny_checkpoint, "--out", str(out), "--batches", "1", "--batch-size", "2"]
    )
    text = capsys.readouterr().out
    assert rc == 0
    for f in files:
        assert (out / f).is_file() and (out / f).stat().st_size > 0
    # the closing line names every file the analysis left in --out (not only the JSON)
    written = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert set(files) <= set(written)
    assert len(written) > 1 and f"wrote {len(written)} files to {out}: {', '.join(written)}" in text
    data = json.loads((out / f"{kind}.json").read_text())
    if kind == "attention":
        assert len(data["entropy"]) == 2 and all(0 <= s <= 1 for s in data["sink_share"])
    if kind == "attention":
        assert (
            data["first_layer_gate"]["mean"] == pytest.approx(data["gate_activation"][0]) and "first-layer gate" in text
        )
    if kind == "representations":
        assert data["anchor_removal"]["available"] and len(data["cross_layer_cosine"]) == 3
        assert data["refinement_stage"]["n_layers"] == 2 and "refinement stage" in text
    if kind == "mixing":
        assert data["components"]["v"]["layers"] == [0, 1]
        assert len(data["ratio_by_layer"]["q"]["mean_ratio"]) == 2 and 0 <= data["near_zero_lambda1"]["all"] <= 1
        assert "near-zero lambda1" in text


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["analyze", "bogus", "--preset", "exo-e-tiny"], "KIND='bogus'"),
        (["analyze", "attention", "--checkpoint", "/nonexistent/dir"], "--checkpoint"),
        (["analyze", "params"], "--checkpoint DIR or --preset NAME"),
        (
            ["analyze", "params", "--preset", "exo-e-tiny", "--model.mixing.granularity", "rowwise"],
            "model.mixing.granularity",
        ),
    ],
)
def test_cli_bad_input_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # nothing half-written
