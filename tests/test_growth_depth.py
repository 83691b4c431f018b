"""Depth growth (growth/depth.py, issue 48): the operators keep or change the function as they claim, the blocks
sit in the order the papers define, optimizer state follows each tensor from the layer it came from, width and
depth grow together, a depth-grown checkpoint resumes bitwise, and bad input is one line with exit 2."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch
from test_core_train import losses, micro_cfg

from nexus.checkpoint import load_checkpoint, load_trainer_state
from nexus.cli import main
from nexus.config import ConfigError
from nexus.config_overrides import parse_overrides
from nexus.growth import grow, grow_checkpoint, verify
from nexus.growth.depth import layer_plan, residual_writers
from nexus.growth.spec import spec_from_flags
from nexus.models import build_model
from nexus.optim.param_groups import build_optimizer
from nexus.presets import get_preset
from nexus.train.resume import resume_config
from nexus.train.trainer import Trainer


def _cfg(preset: str = "baseline-micro", *extra: str):
    cfg = get_preset(preset)
    parse_overrides(cfg, ["--model.n_layers", "2", "--model.max_seq_len", "32", "--data.seq_len", "32", *extra])
    return cfg.validate()


def _trained_like(cfg, seed: int = 0):
    """A model whose every tensor is away from its init (zero-initialized output projections of some recipes
    included), as a trained one is: a preserved function is then not an accident of zeros."""
    torch.manual_seed(seed)
    model = build_model(cfg.model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def _ids(cfg, n: int = 2, t: int = 16):
    return torch.randint(0, cfg.model.vocab_size, (n, t), generator=torch.Generator().manual_seed(1))


def _logits(model, ids):
    with torch.no_grad():
        return model.eval()(ids).logits


def _grow(model, cfg, **spec):
    return grow(model, cfg, {"family": "depth", **spec})


# ----------------------------------------------------------------------------- operators
@pytest.mark.parametrize("where", ["interleave", "top", "bottom"])
@pytest.mark.parametrize("init", ["zero", "copy-zero-out"])
def test_preserving_inits_keep_the_logits_exactly(init, where):
    cfg = _cfg()
    model = _trained_like(cfg)
    new, new_cfg, _, res = _grow(model, cfg, layers=5, init=init, where=where)
    assert new_cfg.model.n_layers == len(new.layers) == 5
    ids = _ids(cfg)
    assert torch.equal(_logits(new, ids), _logits(model, ids))
    ver = verify(model, new, res.param_maps, cfg.model.vocab_size, train_cfg=new_cfg.train, seq_len=16)
    assert ver["max_abs_dlogits"] == 0.0 and ver["dead_blocks"] == []
    assert res.report["loss_jump"] == 0.0 and res.report["function"].startswith("preserved")


def test_each_new_block_writes_nothing_until_trained_and_would_change_the_function_otherwise():
    cfg = _cfg()
    model = _trained_like(cfg)
    new, _, _, res = _grow(model, cfg, layers=4, init="zero")
    ids = _ids(cfg)
    for k in res.record["new_layers"]:
        block = new.layers[k]
        writers = residual_writers(block)
        assert {w.split(".")[0] for w in writers} == {"attn", "mlp"}
        for name, p in block.named_parameters():
            # the writers are zero and nothing else is: a zero input side would be dead
            assert bool((p == 0).all()) == (name in writers), name
        probe = _logits(new, ids)
        with torch.no_grad():
            for w in writers:  # each writer alone carries the block into the residual stream
                p = block.get_parameter(w)
                p.normal_(0, 0.05)
                assert not torch.equal(_logits(new, ids), probe), w
                p.zero_()


def _run_blocks(model, ids, order):
    """The old model's own blocks applied in `order`: what a grown stack must compute."""
    with torch.no_grad():
        x = model.embed(ids)
        rope = model.rope.tables(0, ids.shape[1])
        for j in order:
            x = model.layers[j](x, rope, None, None)
        return model.head(model.norm(x))


