"""DataModule's contract, each property checked against an independent computation on a corpus whose token at
position i is known (issue 42: the loader's mutation survivors). In-process, about a second."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from nexus.config import ConfigError, DataConfig
from nexus.data import loader
from nexus.data.loader import DataModule, default_cache_dir, default_num_proc
from nexus.data.synthetic import make_task
from nexus.data.tokenizer import ByteTokenizer
from nexus.models.lm_loss import IGNORE_INDEX


def _ramp_bin(tmp_path: Path, n: int, name: str = "c.bin") -> Path:
    """Token i is i % 250: every window's first token says where it starts (n <= 250 keeps starts unique)."""
    p = tmp_path / name
    (np.arange(n) % 250).astype(np.uint16).tofile(p)
    return p


def _bin_module(tmp_path, n_train: int, n_val: int, seq_len: int, **kw) -> DataModule:
    """Named splits (train.bin + val.bin) so the validation stream is exactly `n_val` known tokens."""
    (np.arange(n_train) % 250).astype(np.uint16).tofile(tmp_path / "train.bin")
    (np.arange(n_val) % 250).astype(np.uint16).tofile(tmp_path / "val.bin")
    return DataModule(DataConfig(source=str(tmp_path / "train.bin"), seq_len=seq_len, **kw))


# ------------------------------------------------------------------ synthetic tasks
def test_a_synthetic_source_is_the_named_task_at_the_run_length_with_its_options():
    cfg = DataConfig(source="synthetic:mqar", seq_len=24, synthetic={"vocab": 40, "pairs": 5})
    dm = DataModule(cfg, seed=3)
    want = make_task("mqar", {"vocab": 40, "pairs": 5}, 24)
    assert dm.vocab_size == 40 and isinstance(dm.tokenizer, ByteTokenizer)
    x, y = dm.global_train_batch(0, 0, 6, accum=1)
    assert x.shape == y.shape == (6, 24)
    # MQAR's layout: 5 key-value pairs first, keys below vocab/2, values at or above it
    assert bool((x[:, 0:10:2] < 20).all()) and bool((x[:, 1:10:2] >= 20).all()) and int(x.max()) < 40
    assert int((y != IGNORE_INDEX).sum(1).min()) == int((y != IGNORE_INDEX).sum(1).max()) == want.pairs
    tok = ByteTokenizer()
    assert DataModule(cfg, tokenizer=tok).tokenizer is tok
    with pytest.raises(ConfigError, match=r"synthetic:khop\|synthetic:mqar"):
        DataModule(DataConfig(source="synthetic:nope", seq_len=24))


def test_synthetic_batches_are_a_pure_function_of_seed_step_and_micro_and_distinct_across_them():
    dm = DataModule(DataConfig(source="synthetic:induction", seq_len=16), seed=5)
    again = DataModule(DataConfig(source="synthetic:induction", seq_len=16), seed=5)
    seen = set()
    for step in range(15):
        for micro in range(10):  # 150 positions: more than any modulus below 150 could seed apart
            x, y = dm.global_train_batch(step, micro, 4, accum=2)
            x2, _ = again.global_train_batch(step, micro, 4, accum=2)
            assert torch.equal(x, x2) and x.shape == (4, 16)
            seen.add(x.numpy().tobytes())
    assert len(seen) == 150
    x, y = dm.global_train_batch(0, 0, 3)  # without accum: the same generator rule
    assert x.shape == (3, 16)
    val = [b for b in dm.val_batches(3, 2)]
    assert len(val) == 3 and all(b[0].shape == (2, 16) for b in val)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(val, again.val_batches(3, 2)))  # fixed, not per call
    assert len({b[0].numpy().tobytes() for b in val}) == 3  # one generator through the batches, not reseeded
    assert not torch.equal(val[0][0], dm.global_train_batch(0, 0, 2, accum=1)[0])


def test_a_synthetic_run_has_no_corpus_position_epochs_or_overlap():
    dm = DataModule(DataConfig(source="synthetic:induction", seq_len=16))
    assert dm.state_dict(7, 4, 1)["train_tokens"] == 0
    assert dm.epochs(10_000) == 0.0
    assert dm.overlap_note() is None
    assert dm.load_state_dict({"step": 3, "samples": 12, "train_tokens": 999}) is None
    assert dm.summary() == "synthetic:induction (synthetic task, vocab 32)"


