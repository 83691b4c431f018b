"""RecurrentLM against the v4.1 listing where the main tests leave it open: every config option reaching
the layer it names (the reference reads the config, not the layers' flags), the averaged deep-supervision
loss, z-loss and ignored labels on the final step, hidden states per supervision step, chunked prefill
through the conv history, the conv's and SwiGLU's FLOPs and init from their definitions, and the v4.1
Python API field by field. Float64 where the comparison is exact on paper."""

import math

import pytest
import torch
import torch.nn.functional as F
from tolerance_guard import atol_for

from nexus.config import ConfigError, ModelConfig
from nexus.kind_options.recurrent import RecurrentOptions
from nexus.models import build_model
from nexus.models.bitlinear import BitLinear
from nexus.models.lm_loss import IGNORE_INDEX
from nexus.models.recurrent import CausalDepthwiseConv, NexusConfig, NexusModel
from nexus.models.reference.recurrent_reference import (
    ref_causal_conv,
    ref_deep_supervision_loss,
    ref_f,
    ref_head,
    ref_logits,
)

V = 40


def make(n_sup=2, t_inner=2, d=12, ffn=24, layers=2, seed=0, double=True, model=None, **rec):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        arch=RecurrentOptions(n_sup=n_sup, t_inner=t_inner, **rec),
        vocab_size=V,
        d_model=d,
        n_layers=layers,
        n_heads=1,
        ffn_hidden=ffn,
        **(model or {}),
    )
    m = build_model(cfg)
    return m.double() if double else m


def ids(T=7, B=2, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "rec,model",
    [
        ({"subln": True, "act_quant": True}, {}),
        ({"subln": False}, {}),
        ({"ternary": False}, {}),
        ({}, {"norm_eps": 1e-2}),
    ],
)
def test_every_option_reaches_the_layers_it_names(rec, model):
    """The reference applies SubLN, 8-bit activations, ternary weights and the norm epsilon as the config
    says; the layers' own flags are never read, so an option dropped on the way fails here. norm_eps 1e-2
    is of the order of the residual stream's mean square at init (std 0.02 embeddings), so it shows."""
    net = make(model=model, **rec).eval()
    x = ids()
    with torch.no_grad():
        # gamma and the activation grid are fp32 by the layer's rule: 1e-5 of the logits' scale against float64
        want = ref_logits(net, x, 2, 2)
        torch.testing.assert_close(net(x).logits, want, rtol=1e-5, atol=atol_for(want, 1e-5))


def test_block_parameters_are_the_v41_listing():
    """conv (depthwise weight and bias), two RMSNorm gains, gate/up/down without bias: BitLinear when
    ternary, plain Linear when not."""
    for ternary in (True, False):
        block = make(ternary=ternary, double=False).layers[0]
        assert sorted(n for n, _ in block.named_parameters()) == [
            "conv.conv.bias",
            "conv.conv.weight",
            "conv_norm.weight",
            "mlp.down_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp_norm.weight",
        ]
        kinds = {type(block.mlp.gate_proj), type(block.mlp.up_proj), type(block.mlp.down_proj)}
        assert kinds == ({BitLinear} if ternary else {torch.nn.Linear})


def test_mean_supervision_loss_is_the_sum_over_n_sup():
    x, y = ids(), ids(seed=5)
    net = make(n_sup=3, sup_loss="mean").train()
    want = ref_deep_supervision_loss(net, x, y, 3, 2) / 3
    torch.testing.assert_close(net(x, labels=y).loss, want, rtol=1e-5, atol=0, check_dtype=False)  # CE is fp32


