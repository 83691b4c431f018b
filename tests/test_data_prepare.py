"""`nexus data prepare`: sharded token files + manifest equal to an in-memory reference, the same with
worker processes, resumable without redoing finished shards, atomic, memory-mapped when trained on."""

import json

import numpy as np
import pytest

from nexus.cli import main
from nexus.config import ConfigError, DataConfig
from nexus.data import prepare as P
from nexus.data.loader import DataModule
from nexus.data.shards import ShardedTokens
from nexus.data.sources import resolve_source
from nexus.data.tokenizer import ByteTokenizer


def corpus(tmp_path, n=300):
    docs = [f"doc {i}: " + "the quick brown fox ünïcode ✓ " * (1 + i % 7) + f"end {i}" for i in range(n)]
    (tmp_path / "c.txt").write_text("\n\n".join(docs))
    return docs


def reference(docs, tok, val_fraction, seed, block=1000):
    """Written from the split rule (per block of 1000 documents a seeded permutation holds out
    round(n * f), at least one in the first block; block 0 seeded by split_seed, block b by (seed, b)),
    every document encoded alone and followed by EOS."""
    out = {"train": [], "val": []}
    for b in range(0, len(docs), block):
        chunk = docs[b : b + block]
        k = int(round(len(chunk) * val_fraction))
        k = max(1, k) if b == 0 else k
        rng = np.random.default_rng(seed if b == 0 else [seed, b // block])
        val = set(rng.permutation(len(chunk))[:k].tolist())
        for i, d in enumerate(chunk):
            out["val" if i in val else "train"] += tok.encode(d) + [tok.eos_id]
    return out


def read_split(d, split):
    m = json.loads((d / "manifest.json").read_text())
    return np.concatenate([np.fromfile(d / e["file"], dtype=m["dtype"]) for e in m["shards"][split]]).tolist()


def test_prepare_cli_writes_shards_and_manifest_equal_to_the_reference(tmp_path, capsys):
    docs = corpus(tmp_path)
    out = tmp_path / "prep"
    assert (
        main(
            [
                "data",
                "prepare",
                str(tmp_path / "c.txt"),
                "--tokenizer",
                "byte",
                "--out",
                str(out),
                "--num-proc",
                "1",
                "--shard-mb",
                "1",
                "--val-fraction",
                "0.1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "tokens/s" in err and str(out) in err
    ref = reference(docs, ByteTokenizer(), 0.1, 1234)
    assert read_split(out, "train") == ref["train"] and read_split(out, "val") == ref["val"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokens"] == {"train": len(ref["train"]), "val": len(ref["val"])}
    assert m["documents"] == {"train": 270, "val": 30}
    assert m["bytes"]["train"] + m["bytes"]["val"] == sum(len(d.encode()) for d in docs)
    assert m["tokenizer"]["kind"] == "byte" and m["dtype"] == "uint16" and m["source"] == str(tmp_path / "c.txt")
    assert (out / "tokenizer.txt").is_file()
    again = main(
        [
            "data",
            "prepare",
            str(tmp_path / "c.txt"),
            "--tokenizer",
            "byte",
            "--out",
            str(out),
            "--num-proc",
            "1",
            "--shard-mb",
            "1",
            "--val-fraction",
            "0.1",
            "--quiet",
        ]
    )
    assert again == 0  # the same command on a finished directory reuses it
    assert (
        main(
            [
                "data",
                "prepare",
                str(tmp_path / "c.txt"),
                "--tokenizer",
                "byte",
                "--out",
                str(out),
                "--val-fraction",
                "0.2",
            ]
        )
        == 2
    )  # other settings: refused, not mixed
    err = capsys.readouterr().err  # each differing setting named, old value first
    assert "prepared with other settings: --shard-mb 1 -> 8; --val-fraction 0.1 -> 0.2" in err, err


def test_worker_processes_give_the_same_shards(tmp_path):
    docs = corpus(tmp_path, 400)
    src = resolve_source(str(tmp_path / "c.txt"))
    cfg = DataConfig(source=str(tmp_path / "c.txt"))
    one = P.prepare(src, cfg, ByteTokenizer(), tmp_path / "one", num_proc=1, shard_bytes=3000, progress=False)
    two = P.prepare(src, cfg, ByteTokenizer(), tmp_path / "two", num_proc=2, shard_bytes=3000, progress=False)
    assert len(one["shards"]["train"]) > 4  # several shards, so the pool really ran
    assert one["shards"] == two["shards"]
    ref = reference(docs, ByteTokenizer(), 0.05, 1234)
    for d in ("one", "two"):
        assert read_split(tmp_path / d, "train") == ref["train"] and read_split(tmp_path / d, "val") == ref["val"]


def test_interrupted_prepare_resumes_without_redoing_finished_shards(tmp_path, monkeypatch):
    corpus(tmp_path, 300)
    src = resolve_source(str(tmp_path / "c.txt"))
    cfg = DataConfig(source=str(tmp_path / "c.txt"))
    full = P.prepare(src, cfg, ByteTokenizer(), tmp_path / "full", num_proc=1, shard_bytes=2000, progress=False)
    n_shards = len(full["shards"]["train"])
    real, calls = P.encode_shard, []

    def dies_at_4(tok, idx, *a):
        if idx == 4:
            raise KeyboardInterrupt
        calls.append(idx)
        return real(tok, idx, *a)

    monkeypatch.setattr(P, "encode_shard", dies_at_4)
    with pytest.raises(KeyboardInterrupt):
        P.prepare(src, cfg, ByteTokenizer(), tmp_path / "cut", num_proc=1, shard_bytes=2000, progress=False)
    assert calls == [0, 1, 2, 3] and not (tmp_path / "cut" / "manifest.json").exists()
    calls.clear()
    monkeypatch.setattr(P, "encode_shard", lambda tok, idx, *a: calls.append(idx) or real(tok, idx, *a))
    resumed = P.prepare(src, cfg, ByteTokenizer(), tmp_path / "cut", num_proc=1, shard_bytes=2000, progress=False)
    assert calls == list(range(4, n_shards))
    assert resumed["shards"] == full["shards"]
    for split in ("train", "val"):
        assert read_split(tmp_path / "cut", split) == read_split(tmp_path / "full", split)
    assert not list((tmp_path / "cut").glob(".*tmp*")) and not (tmp_path / "cut" / P.STATE).exists()


def test_training_on_a_prepared_multi_shard_directory_maps_it(tmp_path):
    import tracemalloc

    docs = corpus(tmp_path, 300)
    out = tmp_path / "prep"
    P.prepare(
        resolve_source(str(tmp_path / "c.txt")),
        DataConfig(),
        ByteTokenizer(),
        out,
        num_proc=1,
        shard_bytes=2000,
        progress=False,
    )
    tracemalloc.start()
    dm = DataModule(DataConfig(source=str(out), seq_len=32))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(dm.train.tokens, ShardedTokens) and all(isinstance(a, np.memmap) for a in dm.train.tokens.arrays)
    assert peak < 200_000  # the shards are mapped, not read (the corpus is ~60 KB of tokens: its size would show)
    ref = reference(docs, ByteTokenizer(), 0.05, 1234)
    assert np.asarray(dm.train.tokens).tolist() == ref["train"]
    # a window across a shard boundary reads both shards
    b = int(dm.train.tokens.starts[1])
    x, y = dm.train.window(b - 5, 10)
    assert x.tolist() == ref["train"][b - 5 : b + 5] and y.tolist() == ref["train"][b - 4 : b + 6]


# ----------------------------------------------------------------------------- the sampler
def test_every_window_once_per_epoch_and_ranks_read_disjoint_windows(tmp_path):
    from nexus.data.sampler import WindowSampler

    s = WindowSampler(n_tokens=1001, seq_len=10, seed=3)
    assert s.n_windows == 100
    first = s.starts(0, 100)
    assert sorted(first.tolist()) == [10 * k + int(first.min()) % 10 for k in range(100)]  # each window once
    second = s.starts(100, 100)
    assert sorted(((second - second.min()) // 10).tolist()) == list(range(100)) and not np.array_equal(first, second)
    assert np.array_equal(s.starts(37, 80), np.concatenate([first[37:], second[:17]]))  # across the epoch edge
    corpus(tmp_path, 300)
    dm = DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=16))
    # 2 ranks x batch 4, accumulation 3: over a step every rank reads its own windows, none shared
    seen = {0: [], 1: []}
    for m in range(3):
        for r in (0, 1):
            x, _ = dm.train_batch(5, m, 4, rank=r, world=2, accum=3)
            seen[r] += [tuple(row.tolist()) for row in x]
    starts = dm.sampler.starts(5 * 3 * 8, 24)  # step 5 begins after 5 steps x 3 micro-batches x 8 sequences
    assert len(set(starts.tolist())) == 24  # 24 distinct windows (their text may repeat: the corpus does)
    want = [tuple(dm.train.window(int(st), 16)[0].tolist()) for st in starts]
    assert seen[0] + seen[1] == [w for m in range(3) for w in want[8 * m : 8 * m + 4]] + [
        w for m in range(3) for w in want[8 * m + 4 : 8 * m + 8]
    ]


def test_leftover_shard_files_of_dead_processes_go_live_ones_stay(tmp_path):
    """torchrun ranks may fill one cache directory at once: a rank must not delete another's shard in progress."""
    import os

    corpus(tmp_path, 50)
    out = tmp_path / "prep"
    out.mkdir()
    dead = out / ".train-00007.bin.tmp-4194999"  # above the default pid_max: no such process
    live = out / f".train-00008.bin.tmp-{os.getppid()}"
    state_tmp = out / f".prepare-state.json.tmp-{os.getppid()}-123456789"  # another writer's atomic write
    for p in (dead, live, state_tmp):
        p.write_bytes(b"x")
    P.prepare(resolve_source(str(tmp_path / "c.txt")), DataConfig(), ByteTokenizer(), out, num_proc=1, progress=False)
    assert not dead.exists() and live.exists() and state_tmp.exists()


def _prepare_into(src, out, q):
    try:
        m = P.prepare(
            resolve_source(src), DataConfig(), ByteTokenizer(), out, num_proc=1, shard_bytes=1500, progress=False
        )
        q.put(json.dumps(m["shards"]))
    except BaseException as e:  # report, so the test shows what broke
        q.put(f"error: {type(e).__name__}: {e}")


def test_two_processes_preparing_one_directory_at_once_agree(tmp_path):
    """What two torchrun ranks do with a cold cache: both fill the same directory, both succeed."""
    import multiprocessing

    corpus(tmp_path, 400)
    ctx = multiprocessing.get_context("forkserver")
    q = ctx.Queue()
    procs = [ctx.Process(target=_prepare_into, args=(str(tmp_path / "c.txt"), tmp_path / "prep", q)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [q.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert not any(g.startswith("error") for g in got), got
    assert got[0] == got[1]
    assert (
        read_split(tmp_path / "prep", "train") == reference(corpus(tmp_path, 400), ByteTokenizer(), 0.05, 1234)["train"]
    )


def test_prepared_output_records_every_file_it_wrote(tmp_path):
    """`nexus data prepare --out` owns exactly what it wrote: each shard, the tokenizer and the manifest are
    in its ownership manifest with their sizes, so --overwrite can tell them from a user's file."""
    from nexus.outdir.manifest import ownership_problems, read_manifest

    (tmp_path / "c.txt").write_text("\n\n".join(f"document {i} " + "text " * 40 for i in range(60)))
    out = tmp_path / "prep"
    assert main(["data", "prepare", str(tmp_path / "c.txt"), "--tokenizer", "byte", "--out", str(out), "--quiet"]) == 0
    on_disk = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file() and p.name != ".nexus-run"}
    assert sum(n.endswith(".bin") for n in on_disk) >= 2  # train and validation shards, each recorded
    assert {k: v["size"] for k, v in read_manifest(out)["files"].items()} == on_disk
    assert ownership_problems(out) == []
    (out / "NOTES.md").write_text("mine")
    assert [name for name, _ in ownership_problems(out)] == ["NOTES.md"]


# ----------------------------------------------------------------------------- lock, shard hashes, workers
def _prepare_cli(tmp_path, out, *more):
    return main(
        [
            "data",
            "prepare",
            str(tmp_path / "c.txt"),
            "--tokenizer",
            "byte",
            "--out",
            str(out),
            "--num-proc",
            "1",
            "--shard-mb",
            "1",
            "--quiet",
            *more,
        ]
    )


def test_a_second_prepare_into_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    """Two prepares at once used to both exit 0, the directory silently holding the second one's corpus."""
    import subprocess
    import sys

    corpus(tmp_path, 50)
    out = tmp_path / "prep"
    holder = subprocess.Popen(  # a live process holding --out's lock, as a running prepare does
        [
            sys.executable,
            "-c",
            "import sys; from nexus.outdir import acquire_output_lock as a; "
            f"lk = a({str(out)!r}); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _prepare_cli(tmp_path, out) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "being written by another nexus process" in err
        assert f"pid {holder.pid}" in err
        assert not (out / "manifest.json").exists()
    finally:
        holder.communicate("")
    assert _prepare_cli(tmp_path, out) == 0  # the holder gone, the same command goes ahead


def _flip_byte(path, at=10):
    b = bytearray(path.read_bytes())
    b[at] ^= 1
    path.write_bytes(bytes(b))


def test_a_changed_byte_in_a_shard_is_refused_by_the_rerun_and_by_training(tmp_path, capsys):
    corpus(tmp_path, 300)
    out = tmp_path / "prep"
    assert _prepare_cli(tmp_path, out) == 0
    shard = out / "train-00000.bin"
    m = json.loads((out / "manifest.json").read_text())
    import hashlib

    assert m["shards"]["train"][0]["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest()
    _flip_byte(shard)
    before = shard.read_bytes()
    capsys.readouterr()
    assert _prepare_cli(tmp_path, out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train-00000.bin" in err and "sha256" in err
    assert shard.read_bytes() == before  # refused, not rewritten: a changed file may be the user's
    with pytest.raises(ConfigError, match=r"train-00000\.bin does not match the sha256") as e:
        DataModule(DataConfig(source=str(out), seq_len=32))
    assert "changed after it was prepared (valid: " in str(e.value)  # the only damaged shard: no count of others


def test_a_truncated_shard_is_refused_in_one_line_and_a_deleted_one_is_prepared_again(tmp_path, capsys):
    """A truncated shard made training advise "prepare it again", and that rerun exited 0 leaving it broken."""
    docs = corpus(tmp_path, 300)
    out = tmp_path / "prep"
    assert _prepare_cli(tmp_path, out) == 0
    shard = out / "train-00000.bin"
    good = shard.read_bytes()
    shard.write_bytes(good[: len(good) // 2])
    capsys.readouterr()
    assert _prepare_cli(tmp_path, out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train-00000.bin" in err and "truncated" in err
    with pytest.raises(ConfigError, match="truncated"):
        DataModule(DataConfig(source=str(out), seq_len=32))
    shard.unlink()  # what the refusal advises
    assert _prepare_cli(tmp_path, out) == 0
    assert shard.read_bytes() == good
    ref = reference(docs, ByteTokenizer(), 0.05, 1234)
    assert read_split(out, "train") == ref["train"] and read_split(out, "val") == ref["val"]
    assert DataModule(DataConfig(source=str(out), seq_len=32)).train.tokens is not None


def test_a_changed_shard_of_an_interrupted_prepare_is_not_kept(tmp_path, monkeypatch):
    """Resuming keeps finished shards only when their bytes are the ones written."""
    corpus(tmp_path, 300)
    src, cfg = resolve_source(str(tmp_path / "c.txt")), DataConfig()
    real = P.encode_shard

    def dies_at_2(tok, idx, *a):
        if idx == 2:
            raise KeyboardInterrupt
        return real(tok, idx, *a)

    monkeypatch.setattr(P, "encode_shard", dies_at_2)
    with pytest.raises(KeyboardInterrupt):
        P.prepare(src, cfg, ByteTokenizer(), tmp_path / "cut", num_proc=1, shard_bytes=2000, progress=False)
    monkeypatch.setattr(P, "encode_shard", real)
    _flip_byte(tmp_path / "cut" / "train-00001.bin")
    with pytest.raises(ConfigError, match=r"train-00001\.bin .*sha256"):
        P.prepare(src, cfg, ByteTokenizer(), tmp_path / "cut", num_proc=1, shard_bytes=2000, progress=False)


def _descendants(pid):
    """Every live process below `pid` (by parent links in /proc)."""
    import os

    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _running(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_prepare_leaves_no_worker_behind(tmp_path):
    """kill -9 of `data prepare --num-proc 2` left its workers alive for 40+ minutes, still writing shards."""
    import os
    import signal
    import subprocess
    import sys
    import time

    text = "\n\n".join(f"document {i} " + "some words of text " * 300 for i in range(6000))  # ~34 MB
    (tmp_path / "c.txt").write_text(text)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nexus",
            "data",
            "prepare",
            str(tmp_path / "c.txt"),
            "--tokenizer",
            "byte",
            "--out",
            str(tmp_path / "prep"),
            "--num-proc",
            "2",
            "--shard-mb",
            "1",
            "--quiet",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seen: set[int] = set()
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        seen |= set(_descendants(p.pid))
        if len(seen) >= 3 and any(tmp_path.joinpath("prep").glob(".train-*.tmp-*")):  # forkserver + 2 workers, at work
            break
        time.sleep(0.05)
    assert p.poll() is None, "prepare finished before its workers could be seen; make the corpus larger"
    seen |= set(_descendants(p.pid))
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.time() + 20
    while time.time() < deadline and any(_running(c) for c in seen):
        time.sleep(0.1)
    left = [c for c in seen if _running(c)]
    for c in left:  # do not leave them to the next test either way
        os.kill(c, signal.SIGKILL)
    assert not left, f"{len(left)} process(es) of the killed prepare still running"


def test_a_large_corpus_says_it_is_being_checked(tmp_path, monkeypatch, capsys):
    """Hashing the shards on open takes seconds from about a GB on: said, never a silent wait (the threshold
    lowered here so a small corpus crosses it)."""
    from nexus.data import shards

    corpus(tmp_path, 100)
    out = tmp_path / "prep"
    assert _prepare_cli(tmp_path, out) == 0
    capsys.readouterr()
    DataModule(DataConfig(source=str(out), seq_len=32))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(shards, "VERIFY_NOTE_BYTES", 1000)
    DataModule(DataConfig(source=str(out), seq_len=32))
    assert f"checking 0.0 GB of shards in {out} against their sha256" in capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 42: data/shards.py under mutation
def test_sharded_tokens_read_as_their_concatenation():
    """ShardedTokens against np.concatenate of its arrays: every contiguous slice (negative, open, empty,
    past the end), its length and dtype, np.asarray with and without a dtype; other indexing refused."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 60000, n).astype(np.uint16) for n in (5, 1, 0, 7, 3)]
    st, ref = ShardedTokens(arrays), np.concatenate(arrays)
    assert len(st) == len(ref) == 16 and st.dtype == np.uint16
    bounds = [None, -20, -16, -5, -1, 0, 1, 4, 5, 6, 12, 15, 16, 30]
    for a in bounds:
        for b in bounds:
            got = st[a:b]
            assert got.dtype == np.uint16 and got.tolist() == ref[a:b].tolist(), (a, b)
    assert st[3:3].shape == (0,) and st[9:2].shape == (0,)
    for bad in (3, slice(0, 8, 2), slice(None, None, -1)):
        with pytest.raises(TypeError):
            st[bad]
    assert np.asarray(st).tolist() == ref.tolist() and np.asarray(st).dtype == np.uint16
    assert np.asarray(st, dtype=np.int64).dtype == np.int64 and np.asarray(st, dtype=np.int64).tolist() == ref.tolist()
    wide = ShardedTokens([np.arange(3, dtype=np.uint32), np.arange(2, dtype=np.uint32)])
    assert wide.dtype == np.uint32 and wide[1:4].dtype == np.uint32 and wide[2:2].dtype == np.uint32
    empty = ShardedTokens([np.empty(0, np.uint32)])
    assert len(empty) == 0 and empty.dtype == np.uint16 and np.asarray(empty).shape == (0,)
    assert np.asarray(empty).dtype == np.uint16 and empty[0:5].shape == (0,) and empty[0:5].dtype == np.uint16


def test_prepared_shards_are_mapped_read_only(tmp_path):
    corpus(tmp_path, 300)
    out = tmp_path / "prep"
    assert _prepare_cli(tmp_path, out) == 0
    dm = DataModule(DataConfig(source=str(out), seq_len=32))
    arrays = dm.train.tokens.arrays if isinstance(dm.train.tokens, ShardedTokens) else [dm.train.tokens]
    assert arrays and all(isinstance(a, np.memmap) and not a.flags.writeable for a in arrays)


def _chat_corpus(tmp_path, n=200):
    with open(tmp_path / "chat.jsonl", "w") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {
                        "messages": [
                            {"role": "user", "content": f"question {i} " * 20},
                            {"role": "assistant", "content": f"answer {i} " * 30},
                        ]
                    }
                )
                + "\n"
            )


def _chat_cli(tmp_path, out):
    return main(
        [
            "data",
            "prepare",
            str(tmp_path / "chat.jsonl"),
            "--tokenizer",
            "byte",
            "--chat",
            "--out",
            str(out),
            "--num-proc",
            "1",
            "--shard-mb",
            "1",
            "--quiet",
        ]
    )


@pytest.mark.parametrize("damage,needle", [("flip", "does not match the sha256"), ("truncate", "truncated or damaged")])
def test_a_damaged_loss_mask_shard_is_refused_like_a_token_shard(tmp_path, capsys, damage, needle):
    _chat_corpus(tmp_path)
    out = tmp_path / "prep"
    assert _chat_cli(tmp_path, out) == 0
    m = json.loads((out / "manifest.json").read_text())
    entry = m["shards"]["train"][0]
    mask = out / entry["mask"]
    assert mask.stat().st_size == entry["tokens"]  # one byte a token
    import hashlib

    assert entry["mask_sha256"] == hashlib.sha256(mask.read_bytes()).hexdigest()
    if damage == "flip":
        _flip_byte(mask)
    else:
        mask.write_bytes(mask.read_bytes()[:-3])
    capsys.readouterr()
    assert _chat_cli(tmp_path, out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"shard {entry['mask']} " in err and needle in err
    with pytest.raises(ConfigError, match=needle):
        DataModule(DataConfig(source=str(out), seq_len=32, chat=True, tokenizer=str(out)))


def test_the_refusal_names_the_recorded_hash_and_counts_the_other_damaged_shards(tmp_path):
    corpus(tmp_path, 300)
    out = tmp_path / "prep"
    P.prepare(
        resolve_source(str(tmp_path / "c.txt")),
        DataConfig(),
        ByteTokenizer(),
        out,
        num_proc=1,
        shard_bytes=2000,
        progress=False,
    )
    m = json.loads((out / "manifest.json").read_text())
    first, second = m["shards"]["train"][0], m["shards"]["train"][1]
    _flip_byte(out / first["file"])
    _flip_byte(out / second["file"])
    with pytest.raises(ConfigError) as e:
        DataModule(DataConfig(source=str(out), seq_len=32))
    assert (
        f"shard {first['file']} does not match the sha256 the manifest recorded ({first['sha256'][:16]}...): its "
        "bytes changed after it was prepared (and 1 more) (valid:"
    ) in str(e.value)
    shard = out / first["file"]
    shard.write_bytes(shard.read_bytes()[:4])
    with pytest.raises(ConfigError) as e:
        DataModule(DataConfig(source=str(out), seq_len=32))
    assert f"shard {first['file']} is 4 bytes, the manifest says {first['tokens'] * 2:,} (truncated or damaged)" in str(
        e.value
    )


@pytest.mark.parametrize("chat", [False, True])
def test_the_check_is_announced_exactly_from_its_threshold_on_rank_0(tmp_path, monkeypatch, capsys, chat):
    """The announced size is every shard's bytes (2 a token for uint16 ids, + 1 a token for a loss mask)."""
    from nexus.data import shards

    if chat:
        _chat_corpus(tmp_path)
    else:
        corpus(tmp_path, 100)
    out = tmp_path / "prep"
    assert (_chat_cli if chat else _prepare_cli)(tmp_path, out) == 0
    m = json.loads((out / "manifest.json").read_text())
    size = sum(e["tokens"] * (3 if chat else 2) for s in ("train", "val") for e in m["shards"][s])
    cfg = DataConfig(source=str(out), seq_len=32, chat=chat, tokenizer=str(out) if chat else "byte")
    capsys.readouterr()
    for threshold, rank, said in (
        (size + 1, None, False),
        (size, None, True),
        (size, "0", True),
        (size, "", True),
        (size, "1", False),
    ):
        monkeypatch.setattr(shards, "VERIFY_NOTE_BYTES", threshold)
        if rank is None:
            monkeypatch.delenv("RANK", raising=False)
        else:
            monkeypatch.setenv("RANK", rank)
        DataModule(cfg)
        err = capsys.readouterr().err
        assert ("against their sha256" in err) == said, (threshold, rank, err)


def test_a_model_tokenizer_mismatch_advises_preparing_with_the_model_tokenizer(tmp_path):
    from nexus.data.chat import ChatByteTokenizer
    from nexus.data.shards import check_tokenizer, tokenizer_identity

    m = {"tokenizer": tokenizer_identity(ByteTokenizer())}
    with pytest.raises(ConfigError) as e:
        check_tokenizer(m, ChatByteTokenizer(), "data/x", model_tokenizer=True)
    assert (
        "but the model's tokenizer (from its checkpoint) is byte_chat (vocab 262" in str(e.value)
        and "(valid: a corpus prepared with the model's tokenizer: nexus data prepare TEXT --tokenizer CHECKPOINT "
        "--out DIR)"
        in str(e.value)
    )
    with pytest.raises(
        ConfigError,
        match=r"but the run's data.tokenizer is byte_chat .*\(valid: --data.tokenizer "
        r"data/x, the tokenizer stored with the corpus\)",
    ):
        check_tokenizer(m, ChatByteTokenizer(), "data/x")


@pytest.mark.parametrize("edit", [lambda m: m.update(dtype="bogus"), lambda m: m["shards"]["train"][0].pop("file")])
def test_a_manifest_with_a_bad_dtype_or_a_shard_without_a_file_is_refused(tmp_path, edit):
    corpus(tmp_path, 100)
    out = tmp_path / "prep"
    assert _prepare_cli(tmp_path, out) == 0
    m = json.loads((out / "manifest.json").read_text())
    edit(m)
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ConfigError, match="manifest.json is not a nexus prepared-corpus manifest"):
        DataModule(DataConfig(source=str(out), seq_len=32))


def test_open_prepared_checks_by_default_and_maps_one_token_empty_and_missing_splits(tmp_path):
    """A hand-written prepared directory (uint32 ids): a one-token shard, an empty one, a split without shards;
    open_prepared verifies unless told the caller just did (eval calls it with the default)."""
    import hashlib

    from nexus.data.shards import open_prepared

    a, c = np.array([70000], np.uint32), np.array([5, 70001], np.uint32)
    entries = []
    for name, arr in (("train-00000.bin", a), ("train-00001.bin", np.empty(0, np.uint32)), ("train-00002.bin", c)):
        (tmp_path / name).write_bytes(arr.tobytes())
        entries.append({"file": name, "tokens": len(arr), "sha256": hashlib.sha256(arr.tobytes()).hexdigest()})
    m = {"dtype": "uint32", "shards": {"train": entries, "val": []}}
    got = open_prepared(tmp_path, m)
    train, val = got["train"][0], got["val"][0]
    assert np.asarray(train).tolist() == [70000, 5, 70001] and np.asarray(train).dtype == np.uint32
    assert isinstance(val, np.ndarray) and val.shape == (0,) and val.dtype == np.uint32
    assert got["train"][1] is None and got["val"][1] is None
    _flip_byte(tmp_path / "train-00002.bin", at=0)
    with pytest.raises(ConfigError, match=r"train-00002\.bin does not match the sha256"):
        open_prepared(tmp_path, m)
    assert np.asarray(open_prepared(tmp_path, m, verify=False)["train"][0]).tolist()[:2] == [70000, 4]


def test_split_tail_takes_the_last_tokens_across_arrays():
    from nexus.data.shards import split_tail

    arrays = [np.arange(0, 4), np.arange(4, 6), np.arange(6, 9)]
    ref = np.arange(9)
    for n in range(0, 10):
        head, tail = split_tail(arrays, n)
        whole = lambda xs: np.concatenate(xs).tolist() if xs else []  # noqa: E731
        assert whole(head) == ref[: 9 - n].tolist() and whole(tail) == ref[9 - n :].tolist(), n


def test_a_bin_file_is_mapped_read_only_and_its_ids_checked_from_the_first():
    """The largest id is found wherever it is (the very first token too), and an id equal to the vocabulary
    size is already outside it."""
    import tempfile
    from pathlib import Path

    from nexus.data.shards import open_bin

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "t.bin"
        np.array([258] + [1] * 9, np.uint16).tofile(f)
        mm = open_bin(f, "uint16", 259, "t.bin")
        assert not mm.flags.writeable and mm.tolist()[:2] == [258, 1]
        np.array([259] + [1] * 9, np.uint16).tofile(f)
        with pytest.raises(ConfigError, match="holds id 259 but the tokenizer has 259 ids"):
            open_bin(f, "uint16", 259, "t.bin")


def test_sharded_tokens_of_one_wide_array_keep_its_dtype():
    one = ShardedTokens([np.arange(3, dtype=np.uint32)])
    assert one.dtype == np.uint32 and one[0:2].dtype == np.uint32 and one[0:2].tolist() == [0, 1]
