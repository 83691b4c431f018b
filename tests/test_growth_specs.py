"""Typed growth specs and the trainer's growth hook (issue 16 items 4-5): a bad spec of any family fails
before step 0 with exit 2, the CLI flags come from the spec fields, growth mid-run goes through
Trainer.swap, and a grown run resumes bit-exactly (the re-warmup rule comes back through on_resume)."""

import json
from pathlib import Path

import pytest
import torch

from nexus.cli import main
from nexus.config import ConfigError
from nexus.config_overrides import parse_overrides
from nexus.presets import get_preset

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.steps",
    "4",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.sample_tokens",
    "4",
]
MODEL_OF = {  # a model each family applies to, so the spec's own fields are what is wrong
    "width": [],
    "nexus_rank": [
        "--model.projection.kind",
        "nexus_rank",
        "--model.projection.rank_m",
        "48",
        "--model.projection.rank_a",
        "64",
    ],
    "tokenformer": ["--model.projection.kind", "pattention", "--model.projection.param_tokens", "16"],
    "retrofit": [],
}
BAD_SPECS = [  # (family, spec, what the one error line must name)
    ("width", "{family: width, hidden: -8}", "width.hidden=-8"),
    ("width", "{family: width, hidden: 64, init: sideways}", "--init='sideways'"),
    ("width", "{family: width, hidden: 64, rewarmup: [1.3]}", "--rewarmup="),
    ("width", "{family: width, hiden: 64}", "hiden"),
    ("nexus_rank", "{family: nexus_rank, delta_m: 0}", "--delta-m=0"),
    ("nexus_rank", "{family: nexus_rank, delta_m: 8, cut: sideways}", "--cut='sideways'"),
    ("nexus_rank", "{family: nexus_rank, delta_m: 8, seed: x}", "--growth-seed='x'"),
    ("nexus_rank", "{family: nexus_rank, delta_mm: 8}", "delta_mm"),
    ("tokenformer", "{family: tokenformer, add_tokens: -2}", "--add-tokens=-2"),
    ("tokenformer", "{family: tokenformer, add_tokens: 8, noise_frac: abc}", "--noise-frac='abc'"),
    ("tokenformer", "{family: tokenformer, add_tokens: 8, init: warm}", "--token-init='warm'"),
    ("tokenformer", "{family: tokenformer, add_ffn_tokens: 8}", "no FFN Pattention"),
    ("retrofit", "{family: retrofit, order: 1}", "--order=1"),
    ("retrofit", "{family: retrofit, kind: lower-order}", "--retrofit='lower-order'"),
    ("retrofit", "{family: retrofit, seed: x}", "--growth-seed='x'"),
    ("retrofit", "{family: retrofit, targets: qkvz}", "ho_targets"),
]


@pytest.fixture
def no_training_step(monkeypatch):
    """Any training step taken is a failure of the test (the spec must be refused before step 0)."""
    from nexus.train.trainer import Trainer

    def refuse(self, step):
        raise AssertionError(f"a training step ran (step {step}) before the bad growth spec was refused")

    monkeypatch.setattr(Trainer, "train_step", refuse)


