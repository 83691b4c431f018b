"""models/lm_loss.py against the definitions: mean cross-entropy over the valid targets (one valid target
included), the caller's own main loss, auxiliary losses added once each and summed per name over layers."""

import pytest
import torch
import torch.nn.functional as F

from nexus.models.lm_loss import AuxLossModule, LMOutput, collect_aux_losses, cross_entropy_mean, lm_loss


def _logits_labels():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 7, (2, 5), generator=g)
    return logits, labels


def test_mean_cross_entropy_over_valid_targets_even_one():
    logits, labels = _logits_labels()
    labels[0, :3] = -100
    flat, lab = logits.reshape(-1, 7), labels.reshape(-1)
    keep = lab != -100
    want = -torch.log_softmax(flat[keep], -1).gather(1, lab[keep, None]).mean()
    torch.testing.assert_close(cross_entropy_mean(logits, labels).double(), want, atol=0, rtol=1e-6)
    one = torch.full_like(labels, -100)
    one[1, 2] = labels[1, 2]  # a single valid target: its own CE, not half of it
    want_one = -torch.log_softmax(logits[1, 2], -1)[labels[1, 2]]
    torch.testing.assert_close(cross_entropy_mean(logits, one).double(), want_one, atol=0, rtol=1e-6)


def test_main_loss_and_auxiliary_losses_are_each_added_once():
    logits, labels = _logits_labels()
    ce = F.cross_entropy(logits.reshape(-1, 7).float(), labels.reshape(-1))
    aux = {"balance": torch.tensor(0.25), "router_z": torch.tensor(0.5)}
    out = lm_loss(LMOutput(logits=logits, aux_losses=dict(aux)), labels, z_loss=0.0)
    torch.testing.assert_close(out.loss, ce + 0.75, atol=0, rtol=1e-6)
    main = torch.tensor(3.0)  # deep supervision's summed CE: the loss starts from it, ce_loss stays the CE
    out = lm_loss(LMOutput(logits=logits, aux_losses=dict(aux)), labels, z_loss=0.0, main=main)
    torch.testing.assert_close(out.loss, torch.tensor(3.75), atol=0, rtol=1e-6)
    torch.testing.assert_close(out.ce_loss, ce, atol=0, rtol=1e-6)


def test_auxiliary_losses_are_summed_per_name_over_layers():
    class Layer(AuxLossModule):
        def __init__(self, losses):
            super().__init__()
            self.aux_losses_out = losses

    model = torch.nn.Sequential(
        Layer({"balance": torch.tensor(1.0)}),
        torch.nn.Linear(2, 2),
        Layer({"balance": torch.tensor(2.5), "router_z": torch.tensor(0.125)}),
    )
    got = collect_aux_losses(model)
    assert set(got) == {"balance", "router_z"}
    assert float(got["balance"]) == 3.5 and float(got["router_z"]) == 0.125


# ----------------------------------------------------------------------------- chunked head + cross-entropy
def _reference_head_loss(h, w, labels, scale, z_loss):
    """The loss from its definition on the full logits: mean over valid targets of -log softmax(z)[y], plus
    z_loss times the mean of logsumexp(z)^2, with z = scale * h W^T."""
    z = scale * h.reshape(-1, h.shape[-1]) @ w.t()
    y = labels.reshape(-1)
    keep = y != -100
    lse = torch.logsumexp(z[keep], -1)
    ce = (lse - z[keep].gather(1, y[keep, None])[:, 0]).mean()
    return ce + z_loss * lse.square().mean(), ce


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])  # 7 does not divide the 14 tokens; 64 is one chunk
@pytest.mark.parametrize("scale, z_loss", [(1.0, 0.0), (0.7, 0.3)])
def test_chunked_head_loss_matches_the_definition_in_values_and_gradients(chunk, scale, z_loss):
    from nexus.models.chunked_ce import chunked_head_cross_entropy

    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 5, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 11, (2, 7), generator=g)
    labels[0, 1:4] = -100
    loss, ce, n = chunked_head_cross_entropy(h, w, labels, chunk, scale, z_loss)
    gh, gw = torch.autograd.grad(3.0 * loss, (h, w))  # an upstream factor: the backward scales the stored gradients
    want, want_ce = _reference_head_loss(h, w, labels, scale, z_loss)
    rh, rw = torch.autograd.grad(3.0 * want, (h, w))
    assert int(n) == 11 and not ce.requires_grad
    torch.testing.assert_close(loss, want, atol=0, rtol=1e-12)
    torch.testing.assert_close(ce, want_ce.detach(), atol=0, rtol=1e-12)
    torch.testing.assert_close(gh, rh, atol=1e-14, rtol=1e-12)
    torch.testing.assert_close(gw, rw, atol=1e-14, rtol=1e-12)


