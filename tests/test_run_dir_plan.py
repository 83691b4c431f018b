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
    tmp_path, monkeypatch, capsys
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
    plan, plan_inode = (run / PLAN).read_bytes(), (run / PLAN).stat().st_ino
    moved = tmp_path / "moved"  # the folder moved between the stop and the resume: it continues where it now is
    run.rename(moved)
    run = moved
    said: list[str] = []
    res = run_resumable(cfg(), run, say=said.append)
    assert capsys.readouterr().out == ""  # the resumed trainer is quiet too
    assert (run / PLAN).stat().st_ino == plan_inode  # the plan it was started for, not rewritten
    assert said == ["  moved: resuming from step_0000002"]
    assert res["resumed_from"] == "step_0000002" and "branched_from" not in res
    assert res["val_loss"] == ref["val_loss"] and (run / PLAN).read_bytes() == plan
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == [1, 2, 3, 4]  # the stopped run's step 3 cut, steps 1-2 kept, 3-4 trained again
    assert not list(run.glob("step_*"))  # the final checkpoint supersedes the step checkpoints
    assert json.loads((run / "done.json").read_text())["resumed_from"] == "step_0000002"


def test_a_changed_plan_is_refused_naming_three_fields_and_counting_the_rest(tmp_path):
    """The refusal's words: the changed fields sorted by dotted name, the first three as old -> new (a field on one
    side only shown as absent), then how many more."""
    from nexus.config_migration import saved_run_config
    from nexus.experiments.runs import _plan_fields

    run = tmp_path / "run"
    run_resumable(_cfg(tmp_path), run, say=lambda *_: None)
    d = _cfg(tmp_path).to_dict()
    d["train"]["optimizer"] = {"kind": "muon"}  # muon's own options are absent from the AdamW plan, AdamW's from it
    d["train"]["batch_size"] = 3
    other = saved_run_config(d)
    old, new = _plan_fields(_cfg(tmp_path).to_dict()), _plan_fields(other.to_dict())
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    assert len(changed) > 4 and set(new) - set(old)
    with pytest.raises(ConfigError) as e:
        check_plan(run, other)
    msg = str(e.value)
    shown = ", ".join(f"{k}: {old.get(k, '(absent)')} -> {new.get(k, '(absent)')}" for k in changed[:3])
    assert f"({shown} and {len(changed) - 3} more)" in msg and "\n" not in msg, msg
    assert "(absent)" in shown  # muon's own lr among the first three: absent from the AdamW plan
    assert "another config (train.batch_size: 8 -> 3, train.optimizer.kind: " in msg  # dotted names from the top


def test_a_plan_is_compared_by_value_whatever_the_order_of_its_keys(tmp_path):
    import json

    run = tmp_path / "run"
    run_resumable(_cfg(tmp_path), run, say=lambda *_: None)
    stored = json.loads((run / PLAN).read_text())

    def reordered(x):
        if isinstance(x, dict):
            return {k: reordered(x[k]) for k in reversed(list(x))}
        if isinstance(x, list):
            return [reordered(v) for v in x]
        return x

    stored["train"]["hooks"] = [{"kind": "growth", "at": 2, "spec": {"family": "width", "ffn": 256}}]
    (run / PLAN).write_text(json.dumps(reordered(stored)))
    same = _cfg(tmp_path)
    same.train.hooks = [{"spec": {"ffn": 256, "family": "width"}, "at": 2, "kind": "growth"}]
    check_plan(run, same)  # a plan written with its keys in another order is the same plan


def test_json_results_are_written_indented_paths_as_text_and_entered_only_when_asked(tmp_path):
    import json
    from pathlib import Path

    from nexus.experiments.runs import write_json_atomic
    from nexus.outdir import read_manifest

    obj = {"where": Path("a/b"), "values": [1, 2.5]}
    write_json_atomic(tmp_path / "r.json", obj)
    assert (tmp_path / "r.json").read_text() == json.dumps(obj, indent=2, default=str)
    assert read_manifest(tmp_path) is None  # a file outside a nexus output folder: no manifest made for it


def test_a_run_is_trained_quietly_by_default_and_its_wall_time_and_records_are_its_own(tmp_path, capsys):
    """Bug (2026-12-08, found by mutation testing): plan.json was written before the run folder had a manifest, so
    nexus never recorded it, and `nexus train --out RUN --overwrite` then refused it as "not written by nexus"."""
    import time

    from nexus.outdir import read_manifest

    run = tmp_path / "run"
    t0 = time.perf_counter()
    res = run_resumable(_cfg(tmp_path), run, say=lambda *_: None)
    took = time.perf_counter() - t0
    assert capsys.readouterr().out == ""
    assert 0 < res["wall_s"] <= took and res["resumed_from"] is None and "branched_from" not in res
    assert "sample" not in res and "sample" not in (run / "done.json").read_text()
    assert {"plan.json", "done.json", "metrics.jsonl"} <= set(read_manifest(run)["files"])


