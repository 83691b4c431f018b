"""Standard causal attention against its equations, in float64: q/k/v projections, QK-norm (RMS over the
head dim, default eps), RoPE, softmax(q k^T / sqrt(hd)) with a causal mask and grouped kv heads, the
output gate (sigmoid, per head or per element) and W_o. The references are written here and in
models/reference/higher_order_ref.py (explicit score matrices), never by calling the layer's steps."""

import math

import pytest
import torch

from nexus.config import ModelConfig
from nexus.models.attention import Attention, causal_mask, component_shapes, sdpa_causal
from nexus.models.cache import LayerCache
from nexus.models.reference.higher_order_ref import naive_attention

H, HD, D = 4, 8, 16


def rope_tables(start: int, length: int, theta: float = 10000.0):
    """cos/sin of position * theta^(-2i/hd), each frequency used by the two halves (rotate-half RoPE)."""
    pos = torch.arange(start, start + length, dtype=torch.float64)[:, None]
    freq = theta ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    ang = torch.cat([pos * freq, pos * freq], dim=-1)
    return ang.cos(), ang.sin()


def reference(attn: Attention, x: torch.Tensor, kv: int, gate: str, qk_norm: bool, eps: float) -> torch.Tensor:
    B, T, _ = x.shape
    cos, sin = rope_tables(0, T)

    def heads(lin, n):  # (B, n, T, HD)
        return torch.nn.functional.linear(x, lin.weight, lin.bias).view(B, T, n, -1).transpose(1, 2)

    def rms(z, g):
        return z / torch.sqrt(z.pow(2).mean(-1, keepdim=True) + eps) * g

    def rope(z):
        rotated = torch.cat([-z[..., HD // 2 :], z[..., : HD // 2]], dim=-1)
        return z * cos + rotated * sin

    q, k, v = heads(attn.q_proj, H), heads(attn.k_proj, kv), heads(attn.v_proj, kv)
    if qk_norm:
        q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
    o = naive_attention(rope(q), rope(k), v)  # (B, H, T, HD), kv head h // (H / kv) serves query head h
    if gate != "none":
        o = o * torch.sigmoid(heads(attn.g_proj, H))  # (B, H, T, HD or 1)
    return o.transpose(1, 2).reshape(B, T, H * HD) @ attn.o_proj.weight.t()


def build(kv, gate, qk_norm, bias, seed=0):
    torch.manual_seed(seed)
    kwargs = {"gate": gate} if gate != "none" else {}
    if qk_norm:
        kwargs["qk_norm"] = True
    attn = Attention(D, H, kv, HD, bias=bias, **kwargs).double()
    with torch.no_grad():  # gains and biases away from 1 and 0, so a dropped or swapped one shows
        for name, p in attn.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.copy_(1 + 0.5 * torch.randn_like(p) if "norm" in name else 0.5 * torch.randn_like(p))
    return attn


@pytest.mark.parametrize(
    "kv,gate,qk_norm,bias",
    [
        (4, "none", False, False),
        (2, "headwise", True, True),
        (1, "elementwise", True, False),
        (2, "elementwise", False, True),
    ],
)
def test_attention_matches_its_equations(kv, gate, qk_norm, bias):
    """x is small, so the QK-norm epsilon (the models' default, 1e-5) moves the output by >= 5e-7 of its
    scale, far above the 1e-9 tolerance; float64 throughout."""
    attn = build(kv, gate, qk_norm, bias)
    x = 0.05 * torch.randn(2, 7, D, dtype=torch.float64)
    want = reference(attn, x, kv, gate, qk_norm, ModelConfig().norm_eps)
    got = attn(x, rope_tables(0, 7))
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9 * float(want.detach().abs().max()))


def test_defaults_are_plain_attention():
    """No bias, no gate, no QK-norm unless asked; a gate has no bias; the shape table has no gate entry."""
    names = [n for n, _ in Attention(D, H, 2, HD).named_parameters()]
    assert names == ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"]
    gated = Attention(D, H, 2, HD, gate="elementwise", bias=True)
    assert gated.g_proj.bias is None and gated.o_proj.bias is None and gated.q_proj.bias is not None
    assert component_shapes(H, 2, HD) == {"q": (H, HD), "k": (2, HD), "v": (2, HD)}
    assert Attention(D, H, 2, HD).shapes == component_shapes(H, 2, HD)  # no gate entry without a gate
    assert component_shapes(H, 2, HD, "elementwise")["g"] == (H, HD)
    assert component_shapes(H, 2, HD, "headwise")["g"] == (H, 1)


@pytest.mark.parametrize("bounds", [(0, 3, 5, 6, 8), (0, 2, 4, 5)])
def test_cached_chunks_equal_the_full_forward(bounds):
    """Chunks of 2 queries after cached keys need the causal offset mask; with 2 kv heads, a 2-token chunk
    has as many queries as kv heads (grouped heads must still be recognized as grouped)."""
    attn = build(2, "headwise", True, True)
    T = bounds[-1]
    x = torch.randn(2, T, D, dtype=torch.float64)
    full = attn(x, rope_tables(0, T))
    cache = LayerCache()
    parts = [attn(x[:, a:b], rope_tables(a, b - a), cache=cache) for a, b in zip(bounds, bounds[1:])]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-9, atol=1e-9 * float(full.detach().abs().max()))


def test_the_mixer_receives_the_layer_input():
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, parts, x, anchors):
            seen.append(x)
            return parts

        def after_qk_norm(self, q, k, anchors):
            return q, k

    attn = Attention(D, H, 2, HD, mixer=Spy())
    x = torch.randn(1, 3, D)
    attn(x, tuple(t.float() for t in rope_tables(0, 3)))
    assert len(seen) == 1 and seen[0] is x


