"""MoE MLP: the fast grouped forward equals a per-token loop; aux losses; routing; training."""

import pytest
import torch

from nexus.config import MLPOptions, ModelConfig
from nexus.models import build_model
from nexus.models.reference.moe_ref import moe_aux_reference, moe_forward_reference
from nexus.models.transformer import build_mlp


def moe_cfg(**kw) -> ModelConfig:
    moe = MLPOptions.make(
        "moe", n_experts=kw.pop("n_experts", 6), top_k=kw.pop("top_k", 2), expert_hidden=kw.pop("expert_hidden", 24)
    )
    return ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=12, mlp=moe, **kw)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_fast_forward_matches_per_token_reference(top_k):
    torch.manual_seed(top_k)
    cfg = moe_cfg(top_k=top_k)
    moe = build_mlp(cfg)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(3, 7, cfg.d_model)
    fast = moe(x)
    ref = moe_forward_reference(moe, x)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    # gradients agree too (the grouped path scatters back with index_add)
    g = torch.randn_like(fast)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    (moe(xa) * g).sum().backward()
    ga = xa.grad.clone()
    (moe_forward_reference(moe, xb) * g).sum().backward()
    torch.testing.assert_close(ga, xb.grad, rtol=1e-4, atol=1e-5)


def test_aux_losses_match_reference_and_are_weighted():
    torch.manual_seed(0)
    cfg = moe_cfg()
    cfg.mlp.lb_loss_coef, cfg.mlp.router_z_coef = 0.5, 0.25
    moe = build_mlp(cfg).train()
    torch.nn.init.normal_(moe.router.weight, std=0.5)
    x = torch.randn(2, 9, cfg.d_model)
    moe(x)
    lb, z = moe_aux_reference(moe, x)
    assert moe.aux_losses_out["moe_lb"].item() == pytest.approx(0.5 * lb / cfg.n_layers, rel=1e-5)
    assert moe.aux_losses_out["moe_z"].item() == pytest.approx(0.25 * z / cfg.n_layers, rel=1e-5)
    # perfectly balanced routing with uniform probabilities gives lb = 1 (its minimum)
    torch.nn.init.zeros_(moe.router.weight)
    logits, probs, _, _ = moe.route(torch.randn(6, cfg.d_model))
    balanced = torch.arange(12).remainder(6).view(6, 2)
    assert moe.aux_losses(logits, probs, balanced)["moe_lb"].item() == pytest.approx(0.5 / cfg.n_layers)


def test_model_with_moe_adds_aux_loss_once_and_trains():
    torch.manual_seed(0)
    cfg = moe_cfg(vocab_size=50)
    model = build_model(cfg)
    x = torch.randint(0, 50, (4, 16))
    y = torch.roll(x, -1, 1)
    out = model(x, labels=y)
    aux = sum(float(v.detach()) for v in out.aux_losses.values())
    assert set(out.aux_losses) == {"moe_lb", "moe_z"}
    assert out.loss.item() == pytest.approx(out.ce_loss.item() + aux, rel=1e-6)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = out.loss.item()
    for _ in range(10):
        out = model(x, labels=y)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert out.loss.item() < first - 0.3
    # every expert and the router received gradient at some point of routing
    assert model.layers[0].mlp.router.weight.grad.abs().sum() > 0


def test_gqa_and_decoupled_head_dim_shapes():
    cfg = moe_cfg(vocab_size=40)
    model = build_model(cfg)
    attn = model.layers[0].attn
    assert attn.q_proj.weight.shape == (4 * 12, 32) and attn.k_proj.weight.shape == (2 * 12, 32)
    assert len(model.layers[0].mlp.experts) == 6 and model.layers[0].mlp.experts[0].up_proj.weight.shape == (24, 32)


def test_flops_count_active_experts_only():
    cfg = moe_cfg(n_experts=8, top_k=2)
    few = build_mlp(cfg).flops_per_token(16)
    cfg2 = moe_cfg(n_experts=8, top_k=4)
    more = build_mlp(cfg2).flops_per_token(16)
    cfg3 = moe_cfg(n_experts=16, top_k=2)
    many_experts = build_mlp(cfg3).flops_per_token(16)
    expert_matmuls = 2 * 32 * 24 * 3
    assert more - few > 2 * expert_matmuls  # two more active experts
    assert many_experts - few < 2 * 32 * 8 + 100  # only the router grows with the expert count


def test_bad_top_k_is_a_config_error():
    from nexus.config import ConfigError

    cfg = moe_cfg(top_k=7)
    errors = []
    cfg.validate(errors)
    assert any("mlp.top_k" in e for e in errors)
    with pytest.raises(ConfigError):
        from nexus.config import RunConfig

        RunConfig(model=cfg).validate()
