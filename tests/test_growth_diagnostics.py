"""SPARKLING's growth diagnostics (growth/diagnostics.py) against their definitions: the cosine between
each copied channel and its source, the symmetry-lock summary over parameters, the residual-stream RMS
ratio grown / original per layer with the probe loss jump, and the post-growth monitor's schedule and
its round trip through a checkpoint."""
import copy

import pytest
import torch

from nexus.config import ModelConfig
from nexus.growth import ParamMap
from nexus.growth.diagnostics import (PostGrowthMonitor, copied_channel_cosines, probe_batch, rms_ratio_report,
                                      symmetry_lock)
from nexus.models import build_model


def test_copied_channel_cosines_compare_each_new_channel_with_its_source():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=g)
    src = torch.tensor([0, 1, 2, 0, 2])
    w = old[:, src].clone()  # columns 3, 4 copy columns 0, 2 (dim 1)
    w[:, 4] *= -2.0  # anti-parallel copy
    cos = copied_channel_cosines(w, 1, src)
    torch.testing.assert_close(cos, torch.tensor([1.0, -1.0]), atol=1e-6, rtol=0)
    rows = copied_channel_cosines(w.t().contiguous(), 0, src)  # the same along dim 0
    torch.testing.assert_close(rows, cos, atol=1e-6, rtol=0)
    assert copied_channel_cosines(old, 1, torch.arange(5)).numel() == 0  # nothing copied


def test_symmetry_lock_summarizes_every_copied_axis():
    a, b = torch.nn.Linear(3, 4, bias=False), torch.nn.Linear(3, 4, bias=False)
    model = torch.nn.ModuleDict({"a": a, "b": b})
    src = torch.tensor([0, 1, 0, 1])
    with torch.no_grad():
        a.weight[2:] = a.weight[:2]  # rows 2, 3 exact copies: cosine 1
        b.weight[2:] = -b.weight[:2]  # rows 2, 3 flipped: cosine -1
    maps = {"a.weight": ParamMap("a.weight", copy_source={0: src}),
            "b.weight": ParamMap("b.weight", copy_source={0: src, 1: torch.tensor([0, 1])}),  # dim 1 not this size: skipped
            "c.weight": ParamMap("c.weight", copy_source={0: src}),  # not in the model
            "d": ParamMap("d")}
    lock = symmetry_lock(model, maps)
    assert lock["per_param"] == pytest.approx({"a.weight": 1.0, "b.weight": -1.0}, abs=1e-6)
    assert lock["mean"] == pytest.approx(0.0, abs=1e-6) and lock["min"] == pytest.approx(-1.0, abs=1e-6)
    assert symmetry_lock(model, {"d": ParamMap("d")}) == {}


def _lm(seed=0):
    torch.manual_seed(seed)
    return build_model(ModelConfig(d_model=32, n_layers=2, n_heads=2, ffn_hidden=48, vocab_size=300, max_seq_len=32))


def test_rms_ratio_is_grown_over_original_per_stream_and_the_loss_jump_their_difference():
    old = _lm()
    same = rms_ratio_report(old, copy.deepcopy(old), 300)
    assert same["rms_ratio_per_layer"] == [1.0, 1.0, 1.0] and same["rms_ratio_max_dev"] == 0.0
    assert same["loss_jump"] == 0.0 and same["probe_loss_before"] == same["probe_loss_after"] > 0
    louder = copy.deepcopy(old)
    with torch.no_grad():
        louder.embed.weight.mul_(3.0)
    rep = rms_ratio_report(old, louder, 300)
    assert rep["rms_ratio_per_layer"][0] == pytest.approx(3.0, abs=1e-4)  # the embedding stream, exactly 3x
    assert rep["rms_ratio_max_dev"] == pytest.approx(max(abs(r - 1) for r in rep["rms_ratio_per_layer"]), abs=1e-4)
    assert rep["loss_jump"] == pytest.approx(rep["probe_loss_after"] - rep["probe_loss_before"], abs=2e-4)
    assert rep["loss_jump"] != 0


def test_probe_batch_is_fixed_text_clamped_into_the_vocabulary():
    ids = probe_batch(300, batch=3, seq_len=10)
    assert ids.shape == (3, 11) and ids.dtype == torch.long and torch.equal(ids, probe_batch(300, 3, 10))
    small = probe_batch(50, batch=3, seq_len=10)
    assert int(small.max()) == 49 and torch.equal(small, ids.clamp(max=49))


class _Trainer:
    def __init__(self, model):
        self.model, self.logged = model, []

    def log(self, rec):
        self.logged.append(rec)


def test_monitor_logs_every_nth_call_and_resumes_the_same_from_its_state():
    model = _lm()
    src = torch.tensor([0, 1, 2, 0])
    maps = {"layers.0.mlp.up_proj.weight": ParamMap("x", copy_source={0: torch.arange(48)}),
            "layers.0.mlp.gate_proj.weight": ParamMap("x", copy_source={0: torch.arange(48)}),
            "layers.1.mlp.up_proj.weight": ParamMap("x", copy_source={1: src})}
    probe = probe_batch(300, batch=2, seq_len=16)
    base = [1.0, 2.0, 4.0]
    mon = PostGrowthMonitor(maps, probe, base, every=2)
    t = _Trainer(model)
    for step in (1, 2, 3):
        mon(t, step, {})
    assert [r["step"] for r in t.logged] == [2]
    from nexus.growth.diagnostics import residual_rms

    want = [n / o for o, n in zip(base, residual_rms(model, probe))]
    assert t.logged[0]["rms_ratio_per_layer"] == pytest.approx(want, abs=1e-4)
    st = mon.state_dict()
    assert len(st["sources"]) == 2  # the two parameters sharing one axis map store it once
    again = PostGrowthMonitor.from_state_dict(st)
    t2 = _Trainer(model)
    again(t2, 4, {})  # the 4th call: logged, as the original monitor's 4th call is
    mon(t, 4, {})
    assert t2.logged == [t.logged[-1]]
