"""Trainer: bitwise exact resume, token-normalized accumulation, non-finite handling, checkpoints."""

import json

import pytest
import torch

from nexus.config_overrides import parse_overrides
from nexus.presets import get_preset
from nexus.train.trainer import Trainer, TrainingAborted


def micro_cfg(out, *extra):
    cfg = get_preset("baseline-micro")
    parse_overrides(
        cfg,
        [
            "--train.out_dir",
            str(out),
            "--train.log_every",
            "1",
            "--train.eval_every",
            "0",
            "--data.seq_len",
            "32",
            "--train.batch_size",
            "4",
            "--model.d_model",
            "32",
            "--train.sample_tokens",
            "8",
            *extra,
        ],
    )
    return cfg.validate()


def losses(run_dir):
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_exact_resume_is_bitwise(tmp_path, optimizer):
    n, k = 8, 3
    a = tmp_path / "a"
    Trainer(
        micro_cfg(
            a,
            "--train.steps",
            str(n),
            "--train.save_every",
            str(k),
            "--train.keep_last",
            "5",
            "--train.optimizer",
            optimizer,
        ),
        quiet=True,
    ).fit()
    b = tmp_path / "b"
    resume_cfg = micro_cfg(b, "--train.steps", str(n), "--train.optimizer", optimizer)
    Trainer(resume_cfg, resume=str(a / f"step_{k:07d}"), quiet=True).fit()
    la, lb = losses(a), losses(b)
    assert sorted(lb) == list(range(k + 1, n + 1))
    for s in range(k + 1, n + 1):
        assert la[s] == lb[s], (s, la[s], lb[s])


def test_accumulation_normalizes_by_valid_tokens(tmp_path):
    t = Trainer(micro_cfg(tmp_path, "--train.grad_accum", "2", "--train.grad_clip", "0"), quiet=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 259, (4, 32), generator=g)
    y = torch.randint(0, 259, (4, 32), generator=g)
    y1 = y.clone()
    y1[:2, :20] = -100  # micro-batch 1 has far fewer valid tokens than micro-batch 2
    t._micro_batches = lambda step: [(x[:2], y1[:2]), (x[2:], y1[2:])]
    t.optimizer.step = lambda found_inf=None: None
    t.optimizer.zero_grad = lambda set_to_none=True: None
    t.train_step(0)
    got = {n: p.grad.clone() for n, p in t.model.named_parameters()}
    t.model.zero_grad(set_to_none=True)
    out = t.model(x, labels=y1)  # reference: one batch, mean over all valid tokens
    out.loss.backward()
    for n, p in t.model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=1e-6, rtol=1e-4)


def test_nonfinite_loss_skips_then_aborts(tmp_path):
    """The skip is decided on the device (no host read inside train_step); the streak is checked when
    metrics are read (log steps)."""
    t = Trainer(micro_cfg(tmp_path, "--train.max_nonfinite", "3", "--train.steps", "10"), quiet=True)
    real = t.train_model.forward
    calls = {"n": 0}

    def poisoned(x, labels=None, **kw):
        out = real(x, labels=labels, **kw)
        calls["n"] += 1
        if calls["n"] in (2, 4, 5, 6):
            out.loss = out.loss * float("nan")
        return out

    t.train_model.forward = poisoned
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    m1 = t.read_step_metrics(t.train_step(0))
    assert not m1.get("skipped")
    after1 = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    state1 = {k: {kk: vv.clone() for kk, vv in v.items()} for k, v in t.optimizer.state_dict()["state"].items()}
    m2 = t.read_step_metrics(t.train_step(1))
    assert m2["skipped"] and t.nonfinite_total == 1 and m2["nonfinite_total"] == 1
    for n, p in t.model.named_parameters():  # the skipped step changed nothing: weights nor optimizer state
        assert torch.equal(p, after1[n])
    for name, st in t.optimizer.state_dict()["state"].items():
        for k, v in st.items():
            assert torch.equal(v, state1[name][k]), (name, k)
    assert any(not torch.equal(before[n], after1[n]) for n in before)
    t.train_step(2)
    assert int(t.health.in_row) == 0  # a good step ends the streak
    t.train_step(3)
    t.train_step(4)
    m = t.train_step(5)  # the third non-finite step in a row: found when the metrics are read
    with pytest.raises(TrainingAborted, match="3 steps in a row"):
        t.read_step_metrics(m)


def test_a_streak_between_log_steps_still_aborts_fit(tmp_path):
    t = Trainer(
        micro_cfg(tmp_path, "--train.max_nonfinite", "2", "--train.steps", "10", "--train.log_every", "5"), quiet=True
    )
    real = t.train_model.forward

    def poisoned(x, labels=None, **kw):
        out = real(x, labels=labels, **kw)
        out.loss = out.loss * float("nan")
        return out

    t.train_model.forward = poisoned
    with pytest.raises(TrainingAborted, match="5 steps in a row"):
        t.fit()
    assert t.step == 5  # stopped at the first log step after the streak began


def test_fit_writes_metrics_checkpoints_and_keeps_last_k(tmp_path):
    res = Trainer(
        micro_cfg(
            tmp_path,
            "--train.steps",
            "6",
            "--train.save_every",
            "2",
            "--train.keep_last",
            "2",
            "--train.eval_every",
            "3",
        ),
        quiet=True,
    ).fit()
    steps = sorted(p.name for p in tmp_path.glob("step_*"))
    assert steps == ["step_0000002", "step_0000004"]
    assert (tmp_path / "checkpoint" / "model.safetensors").is_file()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("val_loss" in r for r in rows) and rows[-1].get("final")
    assert all("rss_mb" in r for r in rows if "loss" in r)
    assert res["val_loss"] == rows[-1]["val_loss"]
    assert not list(tmp_path.glob(".*tmp*"))


