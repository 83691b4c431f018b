"""The trainer hook API (train/hooks.py): event order, hook state through a checkpoint, and hook kinds the
run config asks for being added by the trainer itself."""

import hashlib
import json
from pathlib import Path

import pytest
from test_core_train import micro_cfg  # the same micro run (log every step, no periodic eval)

from nexus.config import ConfigError
from nexus.config_migration import saved_run_config
from nexus.train.hooks import Hook
from nexus.train.trainer import Trainer


class Recorder(Hook):
    """Records every event it sees, with its step argument where the event has one."""

    def __init__(self):
        self.events = []

    def on_fit_start(self, trainer):
        self.events.append(("fit_start",))

    def on_step_start(self, trainer, step):
        self.events.append(("step_start", step))

    def before_optimizer_step(self, trainer, step):
        self.events.append(("before_opt", step))

    def after_optimizer_step(self, trainer, step):
        self.events.append(("after_opt", step))

    def on_log(self, trainer, step, metrics):
        self.events.append(("log", step))

    def on_step_end(self, trainer, step, metrics):
        self.events.append(("step_end", step))

    def on_eval(self, trainer, step, val_loss):
        self.events.append(("eval", step))

    def on_checkpoint_save(self, trainer, path):
        self.events.append(("save", path.name))

    def on_fit_end(self, trainer, result):
        self.events.append(("fit_end", sorted(result)))


def test_events_arrive_in_loop_order(tmp_path):
    rec = Recorder()
    Trainer(
        micro_cfg(
            tmp_path / "run",
            "--train.steps",
            "4",
            "--train.log_every",
            "2",
            "--train.eval_every",
            "3",
            "--train.save_every",
            "2",
        ),
        quiet=True,
        hooks=[rec],
    ).fit()
    step = lambda s: [("step_start", s), ("before_opt", s), ("after_opt", s)]  # noqa: E731
    want = [
        ("fit_start",),
        *step(0),
        ("step_end", 1),
        *step(1),
        ("log", 2),
        ("save", "step_0000002"),
        ("step_end", 2),
        *step(2),
        ("eval", 3),
        ("step_end", 3),
        *step(3),
        ("log", 4),
        ("step_end", 4),
        ("eval", 4),
        ("save", "checkpoint"),
        ("fit_end", ["checkpoint", "dtype", "params", "sample", "step", "tokens_seen", "val_loss", "val_ppl"]),
    ]
    assert rec.events == want


class Counter(Hook):
    """Counts optimizer steps; keeps the count in the checkpoint."""

    state_key = "counter"

    def __init__(self):
        self.n, self.loaded_before_load_event = 0, None

    def after_optimizer_step(self, trainer, step):
        self.n += 1

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]

    def on_checkpoint_load(self, trainer):
        self.loaded_before_load_event = self.n


def test_hook_state_travels_through_the_checkpoint(tmp_path):
    Trainer(
        micro_cfg(tmp_path / "a", "--train.steps", "5", "--train.save_every", "3"), quiet=True, hooks=[Counter()]
    ).fit()
    hook = Counter()
    t = Trainer(
        micro_cfg(tmp_path / "b", "--train.steps", "5"),
        resume=str(tmp_path / "a" / "step_0000003"),
        quiet=True,
        hooks=[hook],
    )
    assert hook.loaded_before_load_event == 3
    t.fit()
    assert hook.n == 5


def test_a_hook_must_subclass_hook(tmp_path):
    class Plain:
        def on_log(self, trainer, step, metrics):
            pass

    with pytest.raises(TypeError, match="subclass nexus.train.hooks.Hook"):
        Trainer(micro_cfg(tmp_path / "run", "--train.steps", "2"), quiet=True, hooks=[Plain()])


def _growing_cfg(out):
    cfg = micro_cfg(out, "--train.steps", "6")
    cfg.train.set_hook("growth", at=3, spec={"family": "width", "hidden": 64})
    return cfg


@pytest.mark.parametrize("hooks", [[], [Recorder()]], ids=["no hooks", "another hook"])
def test_a_configured_growth_happens_whatever_hooks_the_caller_passed(tmp_path, hooks):
    """A run whose config grows does so when the caller passed no growth hook, or only other hooks (with
    another hook it used to train on without growing and say nothing: the trainer checked `not self.hooks`)."""
    t = Trainer(_growing_cfg(tmp_path / "run"), quiet=True, hooks=hooks)
    t.fit()
    assert [r["step"] for r in t.cfg.growth_history] == [3]
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e.get("event") == "growth"] == [3]


def test_the_trainer_knows_no_growth():
    import nexus.train.trainer as T

    assert "grow" not in Path(T.__file__).read_text().lower()


@pytest.mark.parametrize(
    "entry,needle",
    [
        ({"kind": "growht", "at": 3}, "train.hooks[].kind='growht' (valid: "),
        ({"kind": "growth", "at": 3, "spec": {"family": "width", "hidden": 64}, "when": 3}, "train.hooks[0].when=3"),
        ({"kind": "growth", "at": 6, "spec": {"family": "width", "hidden": 64}}, "train.hooks[0].at=6"),
        ({"kind": "growth", "at": 3}, "train.hooks[0].spec is missing"),
        ({"kind": "growth", "at": 3, "spec": {"family": "width", "hiden": 64}}, "train.hooks[0].spec.hiden=64"),
        ({"kind": "growth", "at": 3, "spec": {"family": "nexus_rank", "delta_m": 8}}, "nexus_rank"),
    ],
)
def test_a_bad_hook_entry_is_one_config_error_before_anything_is_written(tmp_path, entry, needle):
    cfg = micro_cfg(tmp_path / "run", "--train.steps", "6")
    cfg.train.hooks = [entry]
    with pytest.raises(ConfigError) as e:
        Trainer(cfg.validate(), quiet=True).fit()
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_an_unknown_hook_kind_names_every_registered_one(tmp_path):
    from nexus.train.hooks import HOOK_KINDS

    cfg = micro_cfg(tmp_path / "run", "--train.steps", "6")
    cfg.train.hooks = [{"kind": "growht"}]
    with pytest.raises(ConfigError) as e:
        Trainer(cfg.validate(), quiet=True)
    assert str(e.value) == f"train.hooks[].kind='growht' (valid: {'|'.join(HOOK_KINDS.names())})"