@pytest.mark.parametrize("family,spec,needle", BAD_SPECS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_SPECS)])
def test_bad_spec_of_every_family_fails_before_step_0_with_exit_2(
    tmp_path, capsys, no_training_step, family, spec, needle
):
    out = tmp_path / "out"
    code = main(["train", *MICRO, *MODEL_OF[family], "--grow-at", "2", "--growth", spec, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


@pytest.mark.parametrize("family,spec,needle", BAD_SPECS[::3], ids=[f for f, _, _ in BAD_SPECS[::3]])
def test_bad_spec_fails_before_step_0_through_the_python_trainer(tmp_path, no_training_step, family, spec, needle):
    """The same check without the CLI: the config's growth hook refuses before the run directory is written."""
    import yaml

    from nexus.train.trainer import Trainer

    cfg = parse_overrides(
        get_preset("baseline-micro"),
        [a for a in MICRO[2:]] + MODEL_OF[family] + ["--train.out_dir", str(tmp_path / "run")],
    )
    cfg.train.set_hook("growth", at=2, spec=yaml.safe_load(spec))
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        Trainer(cfg.validate(), quiet=True).fit()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["grow", "train"])
def test_cli_flags_are_generated_from_the_spec_fields_with_their_reasons(capsys, command):
    from dataclasses import fields

    from nexus.growth import spec_classes

    assert main([command, "--help"]) == 0
    # argparse wraps lines, also after a hyphen ("in-" / "weights"): compare word sequences with hyphens rejoined
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    for family, cls in spec_classes().items():
        for f in fields(cls):
            for flag in [f.metadata["flag"]] if f.metadata.get("flag") else list(f.metadata.get("consts") or ()):
                assert flag in text, (family, f.name, flag)
                assert " ".join(f.metadata["reason"].split()).replace("- ", "-") in text, (family, flag)
    assert "--width-seed" not in text and "--retrofit-seed" not in text  # one spelling: --growth-seed
    src = (Path(__file__).resolve().parents[1] / "src" / "nexus").rglob("*.py")
    assert not [p for p in src if "_option_string_actions" in p.read_text()]


def test_spec_from_dict_is_the_union_parser():
    from nexus.growth import parse_growth_spec
    from nexus.growth.nexus_rank_growth import NexusRankSpec
    from nexus.growth.width import WidthSpec

    w = parse_growth_spec({"family": "width", "hidden": 96, "init": ["random", "copy"], "rewarmup": "1.3,20"})
    assert isinstance(w, WidthSpec) and (w.init_out, w.init_in) == ("random", "copy")
    assert w.rewarmup == {"rho": 1.3, "tau": 20} and not w.rewarmup_all
    assert parse_growth_spec(w.to_dict()).to_dict() == w.to_dict()  # a record re-parses to the same spec
    a = parse_growth_spec({"family": "width", "hidden": 96, "rewarmup_all": "1.5,7"})
    assert a.rewarmup == {"rho": 1.5, "tau": 7} and a.rewarmup_all is True
    assert parse_growth_spec(a.to_dict()).to_dict() == a.to_dict()
    n = parse_growth_spec({"family": "nexus_rank", "delta_a": 4})
    assert isinstance(n, NexusRankSpec) and (n.delta_m, n.delta_a, n.init, n.cut, n.seed) == (
        None,
        4,
        "exact",
        "in",
        None,
    )
    with pytest.raises(ConfigError, match="family one of") as e:
        parse_growth_spec({"family": "height"})
    assert all(f in str(e.value) for f in ("depth", "nexus_rank", "retrofit", "tokenformer", "width"))


def test_train_takes_the_family_flags_and_grows(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            *MICRO,
            "--train.steps",
            "4",
            *MODEL_OF["nexus_rank"],
            "--grow-at",
            "2",
            "--delta-m",
            "8",
            "--growth-seed",
            "3",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    cfg = json.loads((out / "checkpoint" / "config.json").read_text())
    rec = cfg["growth_history"][-1]
    assert cfg["model"]["projection"]["rank_m"] == 56 and rec["family"] == "nexus_rank" and rec["seed"] == 3
    assert cfg["train"]["hooks"] == [
        {"kind": "growth", "at": 2, "spec": {"family": "nexus_rank", "delta_m": 8, "seed": 3}},
        {"kind": "loss_curve"},
    ]  # `nexus train` asks for its curve
    capsys.readouterr()
    code = main(["train", *MICRO, "--delta-m", "8", "--out", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert code == 2 and "--grow-at" in err and not (tmp_path / "no").exists()
    code = main(["train", *MICRO, "--cut", "out", "--grow-at", "2", "--out", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert code == 2 and "--cut is a nexus_rank growth option" in err and not (tmp_path / "no").exists()
    code = main(
        [
            "train",
            *MICRO,
            *MODEL_OF["nexus_rank"],
            "--delta-m",
            "8",
            "--init",
            "copy,copy",
            "--grow-at",
            "2",
            "--out",
            str(tmp_path / "no"),
        ]
    )
    err = capsys.readouterr().err
    assert (
        code == 2 and "--init is a width growth option, not a nexus_rank one" in err and not (tmp_path / "no").exists()
    )


def _losses(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_grown_run_resumes_bit_exactly_with_its_rewarmup_rule(tmp_path):
    """Grow at step 3 with re-warmup; resuming from the step-4 checkpoint (into its own run) gives the
    same losses as the uninterrupted run, bit for bit: swap kept step, data cursor and RNG, and
    on_checkpoint_load brought back the re-warmup rule (without it the new entries would take the baseline lr)."""
    from nexus.train.trainer import Trainer

    run = tmp_path / "run"
    cfg = parse_overrides(
        get_preset("baseline-micro"),
        MICRO[2:]
        + [
            "--train.out_dir",
            str(run),
            "--train.steps",
            "8",
            "--train.save_every",
            "2",
            "--train.keep_last",
            "9",
            "--train.log_every",
            "1",
            "--train.lr",
            "1e-2",
            "--model.n_heads",
            "2",
        ],
    )
    cfg.train.set_hook("growth", at=3, spec={"family": "width", "hidden": 48, "ffn": 128, "rewarmup": [1.5, 3]})
    full = Trainer(cfg.validate(), quiet=True)
    full.fit()
    assert full.lr_rule is not None and full.lr_rule.t_e == 3 and full.model.cfg.d_model == 48
    ref = _losses(run)
    resumed = Trainer(None, resume=str(run / "step_0000004"), quiet=True)
    assert resumed.resumed_step == 4 and resumed.lr_rule is not None and resumed.lr_rule.t_e == 3
    resumed.fit()
    again = _losses(run)  # the resumed run rewrote the records after step 4 in the same run directory
    assert [again[s] for s in range(5, 9)] == [ref[s] for s in range(5, 9)]
    assert len(full.cfg.growth_history) == len(resumed.cfg.growth_history) == 1  # no second growth on resume


def test_swap_replaces_model_and_optimizer_and_keeps_step_and_rng(tmp_path):
    from nexus.growth import grow
    from nexus.train.trainer import Trainer

    cfg = parse_overrides(get_preset("baseline-micro"), MICRO[2:] + ["--train.out_dir", str(tmp_path / "r")])
    t = Trainer(cfg.validate(), quiet=True)
    t.train_step(0)
    t.step = 1
    model, new_cfg, opt, _ = grow(t.model, t.cfg, {"family": "width", "hidden": 48}, t.optimizer.state_dict(), 1)
    rng = torch.get_rng_state()
    t.swap(model, opt, lr_rule=None, cfg=new_cfg)
    assert torch.equal(torch.get_rng_state(), rng) and t.step == 1
    assert t.model is model and t.optimizer is opt and t.train_model is model and t.cfg.model.d_model == 48
    t.train_step(1)  # the swapped model trains
    with pytest.raises(RuntimeError, match="both or neither"):
        t.swap(model)


def test_an_internal_fault_in_a_grower_is_a_runtime_error_not_a_config_error(monkeypatch):
    """Exit 2 is for user input: a grower that meets a parameter it cannot place is a bug (traceback)."""
    from nexus.growth import grow, width
    from nexus.models import build_model

    cfg = parse_overrides(get_preset("baseline-micro"), MICRO[2:]).validate()
    model = build_model(cfg.model)
    monkeypatch.setattr(width, "check_roles", lambda *a: None)  # a hole in applies_to's net ...
    monkeypatch.setattr(width, "collect_roles", lambda model: {})  # ... and the grower knows no tensor's role
    with pytest.raises(RuntimeError, match="does not know how to grow") as e:
        grow(model, cfg, {"family": "width", "hidden": 48})
    assert not isinstance(e.value, ConfigError)


def test_experiment_dry_run_keeps_an_internal_fault_a_runtime_error(monkeypatch, tmp_path):
    from nexus.experiments import progressive as P
    from nexus.growth import inherit

    def broken(*a, **k):
        raise RuntimeError("planted internal fault")

    monkeypatch.setattr(inherit, "build_like", broken)
    with pytest.raises(RuntimeError, match="planted internal fault") as e:
        P.plan_progressive("nexus-rank", tokens=4096, out=str(tmp_path / "exp"), seeds=[0])
    assert not isinstance(e.value, ConfigError)


def test_growth_state_left_the_user_config_and_old_checkpoints_still_load(tmp_path):
    """frozen_* moved from model.projection (user settings) to model.growth_state (set by growth only);
    a checkpoint whose config.json was written the old way loads into the new section, and its model
    keeps the pinned scale."""
    from nexus.checkpoint import load_checkpoint
    from nexus.growth import grow
    from nexus.models import build_model

    cfg = parse_overrides(get_preset("baseline-micro"), MICRO[2:] + MODEL_OF["tokenformer"]).validate()
    model = build_model(cfg.model)
    grown, gcfg, _, _ = grow(model, cfg, {"family": "tokenformer", "add_tokens": 8})
    assert gcfg.model.growth_state["frozen_n"] == 16 and gcfg.model.projection.param_tokens == 24
    assert "frozen_n" not in gcfg.to_dict()["model"]["projection"]
    from nexus.checkpoint import save_checkpoint
    from nexus.data.tokenizer import ByteTokenizer

    ckpt = save_checkpoint(tmp_path / "ck", grown, gcfg, ByteTokenizer())
    old_style = json.loads((ckpt / "config.json").read_text())
    state = old_style["model"].pop("growth_state")  # what a config.json written before this branch holds
    old_style["model"]["projection"].update(state)
    (ckpt / "config.json").write_text(json.dumps(old_style))
    import hashlib

    meta = json.loads((ckpt / "meta.json").read_text())  # the old writer's digest of its own config.json
    meta["sha256"]["config.json"] = hashlib.sha256((ckpt / "config.json").read_bytes()).hexdigest()
    (ckpt / "meta.json").write_text(json.dumps(meta))
    loaded, lcfg, _ = load_checkpoint(ckpt)
    assert lcfg.model.growth_state == state and state["frozen_n"] == 16
    taus = {m.tau for m in loaded.modules() if hasattr(m, "tau") and hasattr(m, "n_tokens")}
    assert taus == {4.0}  # sqrt(16): the pinned pre-growth scale, not sqrt(24)
    with pytest.raises(ConfigError, match="set by growth only"):
        parse_overrides(get_preset("baseline-micro"), ["--model.growth_state.frozen_n", "5"])
