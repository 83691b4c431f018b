"""A run directory is reused only for the config it was started for (experiments/runs.py, plan.json).

Bug (2026-12-07): the regime study's arch part was planned, killed, re-tuned (its lr moved 4e-3 -> 2e-3) and
run again into the same directories; `run_resumable` found done.json and returned the 4e-3 run's result, which
the ledger then recorded under the 2e-3 config."""

import pytest

from nexus.config import ConfigError
from nexus.experiments.runs import PLAN, check_plan, run_resumable
from nexus.presets import get_preset


def _cfg(tmp_path, lr=3e-3):
    cfg = get_preset("baseline-micro")
    cfg.train.steps, cfg.train.eval_every, cfg.train.log_every, cfg.train.lr = 2, 2, 1, lr
    cfg.train.out_dir = str(tmp_path / "ignored")  # run_resumable writes into the run directory it is given
    return cfg


def test_a_finished_run_is_reused_for_its_config_and_refused_for_another(tmp_path):
    run = tmp_path / "run"
    first = run_resumable(_cfg(tmp_path), run, say=lambda *_: None)
    assert (run / PLAN).is_file()
    again = run_resumable(_cfg(tmp_path), run, say=lambda *_: None)  # the same config: skipped, same result
    assert again["val_loss"] == first["val_loss"]
    with pytest.raises(ConfigError) as e:
        run_resumable(_cfg(tmp_path, lr=1e-3), run, say=lambda *_: None)
    msg = str(e.value)
    assert "train.lr: 0.003 -> 0.001" in msg and str(run) in msg and "\n" not in msg


def test_where_a_run_writes_and_runs_is_not_part_of_its_plan(tmp_path):
    run = tmp_path / "run"
    run_resumable(_cfg(tmp_path), run, say=lambda *_: None)
    other = _cfg(tmp_path)
    other.train.out_dir, other.train.device = str(tmp_path / "elsewhere"), "cuda"
    check_plan(run, other)  # no refusal: a GPU rerun of the same run is the same run


def test_a_directory_from_before_plan_json_is_not_refused(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    check_plan(run, _cfg(tmp_path))


def test_an_interrupted_run_resumes_from_its_newest_step_checkpoint_and_ends_as_one_never_stopped(
    tmp_path, monkeypatch
):
    """run_resumable's resume path in-process: a run stopped after its step-2 checkpoint resumes from it (plan kept,
    the metrics after step 2 cut, the resume said), and ends with the losses of the same run never stopped."""
    import json

    import nexus.train.trainer as T
    from nexus.train.hooks import Hook

    def cfg():
        c = _cfg(tmp_path)
        c.train.steps, c.train.save_every, c.train.eval_every = 4, 2, 2
        return c

    ref = run_resumable(cfg(), tmp_path / "ref", say=lambda *_: None)
    state = {"armed": True}

    class Stop(Hook):
        def on_log(self, trainer, step, metrics):
            if state["armed"] and step == 3:
                state["armed"] = False
                raise KeyboardInterrupt

    orig_init = T.Trainer.__init__

    def init_with_stop(self, *a, **k):
        orig_init(self, *a, **k)
        self.add_hook(Stop())

    monkeypatch.setattr(T.Trainer, "__init__", init_with_stop)
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_resumable(cfg(), run, say=lambda *_: None)
    assert not (run / "done.json").exists() and (run / "step_0000002").is_dir() and (run / PLAN).is_file()
    plan = (run / PLAN).read_bytes()
    said: list[str] = []
    res = run_resumable(cfg(), run, say=said.append)
    assert said == ["  run: resuming from step_0000002"]
    assert res["resumed_from"] == "step_0000002" and "branched_from" not in res
    assert res["val_loss"] == ref["val_loss"] and (run / PLAN).read_bytes() == plan
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == sorted(set(steps)) and steps[-1] == 4
    assert not list(run.glob("step_*"))  # the final checkpoint supersedes the step checkpoints
    assert json.loads((run / "done.json").read_text())["resumed_from"] == "step_0000002"