def test_flops_are_the_two_attention_products_per_query_head():
    """QK^T and AV: 2 * hd * seq_len FLOPs each, per query head and token (kv heads do not change it)."""
    for kv in (4, 1):
        assert Attention(D, H, kv, HD).flops_per_token(10) == 2 * (2 * HD * 10) * H
    assert math.isclose(Attention(D, 2, 1, 16).flops_per_token(3), 2 * (2 * 16 * 3) * 2)


def test_width_roles_q_k_v_g_read_the_hidden_axis_and_o_writes_it():
    """Fan-in (role in) along the input columns of q/k/v/g, fan-out (role out) along W_o's output rows; a
    projection kind other than Linear says where its sides sit (Nexus-Rank: W_M's columns, W_D's rows)."""
    attn = Attention(D, H, 2, HD, gate="headwise")
    assert attn.width_roles() == {f"{t}_proj.weight": {1: ("hidden", "in")} for t in "qkvg"} | {
        "o_proj.weight": {0: ("hidden", "out")}
    }
    from nexus.models.nexus_rank import NexusRank

    ranked = Attention(D, H, 2, HD, make_projection=lambda t, i, o, b=False: NexusRank(i, o, 6, 5))
    roles = ranked.width_roles()
    assert roles["o_proj.w_d.weight"] == {0: ("hidden", "out")} and roles["q_proj.w_m.weight"] == {1: ("hidden", "in")}


@pytest.mark.parametrize("kv", [H, 2])
def test_the_causal_mask_is_built_on_the_queries_device(kv):
    """A chunk of 3 queries after 2 cached keys on the meta device (shape, dtype and device, no data):
    a mask built on the default device instead would not match the queries' device (on a GPU, a
    device mismatch inside SDPA)."""
    meta = torch.device("meta")
    mask = causal_mask(3, 5, meta)
    assert mask.device == meta and mask.shape == (3, 5) and mask.dtype == torch.bool
    q = torch.empty(1, H, 3, HD, device=meta)
    k = v = torch.empty(1, kv, 5, HD, device=meta)
    out = sdpa_causal(q, k, v)
    assert out.device == meta and out.shape == (1, H, 3, HD)
    # and what the mask says, on the CPU: query i (absolute position 2 + i) sees keys 0..2 + i
    want = torch.tensor([[j <= 2 + i for j in range(5)] for i in range(3)])
    assert torch.equal(causal_mask(3, 5, torch.device("cpu")), want)
