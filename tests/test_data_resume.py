"""The loader's position is part of the checkpoint: a run resumed on a prepared multi-shard corpus is
bitwise the uninterrupted one (with gradient accumulation), a resume with another batch size continues
the sample stream where it stopped, and the epoch count is in metrics.jsonl and on the console."""

import json

import pytest
import torch

from nexus.checkpoint import load_trainer_state
from nexus.config import DataConfig
from nexus.config_overrides import parse_overrides
from nexus.data.prepare import prepare
from nexus.data.sources import resolve_source
from nexus.data.tokenizer import ByteTokenizer
from nexus.presets import get_preset
from nexus.train.trainer import Trainer


@pytest.fixture
def prepared(tmp_path):
    docs = [f"document {i}: " + "several words of text, " * (3 + i % 9) + f"and its end {i}." for i in range(400)]
    (tmp_path / "c.txt").write_text("\n\n".join(docs))
    m = prepare(
        resolve_source(str(tmp_path / "c.txt")),
        DataConfig(),
        ByteTokenizer(),
        tmp_path / "prep",
        num_proc=1,
        shard_bytes=4000,
        progress=False,
    )
    assert len(m["shards"]["train"]) > 5
    return tmp_path / "prep", m["tokens"]["train"]


def cfg_for(out, data, *extra):
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
            "--data.source",
            str(data),
            "--data.seq_len",
            "32",
            "--train.batch_size",
            "4",
            "--model.d_model",
            "32",
            "--train.sample_tokens",
            "4",
            "--train.grad_accum",
            "2",
            *extra,
        ],
    )
    return cfg.validate()


def rows(run):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]


def test_resume_on_a_prepared_multi_shard_corpus_is_bitwise(tmp_path, prepared):
    data, _ = prepared
    a, b = tmp_path / "a", tmp_path / "b"
    Trainer(
        cfg_for(a, data, "--train.steps", "8", "--train.save_every", "3", "--train.keep_last", "5"), quiet=True
    ).fit()
    st = load_trainer_state(a / "step_0000003")
    assert st["data"]["samples"] == 3 * 2 * 4 and st["data"]["step"] == 3  # 3 steps x 2 micro-batches x 4
    Trainer(cfg_for(b, data, "--train.steps", "8"), resume=str(a / "step_0000003"), quiet=True).fit()
    la = {r["step"]: r["loss"] for r in rows(a) if "loss" in r}
    lb = {r["step"]: r["loss"] for r in rows(b) if "loss" in r}
    assert sorted(lb) == list(range(4, 9)) and all(la[s] == lb[s] for s in lb)


def test_a_resume_with_another_batch_size_continues_the_sample_stream(tmp_path, prepared):
    data, _ = prepared
    a = tmp_path / "a"
    Trainer(cfg_for(a, data, "--train.steps", "3", "--train.save_every", "3"), quiet=True).fit()
    t = Trainer(
        cfg_for(tmp_path / "b", data, "--train.steps", "6", "--train.batch_size", "3"),
        resume=str(a / "checkpoint"),
        quiet=True,
    )
    seen = []
    real = t.data.global_train_batch
    t.data.global_train_batch = lambda step, m, gbs, accum: (
        seen.append((step, m, gbs, accum)) or real(step, m, gbs, accum)
    )
    t.train_step(3)
    assert seen == [(3, 0, 3, 2), (3, 1, 3, 2)]
    # samples 24.. (3 steps x 2 x 4 drawn before), three at a time
    assert t.data.sample_index(3, 0, 3, 2) == 24 and t.data.sample_index(3, 1, 3, 2) == 27
    x, _ = t.data.global_train_batch(3, 1, 3, 2)
    want = torch.stack([t.data.train.window(int(s), 32)[0] for s in t.data.sampler.starts(27, 3)])
    assert torch.equal(x, want)


def test_epochs_are_logged_to_metrics_and_console(tmp_path, prepared, capsys):
    data, n_train = prepared
    run = tmp_path / "r"
    Trainer(cfg_for(run, data, "--train.steps", "4"), quiet=False).fit()
    logged = [r for r in rows(run) if "loss" in r]
    for r in logged:
        assert r["epoch"] == pytest.approx(r["tokens_seen"] / n_train, rel=1e-9)
    said = capsys.readouterr().out  # the trainer's lines go through tqdm.write (stdout)
    assert f"data: {n_train:,} training tokens; by step 4 the run will have read" in said
    assert "| epoch 0.0" in said
