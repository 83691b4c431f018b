"""Growth verification (growth/verification.py) and the generic grow flow (growth/generic_grow.py)
against their contracts: new blocks are the rectangles of new entries (or whole new parameters), the
probe batch is next-token pairs from a fixed seed, max |dlogits| is the largest logit change, a block
is dead when its gradient is exactly zero in every probe step, and neither model is modified; grow()
records the spec with its step in a copy of the config, and the re-warmup baseline marks every entry."""

import copy

import pytest
import torch

from nexus.config import ModelConfig, RunConfig, TrainConfig
from nexus.growth import ParamMap, grow
from nexus.growth.generic_grow import jsonable
from nexus.growth.verification import max_abs_dlogits, new_blocks, probe_batch, verify
from nexus.models import build_model

DOWN, UP, GATE = (f"layers.0.mlp.{n}_proj.weight" for n in ("down", "up", "gate"))


def _model(seed=0):
    torch.manual_seed(seed)
    cfg = RunConfig(
        model=ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48, vocab_size=64, max_seq_len=128),
        train=TrainConfig(optimizer="adamw", lr=1e-3),
    )
    return build_model(cfg.model), cfg


def test_new_blocks_are_the_new_rectangles_and_whole_new_parameters():
    model, _ = _model()
    maps = {
        DOWN: ParamMap(DOWN, (slice(0, 30), slice(0, 40))),
        UP: ParamMap(UP),  # unchanged: no block
        "embed.weight": ParamMap(None),
        "gone.weight": ParamMap(None),
    }  # not in the model: skipped
    blocks = new_blocks(model, maps)
    assert blocks == {
        f"{DOWN}[old,new]": (DOWN, (slice(0, 30), slice(40, 48))),
        f"{DOWN}[new,old]": (DOWN, (slice(30, 32), slice(0, 40))),
        f"{DOWN}[new,new]": (DOWN, (slice(30, 32), slice(40, 48))),
        "embed.weight": ("embed.weight", None),
    }


def test_probe_batch_is_next_token_pairs_from_its_seed():
    x, y = probe_batch(50, 3, 8, seed=4, device="cpu")
    ids = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(4))
    assert torch.equal(x, ids[:, :-1]) and torch.equal(y, ids[:, 1:])


def test_max_abs_dlogits_is_the_largest_logit_change():
    a, _ = _model()
    b = copy.deepcopy(a)
    x, _ = probe_batch(64, 2, 8, seed=0, device="cpu")
    assert max_abs_dlogits(a, b, x) == 0.0
    with torch.no_grad():
        b.norm.weight.mul_(1.5)
    with torch.no_grad():
        want = float((a(x).logits.double() - b(x).logits.double()).abs().max())
    assert want > 0 and max_abs_dlogits(a, b, x) == pytest.approx(want, rel=1e-12)


def test_verify_reports_dead_and_live_blocks_and_leaves_both_models_alone():
    """FFN units 40-47 with zero gate and up rows have exactly zero gradient on every side (silu(0) * 0):
    dead. The new rows of q_proj are live. The probe's gradient norms are the model's own."""
    before, cfg = _model()
    after = copy.deepcopy(before)
    with torch.no_grad():
        after.layers[0].mlp.up_proj.weight[40:] = 0
        after.layers[0].mlp.gate_proj.weight[40:] = 0
    q = "layers.0.attn.q_proj.weight"
    maps = {
        DOWN: ParamMap(DOWN, (slice(0, 32), slice(0, 40))),
        UP: ParamMap(UP, (slice(0, 40), slice(0, 32))),
        q: ParamMap(q, (slice(0, 24), slice(0, 32))),
    }
    before.train(), after.eval()
    snap = {n: p.detach().clone() for n, p in after.named_parameters()}
    tcfg = copy.deepcopy(cfg.train)
    rep = verify(before, after, maps, 64, train_cfg=cfg.train, optimizer="muon", n_steps=3, seq_len=12, seed=5)
    assert sorted(rep["dead_blocks"]) == [f"{DOWN}[old,new]", f"{UP}[new,old]"]
    assert all(len(ns) == 3 for ns in rep["new_block_grad_norms"].values())
    assert min(rep["new_block_grad_norms"][f"{q}[new,old]"]) > 0
    assert rep["optimizer"] == "muon" and rep["probe_steps"] == 3 and cfg.train == tcfg  # the caller's config untouched
    assert rep["max_abs_dlogits"] > 0  # zeroed units changed the function
    assert before.training and not after.training  # modes restored
    assert all(torch.equal(p, snap[n]) for n, p in after.named_parameters())
    # the first probe's gradient norm, recomputed on a copy of the grown model on the same batch
    probe = copy.deepcopy(after).train()
    x, y = probe_batch(64, 2, 12, seed=5, device="cpu")
    probe(x, labels=y).loss.backward()
    want = float(probe.layers[0].attn.q_proj.weight.grad[24:].double().norm())
    assert rep["new_block_grad_norms"][f"{q}[new,old]"][0] == pytest.approx(want, rel=1e-6)