def test_z_loss_and_ignored_labels_act_on_the_final_supervision_step():
    """loss = sum_s CE_s + z * mean over valid targets of logsumexp(final logits)^2, with gradients through
    the final step's graph; ignored positions are placed where the logits are largest."""
    x, y = ids(), ids(seed=5)
    z = 0.3
    net = make(n_sup=2, t_inner=2, model={"z_loss": z}).train()
    with torch.no_grad():  # ignore the two positions whose z-loss term is largest
        y.view(-1)[torch.logsumexp(ref_logits(net, x, 2, 2), -1).flatten().topk(2).indices] = IGNORE_INDEX
    out = net(x, labels=y)
    grads = torch.autograd.grad(out.loss, [net.embed.weight, net.layers[0].conv.conv.weight])
    # reference: the v4.1 listing, plus the z-loss of the final step's logits (not detached)
    e = net.embed.weight[x]
    state = torch.zeros_like(e)
    ce = 0.0
    for _ in range(2):
        with torch.no_grad():
            state = ref_f(net, state + e)
        state = ref_f(net, state + e)
        logits = ref_head(net, state)
        ce = ce + F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=IGNORE_INDEX)
        final, state = logits, state.detach()
    valid = y.reshape(-1) != IGNORE_INDEX
    lse = torch.logsumexp(final.reshape(-1, V)[valid], dim=-1)
    want = ce + z * lse.pow(2).mean()
    torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=0, check_dtype=False)  # CE is fp32
    ref_grads = torch.autograd.grad(want, [net.embed.weight, net.layers[0].conv.conv.weight])
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4 * float(r.abs().max()))


def test_hidden_states_are_the_embedding_then_z_after_each_supervision_step():
    net = make(n_sup=2, t_inner=2).eval()
    x = ids()
    with torch.no_grad():
        assert net(x).hidden_states is None  # only on request
        states = net(x, return_hidden=True).hidden_states
        e = net.embed.weight[x]
        want, z = [e], torch.zeros_like(e)
        for _ in range(2):
            for _ in range(2):
                z = ref_f(net, z + e)
            want.append(z)
    assert len(states) == 3
    for got, ref in zip(states, want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=atol_for(ref, 1e-5))


def test_chunked_prefill_and_decode_equal_the_full_forward():
    """Chunks of 1, 2 and 3 tokens after the history exists, then single tokens: every chunk's logits equal
    the full forward's at the same positions (the conv history carries across chunks of any size)."""
    net = make(n_sup=2, t_inner=2, conv_kernel=3).eval()
    x = ids(T=10)
    cache = net.new_cache()
    with torch.no_grad():
        full = net(x).logits
        bounds = [0, 1, 3, 6, 7, 8, 10]
        parts = [net(x[:, a:b], cache=cache).logits for a, b in zip(bounds, bounds[1:])]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-9, atol=atol_for(full, 1e-9))


def test_conv_keeps_the_activation_dtype_with_fp32_weights_and_history():
    """bf16 activations through fp32 conv parameters and an fp32 history come back bf16 and equal the
    reference conv of the bf16 values to bf16 precision."""
    torch.manual_seed(0)
    conv = CausalDepthwiseConv(8, 3)
    x = torch.randn(1, 6, 8).to(torch.bfloat16)
    y, last = conv(x[:, :4])
    assert y.dtype == torch.bfloat16
    y2, _ = conv(x[:, 4:], last.float())
    assert y2.dtype == torch.bfloat16
    want = ref_causal_conv(x.float(), conv)
    got = torch.cat([y, y2], 1).float()
    assert ((got - want).abs() <= 2**-7 * want.abs().clamp_min(1.0)).all()
    from nexus.models.recurrent import ConvHistory

    hist = ConvHistory(last)
    y3, _ = conv(x[:, 4:5], hist)  # one decoded token through the ring buffer
    assert y3.dtype == torch.bfloat16


def test_flops_per_application_from_the_blocks_definition():
    """Per application of f and per token: 2*in*out per linear, 2*k*d + d for the depthwise conv taps and
    bias, 4*h for SiLU and the gate product; f runs n_sup*t_inner times; tied head 2*d*V."""
    d, h, k, L = 12, 24, 4, 2
    net = make(n_sup=2, t_inner=3, d=d, ffn=h, layers=L, conv_kernel=k, double=False)
    per_app = L * (3 * 2 * d * h + 2 * k * d + d + 4 * h)
    assert net.flops_per_token(8) == pytest.approx((2 * 3 - 1) * per_app + 2 * d * V, rel=1e-12)