def test_chunked_head_loss_without_a_valid_target_is_zero_with_zero_gradients():
    from nexus.models.chunked_ce import chunked_head_cross_entropy

    h = torch.randn(1, 4, 3, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    loss, _, n = chunked_head_cross_entropy(h, w, torch.full((1, 4), -100), 2)
    loss.backward()
    assert int(n) == 0 and float(loss.detach()) == 0.0
    assert not h.grad.any() and not w.grad.any()


def _model_pair(**overrides):
    from nexus.models import build_model
    from nexus.presets import get_preset

    cfg = get_preset("baseline-micro").model
    for k, v in overrides.items():
        setattr(cfg, k, v)
    cfg.validate([], "model")
    torch.manual_seed(0)
    plain = build_model(cfg).train()
    chunked_cfg = type(cfg)(**{**cfg.__dict__, "loss_chunk_tokens": 13})
    chunked = build_model(chunked_cfg).train()
    chunked.load_state_dict(plain.state_dict())
    return cfg, plain, chunked


def _loss_and_grads(model, x, y):
    model.zero_grad(set_to_none=True)
    out = model(x, labels=y)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("tied", [True, False])
def test_chunked_loss_is_the_plain_paths_loss_in_fp32_values_and_gradients(tied):
    """The model's training loss with model.loss_chunk_tokens against today's path (full logits): the same
    loss, CE and every parameter's gradient to fp32 rounding (only the order of the sums differs)."""
    cfg, plain, chunked = _model_pair(tie_embeddings=tied, z_loss=1e-2, logit_scale=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (3, 20), generator=g)
    y = torch.randint(0, cfg.vocab_size, (3, 20), generator=g)
    y[1, :5] = -100
    a, ga = _loss_and_grads(plain, x, y)
    b, gb = _loss_and_grads(chunked, x, y)
    assert b.logits is None and a.logits is not None  # the chunked path never formed the logits
    torch.testing.assert_close(b.loss, a.loss, atol=0, rtol=1e-6)
    torch.testing.assert_close(b.ce_loss, a.ce_loss.detach(), atol=0, rtol=1e-6)
    assert int(b.n_valid) == int(a.n_valid) == 55
    assert set(ga) == set(gb)
    for name in ga:
        torch.testing.assert_close(gb[name], ga[name], atol=1e-7, rtol=1e-5, msg=name)
    with torch.no_grad():  # evaluation keeps the logits
        assert chunked(x, labels=y).logits is not None


def test_chunked_loss_under_bf16_autocast_is_within_bf16_rounding_of_the_plain_path():
    """Under CPU bf16 autocast both paths run the head GEMM in bf16 and the softmax in fp32; the chunked one
    sums its weight gradient in fp32 over chunks, the plain one in one bf16 GEMM. Stated tolerance: loss
    within 1e-3 relative, each gradient within 0.8% of its largest entry of the plain path's (measured:
    <= 0.3%, the head/embedding only), and no farther from the fp32 gradient than 1.5x the plain path's
    own bf16 error (measured: 1.13x)."""
    cfg, plain, chunked = _model_pair()
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, cfg.vocab_size, (2, 24), generator=g)
    y = torch.randint(0, cfg.vocab_size, (2, 24), generator=g)
    _, exact = _loss_and_grads(plain, x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, ga = _loss_and_grads(plain, x, y)
        b, gb = _loss_and_grads(chunked, x, y)
    torch.testing.assert_close(b.loss.float(), a.loss.float(), atol=0, rtol=1e-3)
    for name in ga:
        big = float(exact[name].abs().max())
        torch.testing.assert_close(gb[name], ga[name], atol=0.008 * big, rtol=0, msg=name)
        err_plain, err_chunked = (float((gr - exact[name]).abs().max()) for gr in (ga[name], gb[name]))
        assert err_chunked <= 1.5 * err_plain, (name, err_chunked, err_plain)


def test_loss_chunk_tokens_refuses_a_negative_value():
    from nexus.config import ConfigError
    from nexus.config_overrides import parse_overrides
    from nexus.presets import get_preset

    cfg = get_preset("baseline-micro")
    parse_overrides(cfg, ["--model.loss_chunk_tokens", "-1"])
    with pytest.raises(ConfigError, match="loss_chunk_tokens"):
        cfg.validate()