def test_jsonable_turns_a_record_into_plain_json_values():
    rec = {1: torch.tensor([1, 2]), "t": (1.5, "a", None, True), "o": ModelConfig, "n": {"x": [torch.tensor(3.0)]}}
    assert jsonable(rec) == {"1": [1, 2], "t": [1.5, "a", None, True], "o": str(ModelConfig), "n": {"x": [3.0]}}


def test_grow_records_the_spec_and_step_in_a_copy_of_the_config():
    model, cfg = _model()
    before = copy.deepcopy(cfg)
    _, new_cfg, _, res = grow(model, cfg, {"family": "width", "ffn": 64}, None, step=7)
    assert cfg == before  # the caller's config is untouched
    rec = new_cfg.growth_history[-1]
    assert rec["step"] == 7 and rec["family"] == "width" and rec["ffn"] == 64 and rec["axes"] == {"ffn": [48, 64]}
    assert new_cfg.model == res.model_cfg and new_cfg.model.ffn_hidden == 64


def test_rewarmup_all_marks_every_entry_of_every_parameter():
    model, cfg = _model()
    new, _, opt, _ = grow(model, cfg, {"family": "width", "ffn": 64, "rewarmup_all": "1.3,5"}, None, step=3)
    for name, p in new.named_parameters():
        st = opt.state_for(name)
        assert torch.equal(st["new_mask"], torch.ones_like(p)), name
    _, _, plain, _ = grow(model, cfg, {"family": "width", "ffn": 64, "rewarmup": "1.3,5"}, None, step=3)
    assert "new_mask" not in (plain.state_for("embed.weight") or {})  # the asymmetric rule marks new entries only


def test_new_blocks_skip_a_mapped_name_the_model_lacks_wherever_it_comes():
    model, _ = _model()
    maps = {
        "gone.weight": ParamMap(None),
        DOWN: ParamMap(DOWN, (slice(0, 32), slice(0, 40))),
        "embed.weight": ParamMap(None),
    }
    assert new_blocks(model, maps) == {
        f"{DOWN}[old,new]": (DOWN, (slice(0, 32), slice(40, 48))),
        "embed.weight": ("embed.weight", None),
    }


def test_new_blocks_read_old_slices_without_a_start_as_from_0():
    model, _ = _model()
    a = new_blocks(model, {DOWN: ParamMap(DOWN, (slice(None, 30), slice(None, 40)))})
    assert a == new_blocks(model, {DOWN: ParamMap(DOWN, (slice(0, 30), slice(0, 40)))}) and len(a) == 3


def test_probe_batch_is_built_on_the_asked_device():
    x, y = probe_batch(50, 3, 8, seed=4, device="meta")  # meta: shape and device, no data
    assert (x.device.type, y.device.type, x.shape, y.shape) == ("meta", "meta", (3, 8), (3, 8))


def _probe_norms(model, maps_block, tcfg, x, y, n_steps):
    """Reference from the module's definition: n optimizer steps of the run's optimizer on a copy of the grown
    model, the gradient norm of one block (parameter name, slices) before each step."""
    from nexus.optim.param_groups import build_optimizer

    name, sl = maps_block
    probe = copy.deepcopy(model).train()
    opt = build_optimizer(probe, tcfg)
    params = dict(probe.named_parameters())
    out = []
    for _ in range(n_steps):
        opt.zero_grad()
        probe(x, labels=y).loss.backward()
        out.append(float(params[name].grad[sl].double().norm()))
        opt.step()
    return out


@pytest.mark.parametrize("train_cfg", [None, TrainConfig(optimizer="adamw", lr=5e-2)])
def test_verify_defaults_two_probes_of_two_sequences_of_32_tokens_from_seed_0(train_cfg):
    """Without arguments: two probe steps on 2 sequences of 32 tokens (or the model's max_seq_len if shorter)
    from seed 0, with the optimizer of the given train config (TrainConfig's defaults without one); both probes'
    gradient norms are the model's own."""
    before, _ = _model()
    after = copy.deepcopy(before)
    q = "layers.0.attn.q_proj.weight"
    maps = {q: ParamMap(q, (slice(0, 24), slice(0, 32)))}
    rep = verify(before, after, maps, 64, train_cfg=train_cfg)
    tcfg = train_cfg or TrainConfig()
    assert rep["optimizer"] == tcfg.optimizer.kind and rep["probe_steps"] == 2 and rep["max_abs_dlogits"] == 0.0
    x, y = probe_batch(64, 2, 32, seed=0, device="cpu")
    want = _probe_norms(after, (q, (slice(24, 32), slice(0, 32))), tcfg, x, y, 2)
    assert rep["new_block_grad_norms"] == {f"{q}[new,old]": pytest.approx(want, rel=1e-6)}
    assert want[1] != pytest.approx(want[0], rel=1e-3)  # the second probe saw the first step


