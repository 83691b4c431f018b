"""Trainer.run_step(), the public single-step API (issue 49 item 4): N calls of it train exactly as fit() does for
N steps (weights, optimizer state, counters, bitwise), with the same hook events in the same order."""

import torch
from test_core_train import micro_cfg  # the same micro run (log every step, no periodic eval)
from test_trainer_hooks import Recorder

from nexus.train.trainer import Trainer

STEPS = 5


def _state(trainer) -> dict:
    opt = trainer.optimizer.state_dict()["state"]
    return {
        "model": {k: v.clone() for k, v in trainer.model.state_dict().items()},
        "optimizer": {(i, k): v.clone() if torch.is_tensor(v) else v for i, s in opt.items() for k, v in s.items()},
        "step": trainer.step,
        "tokens_seen": trainer.tokens_seen,
    }


def test_n_run_steps_equal_fit_for_n_steps_bitwise(tmp_path):
    args = ("--train.steps", str(STEPS), "--train.log_every", "2", "--train.eval_every", "3", "--train.save_every", "0")
    fit_rec, step_rec = Recorder(), Recorder()
    fitted = Trainer(micro_cfg(tmp_path / "fit", *args), quiet=True, hooks=[fit_rec])
    fitted.fit()
    stepped = Trainer(micro_cfg(tmp_path / "step", *args), quiet=True, hooks=[step_rec])
    metrics = [stepped.run_step() for _ in range(STEPS)]
    a, b = _state(fitted), _state(stepped)
    assert a["step"] == b["step"] == STEPS and a["tokens_seen"] == b["tokens_seen"] > 0
    assert a["model"].keys() == b["model"].keys() and a["optimizer"].keys() == b["optimizer"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for k, v in a["optimizer"].items():
        assert torch.equal(v, b["optimizer"][k]) if torch.is_tensor(v) else v == b["optimizer"][k], k
    # the same events from fit's start to its last step's end: steps, optimizer hooks, logs, the periodic evaluation
    events = fit_rec.events
    loop = events[events.index(("fit_start",)) + 1 : events.index(("step_end", STEPS)) + 1]
    assert step_rec.events == loop and ("eval", 3) in loop and ("log", 4) in loop
    # a logged step's metrics come back as host numbers, the others as train_step's device tensors
    assert isinstance(metrics[1]["loss"], float) and torch.is_tensor(metrics[0]["loss"])
