"""The growth hook (growth/hook.py) on micro runs, in-process: the lr plan it prints before training (the
pending growth's re-warmup, a resumed grown run's record), the growth summary it prints, the optimizer state it
carries through the growth, the probe batch of its post-growth monitor (the one `nexus grow` uses too), and
`grow_in_training`. Expected lrs come from SPARKLING's re-warmup (the new entries ramp linearly from the lr at
the growth step t_e to rho times it at t_e + tau) on a constant schedule, where the base lr is `train.lr`."""

import contextlib
import io
import json

import pytest
import torch
from test_core_train import micro_cfg

from nexus.checkpoint import load_trainer_state
from nexus.config_migration import saved_run_config
from nexus.growth import grow_checkpoint
from nexus.growth.hook import GrowthHook, grow_in_training
from nexus.growth.registry import parse_growth_spec
from nexus.train.trainer import Trainer

LR, RHO, TAU, AT, STEPS = 0.01, 1.5, 2, 2, 6
SPEC = {"family": "width", "hidden": 64, "init": "copy,copy", "rewarmup": [RHO, TAU]}
CONSTANT = (
    "--train.steps",
    str(STEPS),
    "--train.schedule",
    "constant",
    "--train.warmup_steps",
    "0",
    "--train.lr",
    str(LR),
    "--train.save_every",
    "3",
    "--train.keep_last",
    "5",
)


def _hook(trainer) -> GrowthHook:
    hooks = [h for h in trainer.hooks if isinstance(h, GrowthHook)]
    assert len(hooks) == 1
    return hooks[0]


