"""SPARKLING width growth: exact mode preserves logits, rms mode preserves activation RMS on a trained
model, the paper's scaling factors, bad input, and grown checkpoints that reload and keep training."""

import math

import pytest
import torch

from nexus.config import ConfigError, MLPOptions, ModelConfig, RunConfig, TrainConfig
from nexus.growth import grow
from nexus.growth.diagnostics import probe_batch
from nexus.growth.width import both_copy_alpha
from nexus.models import build_model


def _tiny(moe: bool, tie: bool = True) -> RunConfig:
    m = ModelConfig(
        d_model=32,
        n_layers=2,
        n_heads=2,
        n_kv_heads=1,
        ffn_hidden=64,
        tie_embeddings=tie,
        mlp=MLPOptions.make("moe", n_experts=4, top_k=2, expert_hidden=32) if moe else MLPOptions(),
    )
    return RunConfig(model=m, train=TrainConfig(steps=100, lr=3e-3))


@pytest.fixture(scope="module")
def trained():
    """Tiny dense (tied and untied head) and MoE models trained on real text, so their weights have
    the structure a random init lacks."""
    ids = probe_batch(259, batch=4, seq_len=48)
    out = {}
    for key, moe, tie in (("dense", False, True), ("untied", False, False), ("moe", True, True)):
        torch.manual_seed(0)
        cfg = _tiny(moe, tie)
        model = build_model(cfg.model)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(15):
            loss = model(ids[:, :-1], labels=ids[:, 1:]).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        out[key] = (model.eval(), cfg)
    return out, ids


EXACT_CASES = [
    ("dense", {"hidden": 64, "init": "copy,copy"}),
    ("dense", {"hidden": 64, "init": "copy,zero"}),
    ("dense", {"hidden": 48, "init": "zero,random"}),  # any width: zero new channels, eps and fan-in rescaled
    ("untied", {"hidden": 64, "init": "copy,copy", "split": "random", "perturb": 0.3}),
    ("untied", {"hidden": 40, "init": "zero,copy"}),
    ("dense", {"ffn": 100, "init": "copy,copy", "split": "1:2", "perturb": 0.5}),  # 1.56x, uneven groups
    ("dense", {"ffn": 96, "init": "random,zero"}),
    ("dense", {"ffn": 96, "init": "zero,random"}),
    ("moe", {"expert_inner": 56, "init": "copy,copy"}),
    ("moe", {"expert_inner": 64, "hidden": 64, "init": "copy,copy"}),
]


@pytest.mark.parametrize("which,spec", EXACT_CASES)
def test_exact_mode_leaves_logits_unchanged(trained, which, spec):
    models, ids = trained
    model, cfg = models[which]
    new_model, new_cfg, _, res = grow(model, cfg, {"family": "width", "preserve": "exact", **spec})
    x = ids[:, :-1]
    with torch.no_grad():
        before, after = model(x).logits, new_model.eval()(x).logits
    assert sum(p.numel() for p in new_model.parameters()) > sum(p.numel() for p in model.parameters())
    torch.testing.assert_close(after, before, rtol=0, atol=2e-4)
    # the same growth without preservation does change the function (the test can fail)
    naive, *_ = grow(model, cfg, {"family": "width", "preserve": "none", **{**spec, "init": "copy,copy"}})
    with torch.no_grad():
        assert (naive.eval()(x).logits - before).abs().max() > 1e-2


RMS_CASES = [
    ("dense", {"hidden": 64}),
    ("dense", {"ffn": 96}),
    ("dense", {"ffn": 128, "hidden": 64}),
    ("moe", {"expert_inner": 48}),
    ("moe", {"expert_inner": 64, "hidden": 64}),
]


@pytest.mark.parametrize("which,spec", RMS_CASES)
def test_rms_mode_keeps_activation_rms_within_5_percent(trained, which, spec):
    models, _ = trained
    model, cfg = models[which]
    *_, res = grow(model, cfg, {"family": "width", "init": "copy,copy", "preserve": "rms", **spec})
    ratios = res.report["rms_ratio_per_layer"]
    assert len(ratios) == cfg.model.n_layers + 1
    assert all(abs(r - 1) <= 0.05 for r in ratios), ratios
    *_, naive = grow(model, cfg, {"family": "width", "init": "copy,copy", "preserve": "none", **spec})
    assert max(abs(r - 1) for r in naive.report["rms_ratio_per_layer"]) > 0.05  # naive copy inflates RMS


