"""Layers take what they use: plain sizes and flags plus injected collaborators (issue 16 item 1)."""

from __future__ import annotations

import torch
import torch.nn as nn

from nexus.models import build_model
from nexus.models.attention import Attention
from nexus.models.layers import RotaryEmbedding
from nexus.models.mixing import mixers
from nexus.presets import get_preset


class RecordingMixer(nn.Module):
    """A ProjectionMixer that scales v before QK-norm and q after it, and records the call order."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, parts, x, anchors):
        self.calls.append(("before", anchors))
        return {**parts, "v": parts["v"] * 2}

    def after_qk_norm(self, q, k, anchors):
        self.calls.append(("after", anchors))
        return q * 0, k


def test_attention_builds_from_plain_arguments_with_an_injected_mixer_and_projection():
    made = []

    def make_projection(target, d_in, d_out, bias=False):
        made.append((target, d_in, d_out, bias))
        return nn.Linear(d_in, d_out, bias=bias)

    mixer = RecordingMixer()
    attn = Attention(
        16, 4, 2, 8, make_projection=make_projection, bias=True, gate="headwise", qk_norm=True, mixer=mixer
    )
    assert made == [("q", 16, 32, True), ("k", 16, 16, True), ("v", 16, 16, True), ("o", 32, 16, False)]
    assert attn.mixer is mixer and attn.shapes == {"q": (4, 8), "k": (2, 8), "v": (2, 8), "g": (4, 1)}
    rope = RotaryEmbedding(8, 16, 10000.0).tables(0, 5)
    x = torch.randn(2, 5, 16)
    anchors = {"v": torch.zeros(2, 5, 2, 8)}
    y = attn(x, rope, anchors)
    assert mixer.calls == [("before", anchors), ("after", anchors)]
    # q zeroed after QK-norm -> uniform causal attention over the doubled values
    plain = Attention(16, 4, 2, 8, bias=True, gate="headwise", qk_norm=True)
    plain.load_state_dict(attn.state_dict())
    parts = plain.project(x)
    v = (parts["v"] * 2).transpose(1, 2).repeat_interleave(2, dim=1)  # (B, H, T, hd)
    uniform = torch.tril(torch.ones(5, 5)) / torch.arange(1, 6)[:, None]
    o = (uniform @ v).transpose(1, 2) * torch.sigmoid(parts["g"])
    torch.testing.assert_close(y, plain.o_proj(o.reshape(2, 5, -1)))


def test_mixer_coefficients_are_sized_from_the_attention_shape_table():
    cfg = get_preset("exo-dynamic-e-tiny").model
    cfg.n_kv_heads, cfg.attention.gate, cfg.mixing.granularity = 1, "headwise", "elementwise"
    model = build_model(cfg)
    for i, mx in mixers(model):
        shapes = model.layers[i].attn.shapes
        assert {c: mx.widths[c] for c in mx.components} == {c: shapes[c][0] * shapes[c][1] for c in mx.components}
        assert {c: tuple(mx.coefficients(c)[0].shape) for c in mx.components} == {c: shapes[c] for c in mx.components}
    assert model.anchor.shapes == {c: model.layers[0].attn.shapes[c] for c in model.anchor.components}