def _printed(fn):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # Trainer.say writes through tqdm.write to sys.stdout
        result = fn()
    return result, out.getvalue()


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A 6-step constant-lr run grown at step 2 with re-warmup (1.5, 2), printed (not quiet); saves at 3 and 6."""
    run = tmp_path_factory.mktemp("grown")
    cfg = micro_cfg(run, *CONSTANT)
    cfg.train.set_hook("growth", at=AT, spec=SPEC)
    trainer = Trainer(cfg.validate(), quiet=False)
    _, printed = _printed(trainer.fit)
    return run, trainer, printed


def test_a_growth_in_training_prints_its_plan_and_summary_and_carries_the_optimizer_state(grown, tmp_path):
    """Every check of what the growth did sits in this one test: the growth itself runs in the fixture, and a
    mutation tool that runs only the tests reaching the growth code must find them here."""
    run, trainer, printed = grown
    # the plan printed before training: new entries at the lr at t_e (= LR) at step t_e, rho x LR at t_e + tau
    plan = next(line for line in printed.splitlines() if line.startswith("lr plan: "))
    assert f"growth step {AT}: old entries {LR:.3g}, new {LR:.3g}" in plan
    assert f"(new entries {RHO * LR:.3g} at step {AT + TAU})" in plan
    # the growth summary names the step and the grown size
    after = sum(p.numel() for p in trainer.model.parameters())
    line = next(line for line in printed.splitlines() if line.startswith("grew at step "))
    assert line.startswith(f"grew at step {AT} (width)") and f"-> {after / 1e6:.3g}M" in line
    assert f"rho {RHO} over {TAU} steps" in line
    hook = _hook(trainer)
    assert "rms_ratio_per_layer" in hook.report and hook.monitor_growths == 1  # the growth's report, on the hook
    # an entry's step counts the optimizer steps it took: old entries STEPS, entries new at AT only the rest
    steps = [
        st["step"]
        for st in trainer.optimizer.state_dict()["state"].values()
        if isinstance(st.get("step"), torch.Tensor) and st["step"].numel() > 1
    ]
    assert steps, "no per-entry step after a width growth"
    assert max(float(s.max()) for s in steps) == STEPS and min(float(s.min()) for s in steps) == STEPS - AT
    # `nexus grow` on the same run's step-2 checkpoint: the same pre-growth model, so the monitor's probe batch
    # must give the same pre-growth RMS (the continued runs log the same values)
    base = tmp_path / "base"
    Trainer(micro_cfg(base, *CONSTANT[:-4], "--train.save_every", "2", "--train.keep_last", "5"), quiet=True).fit()
    grow_checkpoint(base / "step_0000002", tmp_path / "g", SPEC, probe_verify=False)
    theirs = load_trainer_state(tmp_path / "g", with_optimizer=False)["hooks"]["growth"]["monitor"]
    ours = hook.monitor.state_dict()
    assert torch.equal(ours["probe"], theirs["probe"]) and ours["base_rms"] == theirs["base_rms"]
    # the grown checkpoint's config has no hook entry: its growth history alone brings the hook back on resume,
    # with the re-warmup rule its record asks for and the monitor `nexus grow` stored
    resumed = Trainer(None, resume=str(tmp_path / "g"), quiet=True)
    assert not resumed.cfg.train.hooks
    assert (resumed.lr_rule.t_e, resumed.lr_rule.rho, resumed.lr_rule.tau) == (AT, RHO, TAU)
    assert _hook(resumed).monitor is not None and _hook(resumed).monitor_growths == 1


def test_a_resumed_grown_run_prints_the_plan_of_its_growth_record(grown, tmp_path):
    run, _, _ = grown
    trainer = Trainer(None, resume=str(run / "step_0000003"), quiet=False)
    _, printed = _printed(lambda: _hook(trainer).on_fit_start(trainer))
    # step 3 is half way up the ramp: LR + (rho LR - LR) * (3 - t_e) / tau
    assert f"first step 3: {LR:.3g} (new entries {LR * (1 + (RHO - 1) * (3 - AT) / TAU):.3g})" in printed


def test_the_pending_plan_of_a_family_without_rewarmup_keeps_new_entries_on_the_schedule(tmp_path):
    cfg = micro_cfg(
        tmp_path / "run",
        *CONSTANT,
        "--model.projection.kind",
        "nexus_rank",
        "--model.projection.rank_m",
        "48",
        "--model.projection.rank_a",
        "64",
    )
    cfg.train.set_hook("growth", at=AT, spec={"family": "nexus_rank", "delta_m": 8, "delta_a": 8})
    trainer = Trainer(cfg.validate(), quiet=False)
    _, printed = _printed(lambda: _hook(trainer).on_fit_start(trainer))
    assert f"growth step {AT}: old entries {LR:.3g}, new {LR:.3g}" in printed and "new entries" not in printed
    assert _hook(trainer).report is None  # nothing grown yet


def test_a_resume_past_the_schedules_horizon_says_the_lr_stays_at_its_floor(tmp_path):
    """A 3-step cosine run resumed to 6 steps keeps its horizon of 3: every remaining step is at the floor
    (min_lr_ratio x lr, the cosine's end), and the plan printed before training says so."""
    from nexus.train.resume import resume_config

    Trainer(
        micro_cfg(
            tmp_path / "a",
            "--train.steps",
            "3",
            "--train.schedule",
            "cosine",
            "--train.warmup_steps",
            "0",
            "--train.lr",
            str(LR),
            "--train.min_lr_ratio",
            "0.1",
        ),
        quiet=True,
    ).fit()
    cfg, _ = resume_config(tmp_path / "a" / "checkpoint", ["--train.steps", "6"], out_dir=tmp_path / "b")
    cfg.train.set_hook("growth", at=4, spec={"family": "width", "hidden": 64})
    trainer = Trainer(cfg.validate(), resume=str(tmp_path / "a" / "checkpoint"), quiet=False)
    _, printed = _printed(lambda: _hook(trainer).on_fit_start(trainer))
    assert f"first step 3: {0.1 * LR:.3g}" in printed
    assert "note: the lr stays at its floor (train.min_lr_ratio=0.1 x lr) for every remaining step" in printed


def test_grow_in_training_adds_one_growth_hook_and_reuses_it(tmp_path):
    trainer = Trainer(micro_cfg(tmp_path / "run", "--train.steps", "2"), quiet=True)
    assert not any(isinstance(h, GrowthHook) for h in trainer.hooks)
    report = grow_in_training(trainer, parse_growth_spec({"family": "width", "hidden": 48}, "spec"))
    hook = _hook(trainer)
    assert trainer.model.cfg.d_model == 48 and "rms_ratio_per_layer" in report and hook.monitor is not None
    grow_in_training(trainer, parse_growth_spec({"family": "width", "hidden": 64}, "spec"))
    assert _hook(trainer) is hook and trainer.model.cfg.d_model == 64
    assert [r["step"] for r in trainer.cfg.growth_history] == [0, 0] and hook.monitor_growths == 2
    trainer.fit()  # the added hook grows nothing more: it has no step of its own
    assert len(trainer.cfg.growth_history) == 2 and trainer.model.cfg.d_model == 64


@pytest.mark.parametrize("entry,at", [({"kind": "growth"}, 0), ({"kind": "growth", "at": 0}, 0)])
def test_a_growth_entry_at_step_0_never_grows(tmp_path, entry, at):
    cfg = micro_cfg(tmp_path / "run", "--train.steps", "2")
    cfg.train.hooks = [entry]
    trainer = Trainer(cfg.validate(), quiet=True)
    assert _hook(trainer).at == at and _hook(trainer).spec is None
    trainer.fit()
    assert trainer.cfg.growth_history == [] and trainer.model.cfg.d_model == 32


@pytest.mark.parametrize("upgraded", [False, True])
def test_a_growth_spec_at_step_0_is_kept_and_the_run_says_it_never_grows(tmp_path, capsys, upgraded):
    """A spec with at 0 (also what an old config's train.grow_at 0 + train.growth upgrades to) trains without
    growing, and says so even when quiet instead of dropping the spec silently."""

    cfg = micro_cfg(tmp_path / "run", "--train.steps", "2")
    spec = {"family": "width", "hidden": 64}
    if upgraded:
        d = cfg.to_dict()
        d["train"].pop("hooks", None)
        d["train"].update(grow_at=0, growth=spec)
        cfg = saved_run_config(d)
    else:
        cfg.train.hooks = [{"kind": "growth", "at": 0, "spec": spec}]
    trainer = Trainer(cfg.validate(), quiet=True)
    trainer.fit()
    assert trainer.cfg.growth_history == [] and trainer.model.cfg.d_model == 32
    err = capsys.readouterr().err
    assert (
        "note: train.hooks[0] has a spec but at=0: this run never grows (valid: at N with 0 < N < "
        "train.steps (2) to grow at step N)" in err
    )


def test_only_a_spec_that_never_applies_gets_the_never_grows_note(tmp_path):
    """The note is for a spec at step 0 alone: a hook that grows at a real step, or an entry without a spec,
    says nothing of the kind."""
    cfg = micro_cfg(tmp_path / "run", "--train.steps", "4").validate()
    spec = {"family": "width", "hidden": 64}
    assert GrowthHook.from_config({"kind": "growth", "at": 2, "spec": spec}, cfg, "h").idle_note is None
    assert GrowthHook.from_config({"kind": "growth", "at": 0}, cfg, "h").idle_note is None
    assert "never grows" in GrowthHook.from_config({"kind": "growth", "at": 0, "spec": spec}, cfg, "h").idle_note


def test_a_boolean_growth_step_is_refused(tmp_path):
    from nexus.config import ConfigError

    cfg = micro_cfg(tmp_path / "run", "--train.steps", "4")
    cfg.train.hooks = [{"kind": "growth", "at": True, "spec": {"family": "width", "hidden": 64}}]
    with pytest.raises(ConfigError, match=r"train.hooks\[0\].at=True"):
        Trainer(cfg.validate(), quiet=True)
    assert not (tmp_path / "run").exists()


def test_grow_in_training_on_a_resumed_trainer_before_fit_keeps_its_event_and_trains_on(tmp_path):
    """benchmarks/studies/width_growth.py's path: resume a checkpoint into a new folder, grow before fit(), train
    on. The growth event used to be written before fit() cut metrics.jsonl back to the resumed step, which dropped
    it and changed the file under the open sink: the next logged line was refused ("was changed while the run
    wrote it"). Records logged before fit() now go in once the run directory is prepared."""
    from nexus.train.resume import resume_config

    Trainer(micro_cfg(tmp_path / "a", "--train.steps", "2"), quiet=True).fit()
    cfg, _ = resume_config(
        tmp_path / "a" / "checkpoint", ["--train.steps", "4", "--train.log_every", "1"], out_dir=tmp_path / "b"
    )
    trainer = Trainer(cfg.validate(), resume=str(tmp_path / "a" / "checkpoint"), quiet=True)
    grow_in_training(trainer, parse_growth_spec({"family": "width", "hidden": 48}, "spec"))
    assert not (tmp_path / "b" / "metrics.jsonl").exists()  # nothing written before fit() prepares the folder
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("event") == "growth"] == [2]
    assert [r["step"] for r in rows if "loss" in r] == [3, 4] and trainer.model.cfg.d_model == 48
