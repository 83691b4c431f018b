"""Synthetic tasks: generated labels agree with each task's definition, bad options are one
ConfigError, `nexus train --data synthetic:...` + `nexus eval --task ...` work end to end."""

from __future__ import annotations

import json

import pytest
import torch

from nexus.config import ConfigError
from nexus.data.synthetic import IGNORE_INDEX, khop_answer, make_task


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_mqar_labels_are_the_values_bound_to_each_queried_key():
    task = make_task("mqar", {"vocab": 40, "pairs": 6}, 48)
    x, y = task.batch(16, _gen())
    assert x.shape == y.shape == (16, 48) and task.vocab_size == 40
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        binding = {row_x[2 * i]: row_x[2 * i + 1] for i in range(6)}
        assert len(binding) == 6 and all(1 <= k < 20 for k in binding) and all(20 <= v < 40 for v in binding.values())
        scored = [t for t, lab in enumerate(row_y) if lab != IGNORE_INDEX]
        assert len(scored) == 6 and min(scored) >= 12
        assert sorted(row_x[t] for t in scored) == sorted(binding)  # each key queried exactly once
        for t in scored:
            assert row_y[t] == binding[row_x[t]]
        assert all(row_x[t] == 0 for t in range(12, 48) if t not in scored)  # filler elsewhere


def test_khop_label_follows_the_khop_definition_and_needs_all_hops():
    for k in (1, 2, 3):
        task = make_task("khop", {"vocab": 24, "k": k}, 40)
        x, y = task.batch(12, _gen(k))
        for row_x, row_y in zip(x.tolist(), y.tolist()):
            assert [t for t, lab in enumerate(row_y) if lab != IGNORE_INDEX] == [39]
            assert row_y[39] == khop_answer(row_x, 39, k)
            if k > 1:  # fewer hops land elsewhere: the task needs exactly k
                assert khop_answer(row_x, 39, k - 1) != row_y[39]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_khop_all_positions_labels_every_position_by_the_definition(k):
    task = make_task("khop", {"vocab": 12, "k": k, "all_positions": 1}, 30)
    x, y = task.batch(6, _gen(k))
    scored = 0
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        for t in range(30):
            want = khop_answer(row_x, t, k)
            assert row_y[t] == (IGNORE_INDEX if want is None else want), (t, row_x)
            scored += want is not None
    assert scored > 2 * 6  # many positions per row are scored, not only the planted query
    last_only = make_task("khop", {"vocab": 12, "k": k}, 30).batch(6, _gen(k))
    assert torch.equal(last_only[0], x) and torch.equal(last_only[1][:, -1], y[:, -1])  # same data, same query


def test_induction_labels_are_the_next_token_inside_the_repeat():
    task = make_task("induction", {"vocab": 16}, 21)
    x, y = task.batch(4, _gen())
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        assert row_x[10:20] == row_x[:10]
        for t, lab in enumerate(row_y):
            assert lab == (row_x[t + 1] if 10 <= t < 20 else IGNORE_INDEX)


def test_batches_depend_only_on_the_generator():
    task = make_task("mqar", {}, 64)
    a, b = task.batch(4, _gen(7)), task.batch(4, _gen(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], task.batch(4, _gen(8))[0])


@pytest.mark.parametrize(
    "name,options,seq_len,needle",
    [
        ("parity", {}, 64, "synthetic:parity"),
        ("mqar", {"keys": 3}, 64, "keys"),
        ("mqar", {"pairs": 30}, 64, "pairs"),
        ("mqar", {"vocab": "big"}, 64, "vocab"),
        ("khop", {"k": 0}, 64, "k="),
        ("khop", {"k": 40}, 64, "k="),
        ("khop", {"all_positions": 2}, 64, "all_positions"),
        ("induction", {"vocab": 1}, 64, "vocab"),
    ],
)
def test_bad_task_or_option_is_one_config_error(name, options, seq_len, needle):
    with pytest.raises(ConfigError, match=needle):
        make_task(name, options, seq_len)


def _nexus(*args) -> int:
    from nexus.cli import main

    return main([str(a) for a in args])  # in-process: the console script's code path without the start-up


def test_train_on_mqar_then_eval_task_reports_accuracy(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        _nexus(
            "train",
            "--preset",
            "baseline-micro",
            "--data",
            "synthetic:mqar",
            "--data.synthetic",
            "{vocab: 32, pairs: 4}",
            "--data.seq_len",
            "32",
            "--train.steps",
            "6",
            "--train.eval_every",
            "0",
            "--train.eval_batches",
            "1",
            "--train.sample_tokens",
            "4",
            "--train.out_dir",
            out,
            "--model.attention.kind",
            "higher_order",
        )
        == 0
    )
    capsys.readouterr()
    assert _nexus("eval", "--checkpoint", out / "checkpoint", "--task", "mqar", "--batches", "2", "--json") == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["task"] == "mqar" and res["scored"] == 2 * 8 * 4 and 0.0 <= res["accuracy"] <= 1.0
    assert _nexus("eval", "--checkpoint", out / "checkpoint", "--task", "sorting") == 2
    assert "--task" in capsys.readouterr().err


def test_task_accuracy_counts_correct_predictions():
    from nexus.eval.synthetic_eval import task_accuracy

    class Oracle(torch.nn.Module):  # knows the answer for half of the rows, guesses 0 elsewhere
        def __init__(self, task):
            super().__init__()
            self.cfg = type("C", (), {"vocab_size": task.vocab_size})()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.task, self.answers = task, None

        def forward(self, x):
            y = self.answers
            logits = torch.zeros(*x.shape, self.task.vocab_size)
            rows = torch.arange(x.shape[0])[:, None].expand_as(x)
            good = (y != IGNORE_INDEX) & (rows % 2 == 0)
            logits[good, y[good]] = 1.0
            return type("O", (), {"logits": logits})()

    task = make_task("mqar", {"vocab": 40, "pairs": 5}, 32)
    oracle = Oracle(task)
    real_batch = task.batch

    def batch(bs, g):
        x, y = real_batch(bs, g)
        oracle.answers = y
        return x, y

    task.batch = batch
    res = task_accuracy(oracle, task, n_batches=2, batch_size=8)
    assert res["scored"] == 2 * 8 * 5
    assert res["accuracy"] == pytest.approx(0.5)