def test_fan_in_factors_follow_the_paper():
    torch.manual_seed(0)
    cfg = _tiny(False)
    model = build_model(cfg.model)
    down = model.layers[0].mlp.down_proj.weight.detach()
    # both sides copied, c = 0.5: every column (old and copied) times 1/sqrt(1 + 3c)
    new, *_ = grow(model, cfg, {"family": "width", "ffn": 96, "init": "copy,copy", "preserve": "rms"})
    src = torch.arange(96) % 64
    torch.testing.assert_close(new.layers[0].mlp.down_proj.weight, down[:, src] / math.sqrt(2.5))
    # random fan-in: all columns times sqrt(d/d'), new ones drawn at the old weights' scale
    new, *_ = grow(model, cfg, {"family": "width", "ffn": 96, "init": "copy,random", "preserve": "rms"})
    w = new.layers[0].mlp.down_proj.weight
    torch.testing.assert_close(w[:, :64], down * math.sqrt(64 / 96))
    assert float(w[:, 64:].detach().std()) == pytest.approx(float(down.std()) * math.sqrt(64 / 96), rel=0.2)
    # c > 1 (3x): 1/(1+c); eq. 17's alternative form agrees
    assert both_copy_alpha(64, 192) == pytest.approx(1 / 3)
    assert both_copy_alpha(64, 96) == pytest.approx(math.sqrt(64 / (3 * 96 - 2 * 64)))
    # tied head: the fan-in factor becomes the logit coefficient; head size and count are kept
    new, new_run, *_ = grow(model, cfg, {"family": "width", "hidden": 48, "init": "random,random"})
    new_cfg = new_run.model
    assert new_cfg.logit_scale == pytest.approx(math.sqrt(32 / 48))
    assert new_cfg.head_dim == 16 and new_cfg.n_heads == 2 and new_cfg.d_model == 48
    assert new.layers[0].attn.q_proj.weight.shape == (32, 48)


def test_zero_fan_out_never_zeroes_both_swiglu_sides():
    torch.manual_seed(0)
    cfg = _tiny(False)
    model = build_model(cfg.model)
    new, *_ = grow(model, cfg, {"family": "width", "ffn": 96, "init": "zero,random"})
    mlp = new.layers[0].mlp
    assert mlp.up_proj.weight[64:].abs().max() == 0 and mlp.gate_proj.weight[64:].abs().min() > 0
    x = torch.randint(0, 259, (2, 16))
    new(x, labels=x).loss.backward()
    assert mlp.up_proj.weight.grad[64:].abs().sum() > 0  # the new units train


@pytest.mark.parametrize(
    "spec,field",
    [
        ({"hidden": 16}, "width.hidden=16"),
        ({"expert_inner": 64}, "width.expert_inner=64"),
        ({"ffn": 96, "init": "random,random", "preserve": "exact"}, "--preserve exact"),
        ({"hidden": 48, "init": "copy,copy", "preserve": "exact"}, "multiple of d_model"),
        ({"ffn": 96, "init": "zero,zero"}, "--init zero,zero"),
        ({"ffn": 96, "init": "copy,clone"}, "--init="),
        ({"ffn": 96, "preserve": "strict"}, "--preserve="),
        ({"ffn": 96, "optimizer_state": "mirror"}, "--optimizer-state="),
        ({"ffn": 96, "rewarmup": "fast"}, "--rewarmup="),
        ({"ffn": 64}, "nothing to grow"),
    ],
)
def test_bad_input_is_one_clear_config_error(spec, field):
    cfg = _tiny(False)
    model = build_model(cfg.model)
    with pytest.raises(ConfigError) as e:
        grow(model, cfg, {"family": "width", **spec})
    assert field in str(e.value) and "valid" in str(e.value)


def test_untied_head_and_gains_grow_consistently():
    torch.manual_seed(0)
    cfg = _tiny(False, tie=False)
    model = build_model(cfg.model)
    torch.nn.init.normal_(model.norm.weight, 1.0, 0.1)
    new, new_run, _, res = grow(model, cfg, {"family": "width", "hidden": 64, "init": "copy,copy"})
    assert new_run.model.logit_scale == 1.0  # untied: the head's own columns carry the factor
    torch.testing.assert_close(new.norm.weight[32:], model.norm.weight)  # copied gains, not rescaled
    torch.testing.assert_close(new.lm_head.weight[:, 32:], model.lm_head.weight / 2)  # alpha = 1/2 at c = 1
    pm = res.param_maps["lm_head.weight"]
    assert pm.old_slices == (slice(0, 259), slice(0, 32)) and 1 in pm.copy_source
