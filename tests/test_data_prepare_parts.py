"""data/prepare.py's parts as plain functions, in-process (no CLI, no worker pool; about a second in all):
how a settings mismatch is named, how documents are grouped into shards, how texts become ids with EOS,
the progress lines, the closing summary and the refusal of a changed shard (issue 42 item 6: prepare.py's
mutation survivors). Expected values are computed from the inputs the test builds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nexus import lifeline
from nexus.config import ConfigError, DataConfig
from nexus.data import prepare as P
from nexus.data.sources import resolve_source
from nexus.data.tokenizer import ByteTokenizer


# ----------------------------------------------------------------------------- a settings mismatch, named
def test_every_setting_that_differs_is_named_as_the_prepare_flag_old_value_first_in_a_fixed_order():
    tok_a = {"kind": "byte", "vocab_size": 259, "sha256": "aa"}
    tok_b = {"kind": "bpe", "vocab_size": 4096, "sha256": "bb"}
    old = {
        "source": "a",
        "tokenizer": tok_a,
        "val_fraction": 0.05,
        "split_seed": 1,
        "split_block": 1000,
        "text_field": "text",
        "chat": False,
        "max_documents": None,
        "shard_bytes": 8 << 20,
        "version": 1,
        "zz": 1,
    }
    new = {
        "source": "b",
        "tokenizer": tok_b,
        "val_fraction": 0.1,
        "split_seed": 2,
        "split_block": 500,
        "text_field": "body",
        "chat": True,
        "max_documents": 7,
        "shard_bytes": 3 << 19,
        "version": 2,
        "zz": 2,
        "document_per_file": True,
    }
    unknown = ["k5", "k1", "k4", "k0", "k3", "k2"]  # keys of another release: by name after the known ones
    old.update({k: 1 for k in unknown})
    new.update({k: 2 for k in unknown})
    assert P.differences(old, new).split("; ") == [
        "--shard-mb 8 -> 1.5",
        "--val-fraction 0.05 -> 0.1",
        "--split-seed 1 -> 2",
        "--text-field text -> body",
        "--chat off -> on",
        "--max-documents unset -> 7",
        "--document-per-file off -> on",
        "--tokenizer byte (vocab 259, sha256 aa) -> bpe (vocab 4096, sha256 bb)",
        "the split block size 1000 -> 500",
        "the format version 1 -> 2",
        *[f"{k} 1 -> 2" for k in sorted(unknown)],
        "SOURCE is not the one it was prepared from (file paths, sizes or modification times differ)",
        "zz 1 -> 2",
    ]
    assert P.differences(old, dict(old)) == ""
    assert P.differences({"document_per_file": True}, {}) == "--document-per-file on -> off"  # absent: off


@pytest.mark.parametrize("value, want", [(None, "unset"), (True, "on"), (False, "off"), (0, "<0>"), ("", "<>")])
def test_a_shown_value_is_unset_on_off_or_the_settings_own_form(value, want):
    assert P._shown(lambda v: f"<{v}>", value) == want


# ----------------------------------------------------------------------------- shards
def test_documents_are_grouped_in_stream_order_into_shards_of_at_least_shard_bytes_characters():
    docs = [("a" * 3, False), ("b" * 4, True), ("c" * 2, False), ("d" * 5, False), ("e", True)]
    assert list(P._shard_tasks(iter(docs), DataConfig(), 7)) == [docs[:2], docs[2:4], docs[4:]]
    assert list(P._shard_tasks(iter(docs), DataConfig(), 6)) == [docs[:2], docs[2:4], docs[4:]]
    assert list(P._shard_tasks(iter(docs), DataConfig(), 8)) == [docs[:3], docs[3:]]
    assert list(P._shard_tasks(iter(docs), DataConfig(), 100)) == [docs]
    assert list(P._shard_tasks(iter([]), DataConfig(), 7)) == []
    chat = [({"messages": [{"content": "x" * 6}]}, False), ({"messages": [{"content": "y"}]}, True)]
    assert list(P._shard_tasks(iter(chat), DataConfig(), 6)) == [chat[:1], chat[1:]]  # sized by their text


def test_a_single_document_is_cut_into_its_training_head_and_validation_tail():
    text = "0123456789" * 10
    cfg = DataConfig(val_fraction=0.25)
    cut = int(len(text) * (1 - 0.25))
    assert list(P._shard_tasks(iter([(text, None), ("never read", False)]), cfg, 7)) == [
        [(text[:cut], False), (text[cut:], True)]
    ]
    conv = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "there"}]}
    joined = "hi\nthere"  # the messages' text, cut like any single document
    cut = int(len(joined) * (1 - 0.5))
    assert list(P._shard_tasks(iter([(conv, None)]), DataConfig(val_fraction=0.5), 7)) == [
        [(joined[:cut], False), (joined[cut:], True)]
    ]
    with pytest.raises(ConfigError, match="holds one conversation"):
        list(P._shard_tasks(iter([(conv, None)]), DataConfig(chat=True, source="one.jsonl"), 7))


def test_a_documents_text_is_itself_its_messages_joined_or_its_string_form():
    assert P.doc_text("abc") == "abc"
    assert P.doc_text({"messages": [{"content": "a"}, {"role": "x"}, {"content": 3}]}) == "a\n\n3"
    assert P.doc_text({"text": "t"}) == str({"text": "t"}) and P.doc_text(12) == "12"


class ListTokenizer:
    """A tokenizer with only encode_batch (no flat encoder): one id per character, EOS 999."""

    eos_id = 999

    def encode_batch(self, texts):
        return [[ord(c) for c in t] for t in texts]


@pytest.mark.parametrize("tok", [ByteTokenizer(), ListTokenizer()], ids=["flat", "lists"])
def test_each_text_is_encoded_followed_by_eos(tok):
    texts = ["ab", "", "héllo", "z"]
    want = [i for t in texts for i in (tok.encode_batch([t])[0] + [tok.eos_id])]
    got = P.encode_with_eos(tok, texts)
    assert got.dtype == np.int64 and got.tolist() == want


def test_a_shard_is_written_as_its_split_files_with_their_counts_and_hashes(tmp_path):
    import hashlib

    tok = ByteTokenizer()
    docs = [("ab", False), ("cde", True), ("f", False)]
    res = P.encode_shard(tok, 3, docs, tmp_path, "uint16", False)
    train = np.array(tok.encode("ab") + [tok.eos_id] + tok.encode("f") + [tok.eos_id], dtype=np.uint16)
    assert res["chars"] == 6
    assert res["train"] == {
        "file": "train-00003.bin",
        "mask": None,
        "tokens": len(train),
        "documents": 2,
        "bytes": 3,
        "max_id": int(train.max()),
        "sha256": hashlib.sha256(train.tobytes()).hexdigest(),
    }
    assert (tmp_path / "train-00003.bin").read_bytes() == train.tobytes()
    assert res["val"]["file"] == "val-00003.bin" and res["val"]["tokens"] == 4 and res["val"]["documents"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-00003.bin", "val-00003.bin"]  # no temporaries left
    only_train = P.encode_shard(tok, 0, docs[:1], tmp_path, "uint16", False)
    assert only_train["val"] is None and not (tmp_path / "val-00000.bin").exists()


def test_a_shard_over_several_encode_batches_holds_every_document_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "ENCODE_BATCH", 2)
    tok = ByteTokenizer()
    docs = [(f"d{i}", False) for i in range(5)]
    res = P.encode_shard(tok, 0, docs, tmp_path, "uint32", False)
    want = [i for d, _ in docs for i in tok.encode(d) + [tok.eos_id]]
    assert np.fromfile(tmp_path / "train-00000.bin", dtype=np.uint32).tolist() == want
    assert res["train"]["tokens"] == len(want) and res["train"]["bytes"] == 10 and res["train"]["documents"] == 5


# ----------------------------------------------------------------------------- what prepare says
def test_progress_prints_tokens_rate_and_eta_every_interval_off_a_terminal(monkeypatch, capsys):
    clock = iter([0.0, 2.0, 2.5, 4.0, 6.0])
    monkeypatch.setattr(P.time, "perf_counter", lambda: next(clock))
    meter = P.Progress(100, "prepare", True)
    meter.EVERY_S = 2.0
    meter.update(50, 1000)  # t = 2: a line (2 s since the start)
    meter.update(10, 500)  # t = 2.5: none (0.5 s since the last)
    meter.update(80, 500)  # t = 4: a line; more characters than the input's size read
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "nexus prepare: 1,000 tokens | 500 tokens/s | 50% of input, ETA 2 s",
        "nexus prepare: 2,000 tokens | 500 tokens/s | 100% of input, ETA 0 s",
    ]
    stream = P.Progress(None, "data", True)  # t = 6 at its start
    stream.EVERY_S = 0.0
    monkeypatch.setattr(P.time, "perf_counter", lambda: 8.0)
    stream.update(10, 300)
    assert capsys.readouterr().err == "nexus data: 300 tokens | 150 tokens/s | ETA unknown (stream)\n"
    quiet = P.Progress(100, "prepare", False)
    quiet.EVERY_S = 0.0
    quiet.update(10, 300)
    quiet.say("anything")
    assert capsys.readouterr().err == ""
    stream.say("nexus data: as it is")
    assert capsys.readouterr().err == "nexus data: as it is\n"


def test_the_summary_is_printed_only_when_preparing_took_at_least_quiet_below_s(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("\n\n".join(f"document {i} " * 5 for i in range(40)))
    src = resolve_source(str(tmp_path / "c.txt"))
    m = P.prepare(src, DataConfig(), ByteTokenizer(), tmp_path / "a", shard_bytes=500, quiet_below_s=1e9)
    assert capsys.readouterr().err == ""
    m = P.prepare(src, DataConfig(), ByteTokenizer(), tmp_path / "b", shard_bytes=500, label="data")
    err = capsys.readouterr().err.strip()
    n_shards = len({e["file"].split("-")[1] for s in ("train", "val") for e in m["shards"][s]})
    assert err.startswith(
        f"nexus data: {m['tokens']['train']:,} train + {m['tokens']['val']:,} validation tokens from "
        f"{m['documents']['train'] + m['documents']['val']:,} documents in {n_shards} shard(s), "
    )
    assert err.endswith(f"tokens/s) -> {tmp_path / 'b'}") and "\n" not in err
    P.prepare(src, DataConfig(), ByteTokenizer(), tmp_path / "c", shard_bytes=500, progress=False)
    assert capsys.readouterr().err == ""


def test_a_changed_shard_is_refused_naming_the_first_and_counting_the_rest_and_missing_ones_pass(tmp_path):
    P._refuse_changed(tmp_path, [("train-00000.bin", "missing"), ("val-00001.bin", "missing")])
    with pytest.raises(ConfigError) as e:
        P._refuse_changed(tmp_path, [("a.bin", "missing"), ("b.bin", "does not match"), ("c.bin", "is short")])
    assert str(e.value).startswith(f"--out={str(tmp_path)!r}: shard b.bin and 1 more does not match (valid: ")
    with pytest.raises(ConfigError) as e:
        P._refuse_changed(tmp_path, [("c.bin", "is short"), ("a.bin", "missing")])
    assert str(e.value).startswith(f"--out={str(tmp_path)!r}: shard c.bin is short (valid: ")


def test_the_state_a_manifest_describes_drops_every_shard_index_with_a_named_file():
    def e(split, i, mask=False):
        return {"file": f"{split}-{i:05d}.bin", "mask": f"{split}-{i:05d}.mask" if mask else None}

    m = {"shards": {"train": [e("train", 0), e("train", 1, True), e("train", 2)], "val": [e("val", 0), e("val", 2)]}}
    done = P._done_from_manifest(m, {"val-00002.bin", "train-00001.mask"})
    assert done == {0: {"chars": 0, "train": e("train", 0), "val": e("val", 0)}}
    assert sorted(P._done_from_manifest(m, set())) == [0, 1, 2]
    assert P._done_from_manifest(m, set())[1] == {"chars": 0, "train": e("train", 1, True), "val": None}


def test_a_corpus_with_named_validation_files_records_its_split_by_file(tmp_path):
    (tmp_path / "train.txt").write_text("some training text\n\nmore of it")
    (tmp_path / "val.txt").write_text("held out")
    src = resolve_source(str(tmp_path))  # a folder whose val.txt is the validation split
    m = P.prepare(src, DataConfig(), ByteTokenizer(), tmp_path / "p", progress=False)
    assert m["split"] == {"unit": "file", "val_files": [str(tmp_path / "val.txt")]}
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["split"] == m["split"]
    assert m["documents"]["val"] == 1


# ----------------------------------------------------------------------------- a worker's start (in-process here)
class Exited(Exception):
    pass


def _exit_raises(monkeypatch):
    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(P.os, "_exit", fake_exit)


def _thread_runs_inline(monkeypatch, started):
    class Inline:
        def __init__(self, target, name, daemon):
            started.append({"name": name, "daemon": daemon})
            self.target = target

        def start(self):
            self.target()

    monkeypatch.setattr(lifeline.threading, "Thread", Inline)


def test_a_worker_ends_the_moment_its_prepare_ends_watched_by_a_daemon_thread(monkeypatch):
    import subprocess
    import sys

    started = []
    _exit_raises(monkeypatch)
    _thread_runs_inline(monkeypatch, started)
    monkeypatch.setattr(P.time, "sleep", lambda s: pytest.fail("polled although a pidfd tells the exit at once"))
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        with pytest.raises(Exited) as e:
            P._die_with(p.pid)  # returns (here: raises) only once p has exited
        assert e.value.args == (1,) and p.poll() == 0  # it had ended: its exit status is there to collect
    finally:
        p.wait()
    assert started == [{"name": "nexus-die-with-parent", "daemon": True}]  # never keeps a worker alive itself
    with pytest.raises(Exited) as e:
        P._die_with(p.pid)  # already gone (reaped)
    assert e.value.args == (1,)


def test_without_pidfds_a_worker_polls_its_prepare_and_ends_once_it_is_gone(monkeypatch):
    probes, sleeps = [], []
    _exit_raises(monkeypatch)
    _thread_runs_inline(monkeypatch, [])

    def no_pidfd(pid):
        raise OSError(38, "Function not implemented")

    def kill(pid, sig):
        probes.append((pid, sig))
        if len(probes) == 1:
            raise PermissionError  # alive, another user's
        if len(probes) == 3:
            raise ProcessLookupError

    monkeypatch.setattr(P.os, "pidfd_open", no_pidfd)
    monkeypatch.setattr(P.os, "kill", kill)
    monkeypatch.setattr(P.time, "sleep", sleeps.append)
    with pytest.raises(Exited) as e:
        P._die_with(4321)
    assert e.value.args == (1,) and probes == [(4321, 0)] * 3 and sleeps == [1.0] * 3
    monkeypatch.delattr(P.os, "pidfd_open")  # an older Python or kernel
    probes.clear()
    with pytest.raises(Exited):
        P._die_with(4321)
    assert len(probes) == 3


def test_a_worker_takes_its_tokenizer_one_thread_and_its_parent_and_encodes_like_prepare(tmp_path, monkeypatch):
    import pickle

    watched = []
    monkeypatch.setattr(P, "_die_with", watched.append)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setattr(P, "_WORKER_TOK", None)
    P._init_worker(pickle.dumps(ByteTokenizer()), 4321)
    assert watched == [4321] and P.os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert isinstance(P._WORKER_TOK, ByteTokenizer)
    docs = [("abc", False), ("de", True)]
    (tmp_path / "w").mkdir()
    (tmp_path / "p").mkdir()
    assert P._encode_in_worker(2, docs, tmp_path / "w", "uint16", False) == P.encode_shard(
        ByteTokenizer(), 2, docs, tmp_path / "p", "uint16", False
    )
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["train-00002.bin", "val-00002.bin"]


def test_one_process_encodes_in_place_and_more_start_a_forkserver_pool_once_a_second_shard_exists(tmp_path):
    one = P._Runner(1, ByteTokenizer(), tmp_path, "uint16", False)
    assert [i for i, _ in one.submit(0, [("a", False)], 1)] == [0] and one.pool is None
    r = P._Runner(2, ByteTokenizer(), tmp_path, "uint16", False)
    try:
        assert r.submit(1, [("b", False)], 1) == [] and r.pool is None  # one shard so far: no pool for it
        done = r.submit(2, [("c", False)], 1)
        # forked from a process that runs threads (the tokenizers', torch's) a worker could deadlock: a forkserver
        assert r.pool is not None and r.pool._mp_context.get_start_method() == "forkserver"
        done += r.finish()
    finally:
        r.close()
    assert r.pool is None and [i for i, _ in done] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-00000.bin", "train-00001.bin", "train-00002.bin"]
    alone = P._Runner(2, ByteTokenizer(), tmp_path, "uint16", False)
    assert alone.submit(3, [("d", False)], 1) == [] and [i for i, _ in alone.finish()] == [3] and alone.pool is None
