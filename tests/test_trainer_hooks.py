"""The trainer hook API (train/hooks.py): event order, hook state through a checkpoint, and hook kinds the
run config asks for being added by the trainer itself."""
import json

import pytest

from nexus.train.hooks import Hook
from nexus.train.trainer import Trainer
from test_core_train import micro_cfg  # the same micro run (log every step, no periodic eval)


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
    Trainer(micro_cfg(tmp_path / "run", "--train.steps", "4", "--train.log_every", "2", "--train.eval_every", "3",
                      "--train.save_every", "2"),
            quiet=True, hooks=[rec]).fit()
    step = lambda s: [("step_start", s), ("before_opt", s), ("after_opt", s)]  # noqa: E731
    want = [("fit_start",),
            *step(0), ("step_end", 1),
            *step(1), ("log", 2), ("save", "step_0000002"), ("step_end", 2),
            *step(2), ("eval", 3), ("step_end", 3),
            *step(3), ("log", 4), ("step_end", 4),
            ("eval", 4), ("save", "checkpoint"),
            ("fit_end", ["checkpoint", "params", "sample", "step", "tokens_seen", "val_loss", "val_ppl"])]
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
    Trainer(micro_cfg(tmp_path / "a", "--train.steps", "5", "--train.save_every", "3"), quiet=True,
            hooks=[Counter()]).fit()
    hook = Counter()
    t = Trainer(micro_cfg(tmp_path / "b", "--train.steps", "5"), resume=str(tmp_path / "a" / "step_0000003"),
                quiet=True, hooks=[hook])
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
    cfg = micro_cfg(out, "--train.steps", "6", "--train.grow_at", "3")
    cfg.train.growth = {"family": "width", "hidden": 64}
    return cfg


@pytest.mark.parametrize("hooks", [[], [Recorder()]], ids=["no hooks", "another hook"])
def test_a_configured_growth_happens_whatever_hooks_the_caller_passed(tmp_path, hooks):
    """A run with train.grow_at grows even when the caller registered no growth hook, or only other hooks
    (it used to grow only when the hook list was empty, and then refuse; with another hook it trained on
    without growing and said nothing)."""
    t = Trainer(_growing_cfg(tmp_path / "run"), quiet=True, hooks=hooks)
    t.fit()
    assert [r["step"] for r in t.cfg.growth_history] == [3]
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e.get("event") == "growth"] == [3]