def test_a_configured_kind_passed_again_by_the_caller_is_refused(tmp_path):
    from nexus.growth.hook import GrowthHook

    with pytest.raises(
        RuntimeError, match=r"train.hooks\[0\] configures a 'growth' hook and the trainer was given one"
    ):
        Trainer(_growing_cfg(tmp_path / "run"), quiet=True, hooks=[GrowthHook()])


# ---- configs written before growth was a hook ------------------------------------------------------------------
OLD_TRAIN = {"steps": 6, "grow_at": 3, "growth": {"family": "width", "hidden": 64}}


def test_old_grow_at_and_growth_fields_load_as_a_growth_hook_entry():
    old = {"train": dict(OLD_TRAIN)}
    cfg = saved_run_config(old)
    assert cfg.train.hooks == [{"kind": "growth", "at": 3, "spec": {"family": "width", "hidden": 64}}]
    assert old == {"train": OLD_TRAIN}  # the caller's dict is not changed
    assert saved_run_config({"train": {"grow_at": 0, "growth": {}}}).train.hooks == []


def test_a_checkpoint_written_with_the_old_fields_resumes_and_grows(tmp_path):
    """A step-2 checkpoint whose config still says train.grow_at=3 / train.growth: resumed, it grows at 3."""
    from nexus.checkpoint import read_config

    Trainer(micro_cfg(tmp_path / "a", "--train.steps", "6", "--train.save_every", "2"), quiet=True).fit()
    ckpt = tmp_path / "a" / "step_0000002"
    d = json.loads((ckpt / "config.json").read_text())
    del d["train"]["hooks"]
    d["train"].update(grow_at=3, growth=OLD_TRAIN["growth"])
    (ckpt / "config.json").write_text(json.dumps(d))
    meta = json.loads((ckpt / "meta.json").read_text())  # as the older nexus wrote it, checksum included
    meta["sha256"]["config.json"] = hashlib.sha256((ckpt / "config.json").read_bytes()).hexdigest()
    (ckpt / "meta.json").write_text(json.dumps(meta))
    assert read_config(ckpt).train.hook("growth")["at"] == 3
    t = Trainer(None, resume=str(ckpt), quiet=True)
    t.fit()
    assert [r["step"] for r in t.cfg.growth_history] == [3]


def test_an_override_of_a_moved_field_names_where_it_went(capsys, tmp_path):
    from nexus.cli import main

    rc = main(["train", "--preset", "baseline-micro", "--train.grow_at", "3", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "train.grow_at moved into train.hooks" in err[0] and "--grow-at" in err[0]
    assert not (tmp_path / "r").exists()


def test_cli_growth_without_grow_at_is_refused(capsys, tmp_path):
    from nexus.cli import main

    rc = main(
        ["train", "--preset", "baseline-micro", "--growth", "{family: width, hidden: 64}", "--out", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "without --grow-at" in err[0]
    assert not (tmp_path / "r").exists()


def test_cli_grow_at_moves_a_preset_growth_and_keeps_its_spec():
    from nexus.cli import build_parser
    from nexus.cli.train import _plan_start, flag_overrides
    from nexus.presets import get_preset

    args, extra = build_parser("train").parse_known_args(
        ["train", "--preset", "sparkling-dense-tiny", "--grow-at", "7"]
    )
    extra, growth = flag_overrides(args, extra)
    plan = _plan_start(args, extra, None, growth=growth)
    spec = get_preset("sparkling-dense-tiny").train.hook("growth")["spec"]
    assert [h for h in plan.cfg.train.hooks if h["kind"] == "growth"] == [{"kind": "growth", "at": 7, "spec": spec}]


def test_nexus_train_adds_no_hook_its_config_does_not_ask_for(tmp_path):
    """The trainer `nexus train` builds gets the built-ins and the hooks of its config's train.hooks entries,
    nothing else; the run's own loss curve is one of those entries, in the config.yaml it writes."""
    from nexus.cli import build_parser
    from nexus.cli.train import _plan_start, execute, flag_overrides
    from nexus.train.hooks import HOOK_KINDS

    args, extra = build_parser("train").parse_known_args(
        ["train", "--preset", "baseline-micro", "--out", str(tmp_path / "r")]
    )
    extra, growth = flag_overrides(args, extra)
    plan = _plan_start(args, extra, None, growth=growth)
    assert {"kind": "loss_curve"} in plan.cfg.train.hooks
    seen = {}

    class Spy:
        is_main = True

        def __init__(self, cfg, **kw):
            seen.update(kw)

        def fit(self):
            return {}

        def release_parallel_wrapper(self):
            pass

    execute(plan, trainer_class=Spy)
    assert list(seen["hooks"]) == []
    assert [type(h) for h in seen["configured"]] == [HOOK_KINDS.get(e["kind"]) for e in plan.cfg.train.hooks]