# ------------------------------------------------------------------ token files
def test_the_shortest_stream_accepted_is_seq_len_plus_two_and_the_refusal_names_the_split(tmp_path):
    _bin_module(tmp_path, 60, 10, seq_len=8)  # 10 = seq_len + 2: accepted
    with pytest.raises(ConfigError, match=r"gives only 9 validation tokens .*at least data.seq_len\+2 = 10"):
        _bin_module(tmp_path, 60, 9, seq_len=8)
    with pytest.raises(ConfigError, match=r"gives only 9 train tokens"):
        _bin_module(tmp_path, 9, 60, seq_len=8)


def test_validation_windows_are_evenly_spaced_from_the_first_token_to_the_last(tmp_path):
    L, n_val = 8, 120
    dm = _bin_module(tmp_path, 200, n_val, seq_len=L)
    batches = list(dm.val_batches(3, 5))
    assert len(batches) == 3 and all(x.shape == y.shape == (5, L) for x, y in batches)
    starts = [int(s) for x, _ in batches for s in x[:, 0]]
    last = n_val - L - 1  # the last window's target is the last validation token
    want = [int(np.floor(i * last / 14)) for i in range(15)]  # 15 windows spaced evenly over [0, last]
    assert starts == want
    for x, y in batches:  # each window is the stream itself, targets one token on
        for row_x, row_y in zip(x, y):
            s = int(row_x[0])
            assert row_x.tolist() == list(range(s, s + L)) and row_y.tolist() == list(range(s + 1, s + L + 1))
    tight = _bin_module(tmp_path, 200, L + 2, seq_len=L)  # one spare token: the windows start at 0 and at 1
    assert [int(x[0, 0]) for x, _ in tight.val_batches(2, 1)] == [0, 1]


def test_windows_drawn_without_accum_cover_every_start_and_stay_inside_the_corpus(tmp_path):
    L = 6
    dm = _bin_module(tmp_path, L + 3, 40, seq_len=L)  # starts 0, 1 and 2 fit
    starts = set()
    for step in range(40):
        x, y = dm.global_train_batch(step, 0, 2)
        for row_x, row_y in zip(x, y):
            s = int(row_x[0])
            assert row_x.tolist() == list(range(s, s + L)) and row_y.tolist() == list(range(s + 1, s + L + 1))
            starts.add(s)
    assert starts == {0, 1, 2}
    big = _bin_module(tmp_path, 240, 40, seq_len=L)
    draws = {big.global_train_batch(step, micro, 4)[0].numpy().tobytes() for step in range(15) for micro in range(10)}
    assert len(draws) == 150  # independent windows per (step, micro)


def test_a_bin_source_refuses_bpe_and_keeps_a_tokenizer_handed_in(tmp_path):
    p = _ramp_bin(tmp_path, 200)
    with pytest.raises(ConfigError, match=r"data.tokenizer='bpe' trains a tokenizer on text"):
        DataModule(DataConfig(source=str(p), seq_len=8, tokenizer="bpe"))
    tok = ByteTokenizer()
    assert DataModule(DataConfig(source=str(p), seq_len=8), tokenizer=tok).tokenizer is tok


def test_the_summary_of_a_bin_names_its_split_and_a_prepared_corpus_ends_at_its_counts(tmp_path):
    p = _ramp_bin(tmp_path, 200)
    s = DataModule(DataConfig(source=str(p), seq_len=8, val_fraction=0.1)).summary()
    assert s == (
        f"{p} (bin) | tokenizer byte (vocab {ByteTokenizer().vocab_size}) | train 180 tokens | "
        "validation 20 tokens | validation: the "
        "last 10% of the tokens (20; a bare .bin has no document boundaries, so the split is by position)"
    )
    (tmp_path / "c.txt").write_text("".join(f"document {i} with a few words in it\n\n" for i in range(40)))
    from nexus.data.prepare import prepare
    from nexus.data.sources import resolve_source

    cfg = DataConfig(source=str(tmp_path / "c.txt"), seq_len=8)
    prepare(resolve_source(cfg.source), cfg, ByteTokenizer(), tmp_path / "prep", num_proc=1, progress=False)
    dm = DataModule(DataConfig(source=str(tmp_path / "prep"), tokenizer=str(tmp_path / "prep"), seq_len=8))
    assert dm.summary().endswith(f"| validation {len(dm.val):,} tokens")
    assert " | " not in dm.summary().split("validation ")[-1]