@pytest.mark.parametrize(
    "init,n,order", [("stack", 6, [0, 1, 0, 1, 0, 1]), ("copy", 4, [0, 0, 1, 1]), ("copy", 3, [0, 1, 1])]
)
def test_stacked_and_copied_blocks_run_in_the_papers_order(init, n, order):
    cfg = _cfg()
    model = _trained_like(cfg)
    new, _, _, res = _grow(model, cfg, layers=n, init=init)
    assert res.record["layer_sources"] == order
    ids = _ids(cfg)
    assert torch.equal(_logits(new, ids), _run_blocks(model, ids, order))
    assert not torch.equal(_logits(new, ids), _run_blocks(model, ids, sorted(order, reverse=True)))
    # not function preserving: the jump is reported, and said to be expected
    assert res.report["loss_jump"] != 0.0 and "changed on purpose" in res.report["function"]


def test_interleave_spreads_the_new_blocks_over_equal_groups_and_top_bottom_put_them_at_the_ends():
    for old, new in [(4, 6), (4, 8), (6, 8), (3, 12), (4, 5)]:
        plan = layer_plan(old, new, "zero", "interleave")
        assert [j for j, is_new in plan if not is_new] == list(range(old))  # every old block, once, in order
        new_at = [k for k, (_, is_new) in enumerate(plan) if is_new]
        assert len(new_at) == new - old and all(plan[k][0] == plan[k - 1][0] for k in new_at)  # after its source
        per_old = [sum(1 for j, is_new in plan if is_new and j == i) for i in range(old)]
        k = new - old
        if k % old == 0 or old % k == 0:  # equal groups (LLaMA-Pro: L/k old blocks, then one new)
            group = old // k if k <= old else 1
            assert per_old == [max(k // old, 1) if (i + 1) % group == 0 else 0 for i in range(old)], (old, new)
        assert max(per_old) - min(c for c in per_old if c) <= 1
        assert plan[-1] == (old - 1, True)  # the top block is always followed by a new one (LLaMA-Pro's last group)
    assert layer_plan(3, 5, "zero", "top") == [(0, False), (1, False), (2, False), (2, True), (2, True)]
    assert layer_plan(3, 5, "zero", "bottom") == [(0, True), (0, True), (0, False), (1, False), (2, False)]


# ----------------------------------------------------------------------------- optimizer state
def _trained_state(model, cfg, steps: int = 3):
    opt = build_optimizer(model, cfg.train)
    g = torch.Generator().manual_seed(3)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return opt.state_dict()


def _state_by_name(opt):
    return {
        opt.param_names[id(p)]: o.state.get(p, {})
        for o in opt.optimizers.values()
        for g in o.param_groups
        for p in g["params"]
    }


@pytest.mark.parametrize("policy", ["asymmetric", "copy", "drop"])
def test_optimizer_state_follows_each_tensor_from_the_layer_it_came_from(policy):
    cfg = _cfg()
    model = _trained_like(cfg)
    old_state = _trained_state(model, cfg)["state"]
    _, _, new_opt, res = grow(
        model, cfg, {"family": "depth", "layers": 4, "init": "copy", "optimizer_state": policy}, {"state": old_state}
    )
    state = _state_by_name(new_opt)
    sources = res.record["layer_sources"]
    new_at = set(res.record["new_layers"])
    assert sources == [0, 0, 1, 1] and new_at == {1, 3}
    for name, st in state.items():
        parts = name.split(".", 2)
        k = int(parts[1]) if parts[0] == "layers" else None
        src = f"layers.{sources[k]}.{parts[2]}" if k is not None else name
        moved = old_state[src]
        if policy == "drop" or (k in new_at and policy == "asymmetric"):
            assert "exp_avg" not in st, name  # fresh: no moments carried
        else:  # old blocks under their new index, copied blocks under `copy`: the source's own moments
            assert torch.equal(st["exp_avg"], moved["exp_avg"]) and torch.equal(st["exp_avg_sq"], moved["exp_avg_sq"])
            assert float(torch.as_tensor(st["step"]).max()) == float(torch.as_tensor(moved["step"]).max())
        # every entry of a new block is new (re-warmed); an old block has none
        assert ("new_mask" in st and bool(st["new_mask"].eq(1).all())) == (k in new_at), name


def test_a_rewarmup_drives_the_new_blocks_and_leaves_the_old_on_the_schedule():
    from nexus.growth.hook import rewarmup_rule

    cfg = _cfg()
    model = _trained_like(cfg)
    _, new_cfg, new_opt, res = _grow(model, cfg, layers=4, init="zero", rewarmup="2.0,10")
    rec = new_cfg.growth_history[-1]
    assert rec["family"] == "depth" and rec["rewarmup"] == {"rho": 2.0, "tau": 10}
    rule = rewarmup_rule(new_cfg)
    tc = new_cfg.train
    # 10 steps after the growth step the new blocks' lr has risen to rho x the baseline's lr at the growth step
    assert rule(10, tc.lr, None, tc) == pytest.approx(2.0 * tc.lr * rule(0, tc.lr, None, tc) / tc.lr)
    masked = {n for n, st in _state_by_name(new_opt).items() if "new_mask" in st}
    assert masked == {n for n, _ in new_opt_params(new_opt) if int(n.split(".")[1]) in res.record["new_layers"]}


def new_opt_params(opt):
    return [
        (opt.param_names[id(p)], p)
        for g in opt.param_groups
        for p in g["params"]
        if opt.param_names[id(p)].startswith("layers.")
    ]


# ----------------------------------------------------------------------------- width + depth
def _flags(*argv):
    from nexus.cli.grow import add_growth_flags

    p = argparse.ArgumentParser()
    add_growth_flags(p)
    return spec_from_flags(p.parse_args(list(argv)))


def test_width_and_depth_flags_make_one_growth_width_first_verified_once():
    spec = _flags(
        "--depth.layers", "4", "--width.ffn", "256", "--init", "copy,copy", "--preserve", "exact", "--rewarmup", "1.3,5"
    )
    assert spec["family"] == "depth" and spec["width"]["family"] == "width" and spec["width"]["ffn"] == 256
    cfg = _cfg()
    model = _trained_like(cfg)
    new, new_cfg, _, res = grow(model, cfg, spec)
    assert new_cfg.model.ffn == 256 and new_cfg.model.n_layers == 4 and len(new_cfg.growth_history) == 1
    rec = new_cfg.growth_history[-1]
    assert rec["order"] == "width then depth" and rec["width_growth"]["axes"]["ffn"][1] == 256
    for block in new.layers:  # the new blocks are built at the final width too
        assert block.mlp.down_proj.weight.shape[1] == 256
    ver = verify(model, new, res.param_maps, cfg.model.vocab_size, train_cfg=new_cfg.train, seq_len=16)
    assert res.report["function"].startswith("preserved") and ver["dead_blocks"] == []
    # the depth part adds nothing to the width part's change: width's exact split alone moves the logits by fp32
    # rounding (its sums run over more terms), and width + depth by exactly that much
    only_w, w_cfg, _, w_res = grow(
        model, cfg, {"family": "width", "ffn": 256, "init": "copy,copy", "preserve": "exact"}
    )
    w_ver = verify(model, only_w, w_res.param_maps, cfg.model.vocab_size, train_cfg=w_cfg.train, seq_len=16)
    assert ver["max_abs_dlogits"] == w_ver["max_abs_dlogits"] <= 1e-5
    ids = _ids(cfg)
    assert torch.equal(_logits(new, ids), _logits(only_w, ids))
    only_d = _grow(model, cfg, layers=4, init="zero")[0]
    n = sum(p.numel() for p in new.parameters())
    assert n > max(sum(p.numel() for p in m.parameters()) for m in (only_w, only_d))
    # a non-exact width growth beside a preserving depth growth is not called preserving
    _, _, _, res_rms = grow(model, cfg, {"family": "depth", "layers": 4, "init": "zero", "width": {"ffn": 256}})
    assert "changed on purpose" in res_rms.report["function"]


def test_growth_compute_and_parameter_counts_cover_depth():
    from nexus.analysis.compute import growth_compute
    from nexus.models.accounting import param_count

    cfg = _cfg()
    model = _trained_like(cfg)
    new, new_cfg, _, res = _grow(model, cfg, layers=6, init="stack")
    assert param_count(new_cfg.model) == sum(p.numel() for p in new.parameters())
    c = growth_compute(cfg.model, new_cfg.model, d_e=100, d_total=1000, seq_len=32)
    block = sum(p.numel() for p in model.layers[0].parameters())
    assert c["active_params_large"] - c["active_params_small"] == 4 * block
    assert c["train_flops_per_token_large"] > c["train_flops_per_token_small"] and 0 < c["saved_eq29"] < 1
    assert res.report["params"] == (
        f"{sum(p.numel() for p in model.parameters()):,} -> {sum(p.numel() for p in new.parameters()):,}"
    )


# ----------------------------------------------------------------------------- where it applies
PRESERVING_KINDS = [
    "sparkling-moe-tiny",
    "nexusformer-micro",
    "tokenformer-micro",
    "exo-e-tiny",
    "nures-h-tiny",
    "resformer-tiny",
    "nexus-q-tiny",
    "talking-heads-micro",
    "gated-tiny",
]


@pytest.mark.parametrize("preset", PRESERVING_KINDS)
def test_zero_and_copy_zero_out_are_exact_on_every_self_contained_block_kind(preset):
    small = (
        ["--model.d_model", "32", "--model.n_heads", "2", "--model.head_dim", "16"] if preset.endswith("tiny") else []
    )
    cfg = _cfg(preset, *small)
    model = _trained_like(cfg)
    ids = _ids(cfg)
    for init in ("zero", "copy-zero-out"):
        new, new_cfg, _, _ = _grow(model, cfg, layers=4, init=init)
        assert torch.equal(_logits(new, ids), _logits(model, ids)), init
    if cfg.model.mixing.anchor in ("nures", "value_residual"):
        # layer 0 is the anchor and stays the old layer 0
        assert torch.equal(new.layers[0].state_dict()["attn.q_proj.weight"], model.layers[0].attn.q_proj.weight)
        with pytest.raises(ConfigError, match="layer 0 must stay the old layer 0"):
            _grow(model, cfg, layers=4, init="zero", where="bottom")


def test_the_recurrent_model_is_refused_in_one_line_naming_its_loops():
    cfg = get_preset("nexus-micro")
    with pytest.raises(ConfigError) as e:
        _grow(build_model(cfg.model), cfg, layers=4)
    msg = str(e.value)
    assert "\n" not in msg and "loop count" in msg and "recurrent" in msg


# ----------------------------------------------------------------------------- checkpoints and the command line
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("base")
    Trainer(micro_cfg(run, "--train.steps", "4", "--model.n_layers", "4"), quiet=True).fit()
    return run / "checkpoint"


def test_cli_zero_prints_an_exact_zero_and_stack_reports_its_jump_then_both_continue(trained, tmp_path, capsys):
    out = tmp_path / "zero"
    rc = main(
        [
            "grow",
            "--checkpoint",
            str(trained),
            "--out",
            str(out),
            "--depth.layers",
            "8",
            "--depth.init",
            "zero",
            "--train.steps",
            "6",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "max |dlogits| = 0.0 (exact)" in text and "layers 4->8 (zero" in text, text
    stack = tmp_path / "stack"
    rc = main(
        [
            "grow",
            "--checkpoint",
            str(trained),
            "--out",
            str(stack),
            "--depth.layers",
            "8",
            "--depth.init",
            "stack",
            "--train.steps",
            "6",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and "loss_jump" in report and "expected" in report["function"]
    assert report["verify"]["max_abs_dlogits"] > 0
    for d in (out, stack):
        rc = main(["train", "--resume", str(d), "--quiet"])
        assert rc == 0, capsys.readouterr().err
        assert sorted(losses(d)) == [5, 6] and all(math.isfinite(v) for v in losses(d).values())
        assert load_checkpoint(d / "checkpoint")[1].model.n_layers == 8


def test_a_depth_grown_checkpoint_resumes_bitwise(trained, tmp_path):
    grown = tmp_path / "grown"
    grow_checkpoint(
        trained,
        grown,
        {"family": "depth", "layers": 6, "init": "zero", "rewarmup": "1.3,2"},
        probe_verify=False,
        train_overrides=["--train.steps", "8"],
    )
    assert load_trainer_state(grown)["step"] == 4
    cfg, _ = resume_config(grown, ["--train.save_every", "1", "--train.keep_last", "5"], out_dir=tmp_path / "a")
    Trainer(cfg, resume=str(grown), quiet=True).fit()
    cfg_b, _ = resume_config(tmp_path / "a" / "step_0000006", [], out_dir=tmp_path / "b")
    Trainer(cfg_b, resume=str(tmp_path / "a" / "step_0000006"), quiet=True).fit()
    la, lb = losses(tmp_path / "a"), losses(tmp_path / "b")
    assert sorted(la) == [5, 6, 7, 8] and sorted(lb) == [7, 8]
    assert all(la[s] == lb[s] for s in (7, 8)), (la, lb)
    wa = load_checkpoint(tmp_path / "a" / "checkpoint")[0].state_dict()
    wb = load_checkpoint(tmp_path / "b" / "checkpoint")[0].state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_growth_inside_training_grows_depth_at_its_step(tmp_path):
    cfg = micro_cfg(tmp_path / "run", "--train.steps", "4")
    cfg.train.set_hook("growth", at=2, spec={"family": "depth", "layers": 4, "init": "zero"})
    t = Trainer(cfg, quiet=True)
    t.fit()
    assert t.cfg.model.n_layers == 4 and t.cfg.growth_history[-1]["step"] == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    event = next(r for r in rows if r.get("event") == "growth")
    # old stream j is compared with the input of old block j's new position: all 1.0 for a preserving insertion
    assert event["loss_jump"] == 0.0 and event["rms_ratio_per_layer"] == [1.0] * 3


def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--depth.layers", "4"], "--depth.layers=4 is not more than the current 4 layers (valid: an integer > 4"),
        (["--depth.layers", "3"], "--depth.layers=3 is not more than the current 4 layers"),
        (
            ["--depth.layers", "6", "--depth.init", "stack"],
            "--depth.layers=6 with --depth.init stack (valid: a multiple",
        ),
        (["--depth.layers", "8", "--depth.init", "sideways"], "--depth.init='sideways' (valid: zero|copy-zero-out|"),
        (["--depth.layers", "8", "--depth.where", "middle"], "--depth.where='middle' (valid: interleave|top|bottom)"),
        (["--depth.layers", "8", "--depth.init", "stack", "--depth.where", "top"], "--depth.where='top' with --depth"),
        (["--depth.init", "zero"], "--depth.init is a depth growth option, given without --depth.layers"),
        (["--depth.layers", "8", "--delta-m", "4"], "several growth families requested"),
        # the re-warmup flag both families take is still no growth on its own
        (["--rewarmup", "1.3,5"], "--rewarmup is a depth/width growth option, given without --depth.layers or"),
    ],
)
def test_cli_bad_depth_input_is_one_line_exit_2_and_writes_nothing(trained, tmp_path, capsys, argv, match):
    before = _snapshot(trained)
    out = tmp_path / "out"
    rc = main(["grow", "--checkpoint", str(trained), "--out", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and match in err and len(err.splitlines()) == 1, err
    assert _snapshot(trained) == before and list(tmp_path.iterdir()) == []


def test_depth_flags_on_a_recurrent_checkpoint_and_a_layer_count_change_on_resume_are_refused(
    trained, tmp_path, capsys
):
    rec = tmp_path / "rec"
    cfg = get_preset("nexus-micro")
    parse_overrides(
        cfg,
        [
            "--train.out_dir",
            str(rec),
            "--train.steps",
            "1",
            "--train.eval_every",
            "0",
            "--data.seq_len",
            "16",
            "--train.batch_size",
            "2",
            "--train.sample_tokens",
            "1",
        ],
    )
    Trainer(cfg.validate(), quiet=True).fit()
    capsys.readouterr()
    runs = [
        ["grow", "--checkpoint", str(rec / "checkpoint"), "--out", str(tmp_path / "o1"), "--depth.layers", "4"],
        [
            "train",
            "--resume",
            str(trained),
            "--model.n_layers",
            "8",
            "--train.steps",
            "6",
            "--out",
            str(tmp_path / "o2"),
        ],
    ]
    needles = ["model.arch.kind='recurrent'", "model.n_layers=8 (checkpoint: 4) changes the model's shape"]
    for argv, match in zip(runs, needles):
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and match in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_nexus_train_grows_width_and_depth_at_its_step_from_the_flags(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--model.d_model",
            "32",
            "--data.seq_len",
            "32",
            "--train.batch_size",
            "4",
            "--train.steps",
            "4",
            "--train.eval_every",
            "0",
            "--train.sample_tokens",
            "1",
            "--grow-at",
            "2",
            "--depth.layers",
            "4",
            "--width.ffn",
            "192",
            "--init",
            "random,zero",
            "--preserve",
            "exact",
            "--rewarmup",
            "1.3,2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    cfg = load_checkpoint(out / "checkpoint")[1]
    rec = cfg.growth_history[-1]
    assert (cfg.model.n_layers, cfg.model.ffn) == (4, 192) and rec["family"] == "depth" and rec["step"] == 2
    assert rec["width"]["ffn"] == 192 and rec["rewarmup"] == {"rho": 1.3, "tau": 2}
    event = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"growth"' in line)
    assert abs(event["loss_jump"]) < 1e-4 and "width first, then depth" in event["order"]