def test_verify_probes_at_most_the_models_max_seq_len_and_the_asked_length_without_a_config():
    torch.manual_seed(0)
    cfg = RunConfig(model=ModelConfig(d_model=32, n_layers=1, n_heads=2, ffn_hidden=48, vocab_size=64, max_seq_len=16))
    short = build_model(cfg.model)
    q = "layers.0.attn.q_proj.weight"
    block = (q, (slice(24, 32), slice(0, 32)))
    rep = verify(short, short, {q: ParamMap(q, (slice(0, 24), slice(0, 32)))}, 64, n_steps=1)
    x, y = probe_batch(64, 2, 16, seed=0, device="cpu")  # the default 32 tokens, cut to max_seq_len 16
    assert rep["new_block_grad_norms"][f"{q}[new,old]"] == pytest.approx(
        _probe_norms(short, block, TrainConfig(), x, y, 1), rel=1e-6
    )

    class Wrapped(torch.nn.Module):  # a model object without a .cfg: the asked seq_len is used as is
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, ids, labels=None):
            return self.lm(ids, labels=labels)

    w = Wrapped(short)
    rep = verify(w, w, {f"lm.{q}": ParamMap(f"lm.{q}", (slice(0, 24), slice(0, 32)))}, 64, n_steps=1, seq_len=12)
    x, y = probe_batch(64, 2, 12, seed=0, device="cpu")
    assert rep["new_block_grad_norms"][f"lm.{q}[new,old]"] == pytest.approx(
        _probe_norms(w, (f"lm.{q}",) + block[1:], TrainConfig(), x, y, 1), rel=1e-6
    )


def test_a_block_without_gradient_is_dead_and_one_live_from_the_second_probe_is_not():
    """New FFN units 40-47 with zero down columns: their up/gate rows get exactly zero gradient in the first
    probe (nothing reads them) and a non-zero one in the second (the first step made the down columns
    non-zero): live. A frozen parameter gets no gradient at all: dead."""
    before, cfg = _model()
    after = copy.deepcopy(before)
    with torch.no_grad():
        after.layers[0].mlp.down_proj.weight[:, 40:] = 0
    after.layers[0].attn.k_proj.weight.requires_grad_(False)
    k = "layers.0.attn.k_proj.weight"
    maps = {UP: ParamMap(UP, (slice(0, 40), slice(0, 32))), k: ParamMap(k, (slice(0, 8), slice(0, 32)))}
    rep = verify(before, after, maps, 64, train_cfg=cfg.train, n_steps=2, seq_len=8)
    first, second = rep["new_block_grad_norms"][f"{UP}[new,old]"]
    assert first == 0.0 and second > 0
    assert rep["new_block_grad_norms"][f"{k}[new,old]"] == [0.0, 0.0]
    assert rep["dead_blocks"] == [f"{k}[new,old]"]


def test_verify_draws_its_probe_batch_on_the_grown_models_device(monkeypatch):
    """The probe ids go where the grown model's parameters are (a CPU-only machine cannot tell a device
    mismatch apart otherwise: the argument is checked)."""
    import nexus.growth.verification as verification

    seen = []

    def spy(*args):
        seen.append(args[-1])
        return probe_batch(*args)

    monkeypatch.setattr(verification, "probe_batch", spy)
    model, cfg = _model()
    verify(model, model, {}, 64, train_cfg=cfg.train, n_steps=1, seq_len=4)
    assert seen == [next(model.parameters()).device]


def test_grow_defaults_to_step_0_and_names_the_growth_spec_in_a_refusal():
    from nexus.config import ConfigError

    model, cfg = _model()
    _, new_cfg, _, _ = grow(model, cfg, {"family": "width", "ffn": 64})
    assert new_cfg.growth_history[-1]["step"] == 0
    with pytest.raises(ConfigError, match="^growth spec\\.no_such_option=1 "):
        grow(model, cfg, {"family": "width", "ffn": 64, "no_such_option": 1})


@pytest.mark.parametrize("policy", ["drop", "asymmetric"])
def test_grow_carries_the_optimizer_state_by_the_specs_policy(policy):
    """The old optimizer's state reaches the new optimizer through the spec's optimizer_state: drop starts
    fresh, asymmetric keeps the old entries' moments."""
    from nexus.optim.param_groups import build_optimizer

    model, cfg = _model()
    opt = build_optimizer(model, cfg.train)
    x, y = probe_batch(64, 2, 8, seed=0, device="cpu")
    model(x, labels=y).loss.backward()
    opt.step()
    old_avg = opt.state_for("embed.weight")["exp_avg"].clone()
    _, _, new_opt, _ = grow(model, cfg, {"family": "width", "ffn": 64, "optimizer_state": policy}, opt.state_dict())
    st = new_opt.state_for("embed.weight") or {}
    if policy == "drop":
        assert "exp_avg" not in st
    else:
        assert torch.equal(st["exp_avg"], old_avg)  # embed is not grown by an FFN growth: its state carried whole
