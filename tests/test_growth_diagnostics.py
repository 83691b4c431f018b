"""SPARKLING's growth diagnostics (growth/diagnostics.py) against their definitions: the cosine between
each copied channel and its source, the symmetry-lock summary over parameters, the residual-stream RMS
ratio grown / original per layer with the probe loss jump, and the post-growth monitor's schedule and
its round trip through a checkpoint."""

import copy

import pytest
import torch
from torch.overrides import TorchFunctionMode

from nexus.config import ModelConfig
from nexus.growth import ParamMap
from nexus.growth.diagnostics import (
    PostGrowthMonitor,
    copied_channel_cosines,
    probe_batch,
    rms_ratio_report,
    symmetry_lock,
)
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


def test_the_cosines_make_their_index_ranges_on_the_devices_they_meet():
    """The range compared with src is made on src's device and the one indexing w on w's: an
    accelerator refuses to compare or index across devices, and int() on a meta tensor fails either
    way, so the placement handed to torch.arange is watched (on the CPU)."""
    made = []

    class WatchArange(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.arange:
                made.append(kwargs.get("device", "not given"))
            if func is torch.Tensor.to:
                moved.append(args[1:] or kwargs)
            return func(*args, **kwargs)

    w, src, moved = torch.randn(3, 5), torch.tensor([0, 1, 2, 0, 2]), []
    with WatchArange():
        cos = copied_channel_cosines(w, 1, src)
    assert made == [src.device, w.device] and cos.shape == (2,)
    assert moved == [(w.device,)]  # src goes to w's device before it indexes w


def test_the_cosines_of_tiny_channels_are_their_cosines():
    """A cosine does not depend on the channels' scale: copies of channels with entries ~1e-9 (norms
    far below 1e-8) still read 1 and -1; the eps only keeps an all-zero channel finite."""
    g = torch.Generator().manual_seed(0)
    src = torch.tensor([0, 1, 2, 0, 2])
    old = 1e-9 * torch.randn(3, 5, generator=g)
    w = old[:, src].clone()
    w[:, 4] *= -2.0
    torch.testing.assert_close(copied_channel_cosines(w, 1, src), torch.tensor([1.0, -1.0]), atol=1e-5, rtol=0)


def test_symmetry_lock_summarizes_every_copied_axis():
    a, b = torch.nn.Linear(3, 4, bias=False), torch.nn.Linear(3, 4, bias=False)
    model = torch.nn.ModuleDict({"a": a, "b": b})
    src = torch.tensor([0, 1, 0, 1])
    with torch.no_grad():
        a.weight[2:] = a.weight[:2]  # rows 2, 3 exact copies: cosine 1
        b.weight[2:] = -b.weight[:2]  # rows 2, 3 flipped: cosine -1
    maps = {
        "a.weight": ParamMap("a.weight", copy_source={0: src}),
        "b.weight": ParamMap("b.weight", copy_source={0: src, 1: torch.tensor([0, 1])}),  # dim 1 not this size: skipped
        "c.weight": ParamMap("c.weight", copy_source={0: src}),  # not in the model
        "d": ParamMap("d"),
    }
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
    maps = {
        "layers.0.mlp.up_proj.weight": ParamMap("x", copy_source={0: torch.arange(48)}),
        "layers.0.mlp.gate_proj.weight": ParamMap("x", copy_source={0: torch.arange(48)}),
        "layers.1.mlp.up_proj.weight": ParamMap("x", copy_source={1: src}),
    }
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


def _stream_rms_and_loss(model, ids):
    """Reference from the definition: RMS sqrt(mean(h^2)) of every residual stream and the probe CE loss."""
    model.eval()
    with torch.no_grad():
        out = model(ids[:, :-1], labels=ids[:, 1:], return_hidden=True)
    return [float(h.double().pow(2).mean().sqrt()) for h in out.hidden_states], float(out.ce_loss)


def _lm_len(max_seq_len, seed):
    torch.manual_seed(seed)
    return build_model(
        ModelConfig(d_model=32, n_layers=2, n_heads=2, ffn_hidden=48, vocab_size=300, max_seq_len=max_seq_len)
    )


@pytest.mark.parametrize("old_len,new_len", [(16, 32), (32, 12)])
def test_rms_ratio_report_on_given_ids_cut_to_what_both_models_take(old_len, new_len):
    old, new = _lm_len(old_len, 0), _lm_len(new_len, 1)
    ids = probe_batch(300, batch=2, seq_len=40)
    rep = rms_ratio_report(old, new, 300, ids)
    cut = ids[:, : min(old_len, new_len) + 1]
    (rms_o, loss_o), (rms_n, loss_n) = _stream_rms_and_loss(old, cut), _stream_rms_and_loss(new, cut)
    ratios = [n / o for o, n in zip(rms_o, rms_n)]
    assert rep["rms_ratio_per_layer"] == pytest.approx(ratios, abs=1.01e-4)  # rounded to 4 places
    assert rep["rms_ratio_max_dev"] == pytest.approx(max(abs(r - 1) for r in ratios), abs=1.01e-4)
    assert rep["probe_loss_before"] == pytest.approx(loss_o, abs=1.01e-4)
    assert rep["probe_loss_after"] == pytest.approx(loss_n, abs=1.01e-4)
    assert rep["loss_jump"] == pytest.approx(loss_n - loss_o, abs=1.01e-4)
    shown = [
        *rep["rms_ratio_per_layer"],
        rep["rms_ratio_max_dev"],
        rep["probe_loss_before"],
        rep["probe_loss_after"],
        rep["loss_jump"],
    ]
    assert all(v == round(v, 4) for v in shown)  # reported to 4 decimals


def test_probe_batch_defaults_and_its_text_then_space_padding():
    """4 sequences of 64 + 1 tokens by default; the bytes of the first 20 pydoc topics (sorted by name),
    padded with spaces (32) when more are asked than the text holds."""
    from pydoc_data.topics import topics

    assert probe_batch(300).shape == (4, 65)
    text = "\n".join(t for _, t in sorted(topics.items())[:20]).encode("utf-8")
    ids = probe_batch(256, batch=2, seq_len=len(text) // 2 + 99).flatten()
    assert ids[: len(text)].tolist() == list(text) and bool((ids[len(text) :] == 32).all()) and len(ids) > len(text)


def test_probe_batch_without_pydoc_topics_reads_the_embedded_corpus(monkeypatch):
    import sys

    from nexus.data.corpus import embedded_documents

    monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)  # the import fails: the fallback text
    text = "\n".join(embedded_documents()[:20]).encode("utf-8", "replace")  # the first 20 documents
    ids = probe_batch(300, batch=1, seq_len=len(text) + 99).flatten().tolist()
    assert ids == [min(b, 299) for b in text] + [32] * 100


def test_symmetry_lock_mean_min_and_a_sharded_parameter_gathered_whole():
    """A name the model lacks is skipped wherever it comes; the mean is over parameters (not a sum); an
    FSDP2 shard (a tensor with full_tensor()) is measured on the whole gathered matrix."""
    a = torch.nn.Linear(3, 4, bias=False)
    b = torch.nn.Linear(3, 4, bias=False)
    model = torch.nn.ModuleDict({"a": a, "b": b})
    src = torch.tensor([0, 1, 0, 1])
    with torch.no_grad():
        b.weight[2] = b.weight[0]  # cosine 1
        b.weight[3] = -b.weight[1]  # cosine -1
    full = a.weight.detach().clone()
    full[2:] = full[:2] * 2.0  # copies (cosine 1) in the gathered matrix only
    shard = torch.nn.Parameter(a.weight.detach()[:2].clone())
    shard.full_tensor = lambda: full
    a.weight = shard
    maps = {
        "c.weight": ParamMap("c.weight", copy_source={0: src}),
        "a.weight": ParamMap("a.weight", copy_source={0: src}),
        "b.weight": ParamMap("b.weight", copy_source={0: src}),
    }
    lock = symmetry_lock(model, maps)
    assert lock["per_param"] == pytest.approx({"a.weight": 1.0, "b.weight": 0.0}, abs=1e-6)
    assert lock["mean"] == pytest.approx(0.5, abs=1e-6) and lock["min"] == pytest.approx(0.0, abs=1e-6)


def test_monitor_logs_the_lock_and_rms_ratios_below_one_every_call_by_default():
    """Default every=1; the logged lock is the cosine of the copied rows rounded to 6 places; an RMS ratio
    against a pre-growth RMS below 1 is n / o; without a probe only the lock is logged."""
    model = _lm()
    w = model.layers[0].mlp.up_proj.weight
    with torch.no_grad():
        w[47] = w[0] + 0.5 * w[1]  # new row 47 copies row 0, then drifted: cosine below 1
    src = torch.cat([torch.arange(47), torch.tensor([0])])
    want_cos = float(torch.nn.functional.cosine_similarity(w[47].detach(), w[0].detach(), dim=0))
    maps = {"layers.0.mlp.up_proj.weight": ParamMap("x", copy_source={0: src})}
    probe = probe_batch(300, batch=2, seq_len=16)
    base = [0.3, 0.25, 0.125]
    mon = PostGrowthMonitor(maps, probe, base)
    t = _Trainer(model)
    mon(t, 1, {})
    rec = t.logged[0]
    assert rec["step"] == 1 and 0.5 < want_cos < 0.999
    assert rec["symmetry_lock_mean"] == pytest.approx(want_cos, abs=1.01e-6)
    assert rec["symmetry_lock_min"] == pytest.approx(want_cos, abs=1.01e-6)
    rms = _stream_rms_and_loss(model, probe)[0]
    ratios = [n / o for o, n in zip(base, rms)]
    assert rec["rms_ratio_per_layer"] == pytest.approx(ratios, abs=1.01e-4)
    assert rec["rms_ratio_max_dev"] == pytest.approx(max(abs(r - 1) for r in ratios), abs=1.01e-4)
    assert all(
        v == round(v, 4) for v in [*rec["rms_ratio_per_layer"], rec["rms_ratio_max_dev"]]
    )  # logged to 4 decimals
    assert all(rec[k] == round(rec[k], 6) for k in ("symmetry_lock_mean", "symmetry_lock_min"))  # and the lock to 6
    no_probe = PostGrowthMonitor(maps, None, base)
    t2 = _Trainer(model)
    no_probe(t2, 5, {})
    assert set(t2.logged[0]) == {"step", "symmetry_lock_mean", "symmetry_lock_min"}


def test_monitor_state_keeps_distinct_equal_shaped_sources_and_its_schedule_and_no_probe():
    a, b = torch.tensor([0, 1, 0]), torch.tensor([0, 1, 1])  # same shape, different maps: both kept
    maps = {"p": ParamMap("p", copy_source={0: a}), "q": ParamMap("q", copy_source={0: b, 1: a.clone()})}
    mon = PostGrowthMonitor(maps, None, None, every=2)
    t = _Trainer(_lm())
    for step in range(3):
        mon(t, step, {})  # names the model lacks: nothing to log, but the calls count
    st = mon.state_dict()
    assert st["probe"] is None and st["base_rms"] is None and (st["every"], st["calls"]) == (2, 3)
    assert len(st["sources"]) == 2
    again = PostGrowthMonitor.from_state_dict(st)
    assert (again.every, again.calls, again.probe, again.base_rms) == (2, 3, None, None)
    got = {n: {d: s.tolist() for d, s in pm.copy_source.items()} for n, pm in again.param_maps.items()}
    assert got == {"p": {0: [0, 1, 0]}, "q": {0: [0, 1, 1], 1: [0, 1, 0]}}


def test_monitor_resumed_from_state_keeps_every_nth():
    model = _lm()
    mon = PostGrowthMonitor({}, probe_batch(300, batch=1, seq_len=8), [1.0, 1.0, 1.0], every=2)
    t = _Trainer(model)
    for step in range(1, 4):
        mon(t, step, {})
    again = PostGrowthMonitor.from_state_dict(mon.state_dict())
    t2 = _Trainer(model)
    for step in (4, 5):
        again(t2, step, {})
    assert [r["step"] for r in t2.logged] == [4]


def test_monitor_after_growth_keeps_real_text_as_its_probe_cut_to_both_lengths():
    """From an LM batch (y is x shifted by one) the probe is the text x + y's last token: the report runs on
    it, and the monitor keeps its first 4 rows cut to both models' max_seq_len + 1 with the old model's RMS.
    A batch that is not next-token pairs falls back to the fixed probe batch."""
    from nexus.growth.diagnostics import monitor_after_growth, residual_rms

    old, new = _lm_len(16, 0), _lm_len(32, 1)
    ids = probe_batch(300, batch=6, seq_len=12)  # 13 wide, shorter than new's 33
    maps = {"layers.0.mlp.up_proj.weight": ParamMap("x", copy_source={0: torch.arange(48)})}
    for old_len, new_m, n_cut in ((16, new, 13), (8, new, 9)):
        mon, rep = monitor_after_growth(old, new_m, old_len, new_m.cfg, maps, (ids[:, :-1], ids[:, 1:]))
        assert rep == rms_ratio_report(old, new_m, 300, ids)
        assert torch.equal(mon.probe, ids[:4, :n_cut]) and mon.param_maps is maps
        assert mon.base_rms == pytest.approx(residual_rms(old, ids[:4, :n_cut]), rel=1e-6)
    short_new = _lm_len(8, 1)
    mon, _ = monitor_after_growth(old, short_new, 16, short_new.cfg, maps, (ids[:, :-1], ids[:, 1:]))
    assert torch.equal(mon.probe, ids[:4, :9])
    shuffled = ids[:, 1:].flip(1)
    mon, rep = monitor_after_growth(old, new, 16, new.cfg, maps, (ids[:, :-1], shuffled))
    assert rep == rms_ratio_report(old, new, 300)
    assert torch.equal(mon.probe, probe_batch(300)[:4, :17])


def test_the_probe_goes_to_the_models_device(monkeypatch):
    """A CPU-only machine cannot tell a probe left on the CPU from one moved to the model: a model on the
    meta device (shapes, no data) shows where the ids are sent."""
    import nexus.growth.diagnostics as diagnostics

    seen = []

    def spy(model, ids):
        seen.append(ids.device.type)
        return [1.0], 1.0

    monkeypatch.setattr(diagnostics, "_streams_and_loss", spy)
    with torch.device("meta"):
        meta = build_model(
            ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48, vocab_size=300, max_seq_len=32)
        )
    ids = probe_batch(300, batch=1, seq_len=8)
    diagnostics.rms_ratio_report(meta, meta, 300, ids)
    diagnostics.residual_rms(meta, ids)
    assert seen == ["meta", "meta", "meta"]