def test_conv_init_is_fan_in_scaled_and_matrices_use_init_std():
    """Depthwise conv weights ~ N(0, 1/(4k)) with zero bias (k inputs per output); every other matrix
    N(0, init_std). Estimated over a few thousand draws: the standard error is ~2%."""
    k, d = 4, 256
    net = make(d=d, ffn=32, layers=2, conv_kernel=k, double=False, model={"init_std": 0.05})
    conv_w = torch.cat([l.conv.conv.weight.flatten() for l in net.layers])
    assert conv_w.std().item() == pytest.approx(1 / math.sqrt(4 * k), rel=0.06)
    assert all(torch.equal(l.conv.conv.bias, torch.zeros(d)) for l in net.layers)
    gate = torch.cat([l.mlp.gate_proj.weight.flatten() for l in net.layers])
    assert gate.std().item() == pytest.approx(0.05, rel=0.06)


@pytest.mark.parametrize("value", [True, 2.0, "2"])
def test_depth_must_be_an_integer_not_a_bool_or_float(value):
    net = make(double=False).eval()
    with pytest.raises(ConfigError, match="n_sup="):
        net(ids(), n_sup=value)


def test_nexus_config_api_field_by_field():
    """from_dict takes the v4.1 script's aliases; to_dict round-trips; every field reaches the ModelConfig
    (values all differ from the defaults); NexusModel also takes a nexus ModelConfig."""
    cfg = NexusConfig.from_dict({"dim": 24, "hidden_dim": 40, "t_inner": 3, "vocab_size": 70})
    assert (cfg.d_model, cfg.ffn_hidden, cfg.T_inner, cfg.vocab_size) == (24, 40, 3, 70)
    assert NexusConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["T_inner"] == 3
    full = NexusConfig(
        vocab_size=70,
        d_model=24,
        n_layers=3,
        ffn_hidden=40,
        n_sup=5,
        T_inner=3,
        conv_kernel=2,
        max_seq_len=99,
        ternary=False,
        act_quant=True,
        tie_embeddings=False,
        norm_eps=1e-3,
        init_std=0.07,
    )
    mc = full.to_model_config()
    assert (
        mc.arch.kind,
        mc.vocab_size,
        mc.d_model,
        mc.n_layers,
        mc.ffn_hidden,
        mc.max_seq_len,
        mc.tie_embeddings,
        mc.norm_eps,
        mc.init_std,
    ) == ("recurrent", 70, 24, 3, 40, 99, False, 1e-3, 0.07)
    rc = mc.arch
    assert (rc.n_sup, rc.t_inner, rc.conv_kernel, rc.ternary, rc.act_quant) == (5, 3, 2, False, True)
    torch.manual_seed(0)
    model = NexusModel(mc)
    assert model.cfg is mc and model.depth() == (5, 3)


def test_width_growth_is_refused_once_naming_the_kind_and_the_valid_one():
    """The recurrent model has no width-growth rule: the model itself refuses, in one line that names
    the field, its value and what would be valid (its layers add no refusal of their own)."""
    from nexus.models.width_roles import collect_refusals

    refusals = collect_refusals(make(layers=1, double=False), spec=None)
    assert len(refusals) == 1 and refusals[0][0] == "model"
    why = refusals[0][1]
    assert why.startswith("the recurrent model (model.arch.kind='recurrent') has no width-growth rule")
    assert why.endswith("(valid: model.arch.kind=transformer)") and "\n" not in why


def test_the_printed_model_shows_subln_on_the_down_projection_only():
    """SubLN norms the SwiGLU's inner activation before down_proj quantizes it; gate and up read the block's
    normed input. The printed layers say so: input_norm=True on down_proj, False (not None) on gate and up."""
    from nexus.models.recurrent import RecurrentMLP

    mlp = next(m for m in make(subln=True, double=False).modules() if isinstance(m, RecurrentMLP))
    assert "input_norm=False" in repr(mlp.gate_proj) and "input_norm=False" in repr(mlp.up_proj)
    assert "input_norm=True" in repr(mlp.down_proj)
