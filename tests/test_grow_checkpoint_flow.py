"""`grow_checkpoint` in-process (growth/checkpoint_flow.py), on a 4-step micro run: the grown checkpoint keeps
the source's step and data cursor, carries the grown optimizer and the new growth's post-growth monitor (the
source's other hook states too), records `--train.*` overrides in its config, and its report says what the
continued run will do; the source is never touched."""

import hashlib

import pytest
from test_core_train import micro_cfg

from nexus.checkpoint import load_checkpoint, load_trainer_state, read_config, save_checkpoint
from nexus.config import ConfigError
from nexus.growth import grow_checkpoint
from nexus.growth.rewarmup import lr_plan
from nexus.train.trainer import Trainer

SPEC = {"family": "width", "hidden": 64, "init": "copy,copy"}
STEPS = 4


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    run = tmp_path_factory.mktemp("base")
    Trainer(micro_cfg(run, "--train.steps", str(STEPS)), quiet=True).fit()
    return run / "checkpoint"


def _digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_a_grown_checkpoint_keeps_the_step_and_carries_the_grown_optimizer_and_monitor(base, tmp_path):
    before = _digest(base)
    src_state = load_trainer_state(base)
    out = tmp_path / "grown"
    report = grow_checkpoint(base, out, SPEC, probe_verify=False)
    assert _digest(base) == before  # the source stays untouched
    st = load_trainer_state(out)
    assert st["step"] == src_state["step"] == STEPS
    # everything else the trainer saved (data cursor, RNG) is the source's
    assert {k: v for k, v in st.items() if k not in ("optimizer", "hooks")}.keys() == {
        k for k in src_state if k not in ("optimizer", "hooks")
    }
    model, cfg, _ = load_checkpoint(out)
    assert cfg.model.d_model == 64 and [r["step"] for r in cfg.growth_history] == [STEPS]
    # the optimizer state belongs to the grown parameters (its tensors have the grown shapes)
    shapes = {tuple(p.shape) for p in model.parameters()}
    moments = [s["exp_avg"] for s in st["optimizer"]["state"].values() if "exp_avg" in s]
    assert moments and all(tuple(m.shape) in shapes for m in moments)
    assert any(m.shape[-1] == 64 or m.shape[0] == 64 for m in moments)
    # the post-growth monitor of this growth, counted as growth number 1
    assert st["hooks"]["growth"]["n_growths"] == 1 and "monitor" in st["hooks"]["growth"]
    assert {"rms_ratio_per_layer", "rms_ratio_max_dev"} <= set(report)
    assert "verify" not in report
    line = report["continued run"]
    # train.steps 4: nothing left to train; the line says how to continue, word for word
    assert line == (
        f"the run ended at step {STEPS}: continue with `nexus train --resume {out} --train.steps N` "
        f"(N > {STEPS}); its LR schedule is then re-planned over N steps, the new entries re-warmed as "
        "recorded (or give --train.steps N here)"
    )


def test_other_hook_states_travel_and_an_older_growth_monitor_is_replaced(base, tmp_path):
    model, cfg, tok = load_checkpoint(base)
    tstate = load_trainer_state(base)
    tstate["hooks"] = {"counter": {"n": 7}, "growth": {"n_growths": 0, "monitor": "stale"}}
    src = save_checkpoint(tmp_path / "src", model, cfg, tok, tstate)
    grow_checkpoint(src, tmp_path / "grown", SPEC, probe_verify=False)
    hooks = load_trainer_state(tmp_path / "grown")["hooks"]
    assert hooks["counter"] == {"n": 7}
    assert hooks["growth"]["n_growths"] == 1 and hooks["growth"]["monitor"] != "stale"


def test_train_overrides_are_recorded_and_the_report_plans_the_continued_run(base, tmp_path):
    out = tmp_path / "grown"
    report = grow_checkpoint(base, out, SPEC, train_overrides=["--train.steps", "10"])  # verifies by default
    cfg = read_config(out)
    assert cfg.train.steps == 10 and read_config(base).train.steps == STEPS
    # grown and trained further: the schedule is re-planned over the new train.steps, not kept at the old horizon
    assert not cfg.train.schedule_steps
    plan, _ = lr_plan(cfg.train, STEPS, cfg.growth_history[-1])
    assert report["continued run"] == f"`nexus train --resume {out}` trains steps {STEPS}->10; {plan}"
    assert isinstance(report["verify"], dict) and report["verify"]
    # what the override changed is reported, not dropped (nothing silent)
    assert report["notes"].startswith(f"train.steps {STEPS} -> 10 on a grown checkpoint: the LR schedule is re-planned")
    assert "notes" not in grow_checkpoint(base, tmp_path / "plain", SPEC, probe_verify=False)
    two = grow_checkpoint(
        base, tmp_path / "two", SPEC, probe_verify=False, train_overrides=["--train.steps", "10", "--train.lr", "0.001"]
    )["notes"]
    assert two.endswith("to choose the horizon); train.lr 0.003 -> 0.001 from step 4 on (resumed optimizer state kept)")