# ------------------------------------------------------------------ position
def test_a_stored_position_in_another_corpus_is_said_and_the_same_corpus_is_quiet(tmp_path):
    dm = DataModule(DataConfig(source=str(_ramp_bin(tmp_path, 200)), seq_len=8, val_fraction=0.1))
    st = dm.state_dict(5, 4, 2)
    assert st == {"step": 5, "samples": 40, "train_tokens": 180}
    assert dm.load_state_dict(st) is None
    assert dm.load_state_dict({"step": 5, "samples": 40}) is None  # an older checkpoint without the count
    note = dm.load_state_dict({"step": 5, "samples": 1234, "train_tokens": 5000})
    assert note == (
        "data: the checkpoint's position was in a corpus of 5,000 training tokens, this one has 180; "
        "reading continues at sample 1,234"
    )
    assert dm.sample_index(5, 0, 4, 2) == 1234 and dm.sample_index(6, 1, 4, 2) == 1234 + 3 * 4
    assert dm.epochs(360) == 2.0 and dm.epochs(45) == 0.25


# ------------------------------------------------------------------ environment
def test_the_cache_lives_in_NEXUS_CACHE_else_in_the_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache"
    monkeypatch.delenv("NEXUS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == Path(os.path.expanduser("~/.cache/nexus")) == tmp_path / "home/.cache/nexus"


def test_the_tokenizing_workers_are_the_usable_cores_between_one_and_eight(monkeypatch):
    for cores, want in ((set(), 1), ({0}, 1), ({0, 1, 2}, 3), (set(range(8)), 8), (set(range(20)), 8)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, c=cores: c, raising=False)
        assert default_num_proc() == want
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS: no affinity, the machine's count
    for count, want in ((None, 1), (5, 5), (12, 8)):
        monkeypatch.setattr(os, "cpu_count", lambda c=count: c)
        assert default_num_proc() == want


def test_only_rank_zero_speaks(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    loader._say("hello")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    loader._say("hello")
    assert capsys.readouterr().err == "nexus data: hello\n"


def test_an_unusable_cache_is_refused_naming_where_its_path_came_from(tmp_path, monkeypatch):
    (tmp_path / "c.txt").write_text("".join(f"document {i} with a few words in it\n\n" for i in range(40)))
    (tmp_path / "afile").write_text("x")
    src = str(tmp_path / "c.txt")
    with pytest.raises(ConfigError, match=r"^data.cache_dir="):
        DataModule(DataConfig(source=src, seq_len=8, cache_dir=str(tmp_path / "afile" / "c")))
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "afile" / "c"))
    with pytest.raises(ConfigError, match=r"^NEXUS_CACHE="):
        DataModule(DataConfig(source=src, seq_len=8))
    monkeypatch.delenv("NEXUS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "afile"))
    with pytest.raises(ConfigError, match=r"^the cache directory="):
        DataModule(DataConfig(source=src, seq_len=8))


def test_the_cache_is_built_where_NEXUS_CACHE_points_with_the_run_settings(tmp_path, monkeypatch):
    (tmp_path / "c.txt").write_text("".join(f"document {i} with a few words in it\n\n" for i in range(40)))
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "env-cache"))
    calls = []
    real = loader.prepare

    def spy(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(loader, "prepare", spy)
    monkeypatch.setattr(loader, "default_num_proc", lambda: 3)
    dm = DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=8), quiet=True)
    DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=8, num_proc=2))
    built = [d for d in (tmp_path / "env-cache").iterdir() if (d / "manifest.json").is_file()]
    assert len(built) == 1 and len(dm.train) > 0
    from nexus.data.prepare import SHARD_BYTES, Progress

    assert [(c["num_proc"], c["progress"]) for c in calls] == [(3, False), (2, True)]
    assert all(
        c["label"] == "data" and c["shard_bytes"] == SHARD_BYTES and c["quiet_below_s"] == Progress.EVERY_S
        for c in calls
    )


# ------------------------------------------------------------------ after the first mutation run (issue 42)
def test_a_module_built_without_a_seed_draws_as_a_default_run(tmp_path):
    from nexus.config import RunConfig

    cfg = DataConfig(source=str(_ramp_bin(tmp_path, 240)), seq_len=8)
    x, _ = DataModule(cfg).global_train_batch(0, 0, 6, accum=1)
    assert torch.equal(x, DataModule(cfg, seed=RunConfig().train.seed).global_train_batch(0, 0, 6, accum=1)[0])