def test_training_reduces_validation_loss(tmp_path):
    t = Trainer(micro_cfg(tmp_path, "--train.steps", "30", "--train.lr", "3e-3"), quiet=True)
    before = t.evaluate(2)
    after = t.fit()["val_loss"]
    assert after < before - 0.5


def test_last_step_is_evaluated_sampled_and_logged_once(tmp_path, monkeypatch, capsys):
    """steps a multiple of eval_every/sample_every: the end of the run evaluates and samples the last
    step, so the loop must not do it too (a second sample printed, a second record skewing plots)."""
    calls = {"sample": [], "evaluate": []}
    for name in calls:

        def counted(self, *a, _real=getattr(Trainer, name), _calls=calls[name], **kw):
            _calls.append(self.step)
            return _real(self, *a, **kw)

        monkeypatch.setattr(Trainer, name, counted)
    t = Trainer(
        micro_cfg(
            tmp_path,
            "--train.steps",
            "4",
            "--train.sample_every",
            "2",
            "--train.eval_every",
            "2",
            "--train.log_every",
            "2",
            "--train.save_every",
            "2",
        )
    )
    t.fit()
    assert calls == {"sample": [2, 4], "evaluate": [2, 4]}
    out = capsys.readouterr().out
    assert out.count("sample @ 2:") == 1 and "sample @ 4:" not in out and out.count("\nsample: ") == 1
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "val_loss" in r) for r in rows] == [(2, False), (2, True), (4, False), (4, True)]
    assert rows[-1].get("final") and sorted(p.name for p in tmp_path.glob("step_*")) == ["step_0000002"]


def test_a_saved_optimizer_state_this_run_does_not_hold_is_named_in_the_notes(tmp_path):
    """Nothing silent: the moments of a parameter the optimizer no longer holds are left out, and the run says so."""
    t = Trainer(micro_cfg(tmp_path / "a", "--train.steps", "1"), quiet=True)
    st = t.trainer_state()
    st["optimizer"]["state"]["frozen.weight"] = {"step": torch.tensor(1.0)}
    fresh = Trainer(micro_cfg(tmp_path / "b", "--train.steps", "1"), quiet=True)
    fresh._restore(st)
    assert [n for n in fresh.notes if "left out" in n] == [
        "optimizer state of 1 parameter(s) this run does not train was left out: frozen.weight"
    ]
    t2 = Trainer(micro_cfg(tmp_path / "c", "--train.steps", "1"), quiet=True)
    t2._restore(t.trainer_state())  # a matching state: no such note
    assert not [n for n in t2.notes if "left out" in n]


class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Every read of a tensor's value by the host (`_local_scalar_dense`: item(), float(), int(), bool();
    and Tensor.tolist, which bypasses the dispatcher) with the training step it happened in and the
    innermost nexus function that asked. On an accelerator each one waits for the device."""

    def __init__(self):
        super().__init__()
        self.step, self.reads, self.active = 0, [], False

    def _record(self):
        import traceback

        frames = [f for f in traceback.extract_stack() if "/nexus/" in f.filename]
        self.reads.append((self.step, frames[-1].name if frames else "?"))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "_local_scalar_dense":
            self._record()
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        real, spy = torch.Tensor.tolist, self

        def tolist(t):
            spy._record()
            return real(t)

        self._real_tolist, torch.Tensor.tolist, self.active = real, tolist, True
        return super().__enter__()

    def __exit__(self, *exc):
        if self.active:
            torch.Tensor.tolist, self.active = self._real_tolist, False
            return super().__exit__(*exc)


@pytest.mark.parametrize("log_every", [4, 1])
def test_steps_between_log_steps_read_nothing_from_the_device(tmp_path, log_every):
    """The training loop reads the device's numbers (loss, grad norm, skip counters) on log steps only; a
    step in between reads only its labels' valid-target counts, which are the loader's CPU tensors
    (`_valid_targets`). log_every 1 is the positive control: the spy sees the metric reads there."""
    t = Trainer(
        micro_cfg(tmp_path, "--train.steps", "8", "--train.log_every", str(log_every), "--train.save_every", "0"),
        quiet=True,
    )
    real_step, real_hooks = t.train_step, t.call_hooks
    spy = _HostReads()

    def spied_step(step):  # the spy covers the loop from the first step to the last one's hooks
        if step == 0:
            spy.__enter__()
        spy.step = step + 1  # every read until the next step belongs to the step that ends as step + 1
        return real_step(step)

    def call_hooks(event, *args):
        if event == "on_fit_end":  # the final evaluation, sample and checkpoint: not a step
            spy.__exit__(None, None, None)
        return real_hooks(event, *args)

    t.train_step, t.call_hooks = spied_step, call_hooks
    try:
        t.fit()
    finally:
        spy.__exit__(None, None, None)
    device_reads = [(step, fn) for step, fn in spy.reads if fn != "_valid_targets"]
    log_steps = {s for s in range(1, 9) if s % log_every == 0}
    assert {step for step, _ in device_reads} <= log_steps, device_reads
    assert {step for step, _ in device_reads} == log_steps  # the log steps do read (the spy works)
    assert any(fn == "_valid_targets" for _, fn in spy.reads)


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--train.compile", "true", "--train.compile_mode", "max-autotune"], "compile_mode='max-autotune'"),
        (["--train.compile_mode", "reduce-overhead"], "unless train.compile is true"),
    ],
)
def test_a_compile_mode_is_refused_when_unknown_or_without_compiling(tmp_path, extra, match):
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        micro_cfg(tmp_path, *extra)