def test_a_checkpoint_without_trainer_state_grows_without_one(base, tmp_path):
    model, cfg, tok = load_checkpoint(base)
    src = save_checkpoint(tmp_path / "weights_only", model, cfg, tok, None)
    grow_checkpoint(src, tmp_path / "grown", SPEC, probe_verify=False)
    assert load_trainer_state(tmp_path / "grown") is None
    assert load_checkpoint(tmp_path / "grown")[1].growth_history[-1]["step"] == 0


def test_out_equal_to_the_source_is_refused(base):
    before = _digest(base)
    with pytest.raises(ConfigError, match="--out="):
        grow_checkpoint(base, base / ".", SPEC)
    assert _digest(base) == before


def test_a_continued_run_past_an_explicit_horizon_is_warned_to_sit_at_the_lr_floor(base, tmp_path):
    out = tmp_path / "grown"
    report = grow_checkpoint(
        base,
        out,
        SPEC,
        probe_verify=False,
        train_overrides=[
            "--train.steps",
            "10",
            "--train.schedule",
            "cosine",
            "--train.warmup_steps",
            "0",
            "--train.schedule_steps",
            "4",
        ],
    )
    # cosine over 4 steps ends at its floor at step 3: steps 4..9 all sit there
    assert report["continued run"].endswith(
        " WARNING: every remaining step is at the LR floor (train.min_lr_ratio); set --train.schedule_steps"
    )


def test_an_invalid_train_override_is_refused_and_nothing_is_written(base, tmp_path):
    with pytest.raises(ConfigError, match="train.steps"):
        grow_checkpoint(base, tmp_path / "grown", SPEC, probe_verify=False, train_overrides=["--train.steps", "-3"])
    assert not (tmp_path / "grown").exists()


def test_the_verification_trains_with_the_runs_own_optimizer(tmp_path):
    run = tmp_path / "muon"
    Trainer(micro_cfg(run, "--train.steps", "2", "--train.optimizer", "muon"), quiet=True).fit()
    report = grow_checkpoint(run / "checkpoint", tmp_path / "grown", SPEC)
    assert report["verify"]["optimizer"] == "muon"  # not TrainConfig()'s default (adamw)


def test_a_trained_tokenizer_is_the_probes_and_the_grown_checkpoints_and_the_probe_data_is_quiet(
    tmp_path, monkeypatch, capsys
):
    """A checkpoint with a trained BPE tokenizer: the monitor's probe data is read with that tokenizer (no new one
    trained), quietly (even where preparing it would print), and the grown checkpoint carries the same tokenizer."""
    import nexus.data.loader as loader
    from nexus.data.prepare import Progress

    run = tmp_path / "bpe"
    Trainer(
        micro_cfg(run, "--train.steps", "2", "--data.tokenizer", "bpe", "--data.bpe_vocab_size", "300"), quiet=True
    ).fit()
    src = run / "checkpoint"
    trained = []
    real_train = loader.BPETokenizer.train
    monkeypatch.setattr(
        loader.BPETokenizer, "train", staticmethod(lambda *a, **k: trained.append(1) or real_train(*a, **k))
    )
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "fresh-cache"))  # the probe data is prepared anew here
    monkeypatch.setattr(Progress, "EVERY_S", 0.0)  # a preparation that is not quiet prints at once
    capsys.readouterr()
    grow_checkpoint(src, tmp_path / "grown", SPEC, probe_verify=False)
    assert trained == []  # the checkpoint's own tokenizer, not one trained again
    assert "nexus data" not in capsys.readouterr().err
    _, _, tok_src = load_checkpoint(src)
    _, _, tok_out = load_checkpoint(tmp_path / "grown")
    assert type(tok_out).__name__ == "BPETokenizer" and tok_out.vocab_size == tok_src.vocab_size
    text = "def grow(model):\n    return model"
    assert tok_out.encode(text) == tok_src.encode(text)