def test_a_finished_run_without_its_manifest_is_refused_not_believed(tmp_path):
    run = tmp_path / "run"
    run_resumable(_cfg(tmp_path), run, say=lambda *_: None)
    (run / ".nexus-run").unlink()
    with pytest.raises(ConfigError, match="'done.json' is not the file nexus wrote there \\(not in its manifest\\)"):
        run_resumable(_cfg(tmp_path), run, say=lambda *_: None)


def test_a_branch_from_another_runs_checkpoint_equals_the_single_run_and_says_where_it_branched(tmp_path):
    """start_from: a run that trained exactly this run's first steps (constant lr, the same seed and data) hands over
    its checkpoint; the branch trains only the steps after it and ends bit for bit as the single run."""
    import json

    def cfg(steps):
        c = _cfg(tmp_path)
        c.train.steps, c.train.schedule, c.train.warmup_steps, c.train.eval_every = steps, "constant", 0, 2
        return c

    first = tmp_path / "first"
    run_resumable(cfg(2), first, say=lambda *_: None)
    single = run_resumable(cfg(4), tmp_path / "single", say=lambda *_: None)
    branch = tmp_path / "branch"
    res = run_resumable(cfg(4), branch, say=lambda *_: None, start_from=first / "checkpoint")
    assert res["branched_from"] == str(first / "checkpoint") and res["resumed_from"] is None
    assert json.loads((branch / "done.json").read_text())["branched_from"] == str(first / "checkpoint")
    assert res["val_loss"] == single["val_loss"]
    steps = [json.loads(x)["step"] for x in (branch / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == [3, 4]  # its own steps only: the first two are the checkpoint's


def _plan_of(tmp_path, **train):
    """A run folder holding only a plan.json: today's micro config with `train` fields changed (no training)."""
    import json

    run = tmp_path / "run"
    run.mkdir()
    stored = _cfg(tmp_path).to_dict()
    stored["train"].update(train)
    (run / PLAN).write_text(json.dumps(stored))
    return run


@pytest.mark.parametrize("four", [False, True])
def test_the_refusal_lists_three_changed_fields_and_counts_only_those_past_the_third(tmp_path, four):
    today = _cfg(tmp_path).train
    changes = {"batch_size": today.batch_size + 2, "lr": 1e-3, "seed": today.seed + 7}
    if four:
        changes["weight_decay"] = today.weight_decay + 0.5
    with pytest.raises(ConfigError) as e:
        check_plan(_plan_of(tmp_path, **changes), _cfg(tmp_path))
    shown = (
        f"train.batch_size: {today.batch_size + 2} -> {today.batch_size}, train.lr: 0.001 -> {today.lr}, "
        f"train.seed: {today.seed + 7} -> {today.seed}"
    )
    assert f"holds a run of another config ({shown}{' and 1 more' if four else ''}) (valid: " in str(e.value)


def test_a_field_the_plan_had_and_todays_config_lacks_reads_absent(tmp_path):
    muon = {"kind": "muon", "lr": 0.02, "momentum": 0.95, "ns_method": "newton_schulz", "ns_steps": 5}
    with pytest.raises(ConfigError) as e:
        check_plan(_plan_of(tmp_path, optimizer=muon), _cfg(tmp_path))
    want = (
        '(train.optimizer.kind: "muon" -> "adamw", train.optimizer.lr: 0.02 -> (absent), '
        "train.optimizer.momentum: 0.95 -> (absent) and 3 more) (valid: "
    )
    assert want in str(e.value), str(e.value)


def test_a_json_result_joins_a_nexus_folders_manifest_only_when_asked(tmp_path):
    from nexus.experiments.runs import write_json_atomic
    from nexus.outdir import TRAIN_RUN, read_manifest, record

    record(tmp_path, TRAIN_RUN)  # a nexus output folder, its manifest listing nothing yet
    write_json_atomic(tmp_path / "mine.json", {"a": 1})
    assert "mine.json" not in read_manifest(tmp_path)["files"]
    write_json_atomic(tmp_path / "entered.json", {"a": 1}, enter=True)
    assert "entered.json" in read_manifest(tmp_path)["files"]