def test_a_synthetic_task_name_is_everything_after_the_first_colon():
    with pytest.raises(ConfigError, match=r"^data.source='synthetic:mqar:extra' \(valid: "):
        DataModule(DataConfig(source="synthetic:mqar:extra", seq_len=24))


def _prepared(tmp_path) -> Path:
    from nexus.data.prepare import prepare
    from nexus.data.sources import resolve_source

    (tmp_path / "c.txt").write_text("".join(f"document {i} with a few words in it\n\n" for i in range(40)))
    cfg = DataConfig(source=str(tmp_path / "c.txt"), seq_len=8)
    prepare(resolve_source(cfg.source), cfg, ByteTokenizer(), tmp_path / "prep", num_proc=1, progress=False)
    return tmp_path / "prep"


def test_refusals_of_a_prepared_corpus_name_the_directory(tmp_path):
    prep = _prepared(tmp_path)
    with pytest.raises(ConfigError) as e:  # another tokenizer than the corpus's: the advice names the corpus
        DataModule(DataConfig(source=str(prep), tokenizer="byte", chat=True, seq_len=8))
    assert str(e.value).startswith(f"data.source={str(prep)!r} was prepared with tokenizer byte")
    assert f"--data.tokenizer {prep}, the tokenizer stored with the corpus" in str(e.value)
    (prep / "manifest.json").write_text("{}")
    with pytest.raises(ConfigError, match=rf"^data.source={str(prep)!r}: manifest.json is not"):
        DataModule(DataConfig(source=str(prep), tokenizer="byte", seq_len=8))


def test_refusals_of_a_bin_name_the_file_given_and_a_named_validation_file(tmp_path):
    np.array([1, 2, 300, 4] * 50, dtype=np.uint16).tofile(tmp_path / "big.bin")
    with pytest.raises(ConfigError, match=rf"^data.source={str(tmp_path / 'big.bin')!r}: big.bin holds id 300"):
        DataModule(DataConfig(source=str(tmp_path / "big.bin"), seq_len=8))
    (np.arange(100) % 250).astype(np.uint16).tofile(tmp_path / "train.bin")
    np.array([1, 2, 300, 4] * 50, dtype=np.uint16).tofile(tmp_path / "val.bin")
    with pytest.raises(ConfigError, match=rf"^data.source={str(tmp_path / 'val.bin')!r}: val.bin holds id 300"):
        DataModule(DataConfig(source=str(tmp_path / "train.bin"), seq_len=8))


def test_the_overlap_note_is_none_for_unseen_validation_and_a_line_for_copied(tmp_path):
    (np.arange(240) % 250).astype(np.uint16).tofile(tmp_path / "train.bin")
    np.random.default_rng(0).integers(0, 250, 240).astype(np.uint16).tofile(tmp_path / "val.bin")
    assert DataModule(DataConfig(source=str(tmp_path / "train.bin"), seq_len=8)).overlap_note() is None
    (np.arange(240) % 250).astype(np.uint16).tofile(tmp_path / "val.bin")  # validation = the training tokens
    note = DataModule(DataConfig(source=str(tmp_path / "train.bin"), seq_len=8)).overlap_note()
    assert isinstance(note, str) and note
    (np.arange(10) % 250).astype(np.uint16).tofile(tmp_path / "val.bin")  # shorter than overlap.py's window
    assert DataModule(DataConfig(source=str(tmp_path / "train.bin"), seq_len=8)).overlap_note() is None


def test_a_new_cache_names_every_bad_file_at_once(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "good.txt").write_text("".join(f"document {i} with words\n\n" for i in range(40)))
    (tmp_path / "src" / "a_bad.txt").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3")
    (tmp_path / "src" / "b_bad.txt").write_bytes(b"\x80\x81 also not utf-8")
    with pytest.raises(ConfigError) as e:
        DataModule(DataConfig(source=str(tmp_path / "src"), seq_len=8, cache_dir=str(tmp_path / "cache")))
    assert str(e.value).startswith(f"data.source={str(tmp_path / 'src')!r} holds ")
    assert "a_bad.txt" in str(e.value) and "b_bad.txt" in str(e.value)
