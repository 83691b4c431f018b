"""Data: tokenizers, local formats, deterministic split, memory-mapped cache, EOS between documents."""

import json

import numpy as np
import pytest
import torch

from nexus.config import ConfigError, DataConfig
from nexus.data.corpus import embedded_documents
from nexus.data.loader import DataModule
from nexus.data.sources import resolve_source
from nexus.data.split import split_documents
from nexus.data.tokenizer import BPETokenizer, ByteTokenizer
from nexus.data.tokenizer_files import load_tokenizer


def write_docs(tmp_path, n=40):
    docs = [(f"Document number {i}. " + "lorem ipsum dolor sit amet " * (3 + i % 5)).strip() for i in range(n)]
    (tmp_path / "c.txt").write_text("\n\n".join(docs))
    with open(tmp_path / "c.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d, "other": 1}) + "\n")
    return docs


def test_byte_tokenizer_round_trip():
    tok = ByteTokenizer()
    text = "héllo wörld ✓"
    assert tok.decode(tok.encode(text)) == text


def test_embedded_corpus_is_offline_and_large():
    docs = embedded_documents()
    assert sum(len(d) for d in docs) > 300_000


def test_txt_and_jsonl_give_the_same_stream(tmp_path):
    write_docs(tmp_path)
    a = DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=16))
    b = DataModule(DataConfig(source=str(tmp_path / "c.jsonl"), seq_len=16))
    assert np.array_equal(np.asarray(a.train.tokens), np.asarray(b.train.tokens))
    eos = a.tokenizer.eos_id
    n_docs = int((np.asarray(a.train.tokens) == eos).sum() + (np.asarray(a.val.tokens) == eos).sum())
    assert n_docs == 40  # one EOS after every document


def test_parquet(tmp_path):
    import datasets

    docs = write_docs(tmp_path)
    datasets.Dataset.from_dict({"body": docs}).to_parquet(str(tmp_path / "c.parquet"))
    dm = DataModule(DataConfig(source=str(tmp_path / "c.parquet"), text_field="body", seq_len=16))
    assert len(dm.train) > 100
    with pytest.raises(ConfigError, match="data.text_field='text'"):
        DataModule(DataConfig(source=str(tmp_path / "c.parquet"), seq_len=16, cache_dir=str(tmp_path / "x")))


def test_split_is_deterministic_and_disjoint(tmp_path):
    write_docs(tmp_path)
    cfg = DataConfig(source=str(tmp_path / "c.txt"), seq_len=16, val_fraction=0.2)
    a = DataModule(cfg)
    assert int((np.asarray(a.val.tokens) == a.tokenizer.eos_id).sum()) == 8  # 8 of 40 documents held out
    b = DataModule(
        DataConfig(source=str(tmp_path / "c.txt"), seq_len=16, val_fraction=0.2, cache_dir=str(tmp_path / "other"))
    )
    assert np.array_equal(np.asarray(a.val.tokens), np.asarray(b.val.tokens))


def test_streaming_split_holds_out_a_seeded_share_of_each_block():
    docs = list(range(2500))
    got = list(split_documents(iter(docs), 0.2, 7, block_size=1000))
    assert [d for d, _ in got] == docs
    val = [d for d, v in got if v]
    assert val == [d for d, v in split_documents(iter(docs), 0.2, 7, block_size=1000) if v]
    # block 0 is one permutation seeded by split_seed (a corpus of <= one block splits as it always did)
    assert set(val[:200]) == set(np.random.default_rng(7).permutation(1000)[:200].tolist())
    assert [sum(1 for d in val if lo <= d < lo + 1000) for lo in (0, 1000, 2000)] == [200, 200, 100]
    assert set(val[200:400]) == {1000 + i for i in np.random.default_rng([7, 1]).permutation(1000)[:200].tolist()}


def test_cache_is_memory_mapped_and_reused(tmp_path):
    write_docs(tmp_path)
    cfg = DataConfig(source=str(tmp_path / "c.txt"), seq_len=16, cache_dir=str(tmp_path / "cache"))
    DataModule(cfg)
    again = DataModule(cfg)
    assert isinstance(again.train.tokens, np.memmap)


def test_batches_depend_only_on_step_and_rank_slices_the_global_batch(tmp_path):
    write_docs(tmp_path)
    dm = DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=16))
    x1, y1 = dm.train_batch(5, 0, 4)
    x2, _ = dm.train_batch(5, 0, 4)
    assert torch.equal(x1, x2) and torch.equal(x1[:, 1:], y1[:, :-1])
    full, _ = dm.train_batch(7, 0, 4, rank=0, world=1)
    r0, _ = dm.train_batch(7, 0, 2, rank=0, world=2)
    r1, _ = dm.train_batch(7, 0, 2, rank=1, world=2)
    assert torch.equal(torch.cat([r0, r1]), full)


def test_bpe_train_save_load(tmp_path, capsys):
    docs = write_docs(tmp_path)
    tok = BPETokenizer.train(docs, 300)
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert again.decode(again.encode(docs[3])) == docs[3]
    assert len(again.encode(docs[3])) < len(docs[3].encode())
    capsys.readouterr()
    dm = DataModule(DataConfig(source=str(tmp_path / "c.txt"), tokenizer="bpe", bpe_vocab_size=300, seq_len=16))
    assert dm.vocab_size == 300
    # the silent pass of BPE training is announced before it starts
    assert "training a BPE tokenizer (vocabulary 300)" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="broken.json"):
        load_tokenizer(tmp_path / "broken.json")


def test_too_little_text_is_a_clear_error(tmp_path):
    (tmp_path / "t.txt").write_text("hi")
    with pytest.raises(ConfigError, match="data.seq_len"):
        DataModule(DataConfig(source=str(tmp_path / "t.txt"), seq_len=64))


def test_hub_offline_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="hf:HuggingFaceFW/fineweb-edu"):
        DataModule(DataConfig(source="hf:HuggingFaceFW/fineweb-edu", seq_len=16, cache_dir=str(tmp_path)))


# ----------------------------------------------------------------------------- streaming build
def reference_streams(docs, tok, val_fraction, split_seed):
    """Slow, obviously-correct reference: all documents in memory, a seeded permutation holds out
    round(n * val_fraction) of them, each encoded alone and followed by EOS."""
    order = np.random.default_rng(split_seed).permutation(len(docs))
    val = set(order[: max(1, int(round(len(docs) * val_fraction)))].tolist())
    out = {"train": [], "val": []}
    for i, d in enumerate(docs):
        out["val" if i in val else "train"] += tok.encode(d) + [tok.eos_id]
    return out


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_streamed_shards_equal_the_in_memory_reference(tmp_path, monkeypatch, tokenizer):
    import nexus.data.prepare as P

    monkeypatch.setattr(P, "ENCODE_BATCH", 7)  # many encode_batch calls, uneven last batch
    docs = write_docs(tmp_path, n=53)
    cfg = DataConfig(
        source=str(tmp_path / "c.txt"),
        seq_len=16,
        val_fraction=0.1,
        cache_dir=str(tmp_path / "cache"),
        tokenizer=tokenizer,
        bpe_vocab_size=300,
    )
    dm = DataModule(cfg)
    ref = reference_streams(docs, dm.tokenizer, 0.1, cfg.split_seed)
    assert np.asarray(dm.train.tokens).tolist() == ref["train"]
    assert np.asarray(dm.val.tokens).tolist() == ref["val"]


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_tokenization_goes_through_batch_encoding(tmp_path, monkeypatch, tokenizer):
    write_docs(tmp_path)
    calls = []
    cls = ByteTokenizer if tokenizer == "byte" else BPETokenizer
    name = "encode_batch_flat" if tokenizer == "byte" else "encode_batch"
    real = getattr(cls, name)
    monkeypatch.setattr(cls, "encode", lambda self, t: pytest.fail("per-document encode used"))
    monkeypatch.setattr(cls, name, lambda self, texts: calls.append(len(texts)) or real(self, texts))
    DataModule(
        DataConfig(
            source=str(tmp_path / "c.txt"),
            seq_len=16,
            cache_dir=str(tmp_path / "cache"),
            tokenizer=tokenizer,
            bpe_vocab_size=300,
        )
    )
    assert sum(calls) == 40


def test_txt_is_read_in_chunks_with_the_same_documents(tmp_path, monkeypatch):
    import tracemalloc

    import nexus.data.corpus as C

    text = "a\n\n\nb  \n\n é ü ✓\n\n\n\nlast one\n" + "\n\n".join(f"doc {i} " + "x" * (i % 13) for i in range(200))
    path = tmp_path / "t.txt"
    path.write_text(text)
    expected = [d.strip() for d in text.split("\n\n") if d.strip()]
    for chunk in (1, 2, 3, 7, 64, 1 << 20):
        monkeypatch.setattr(C, "_READ_CHUNK", chunk)
        assert list(C._txt_documents(path)) == expected, chunk
    big = tmp_path / "big.txt"
    with open(big, "w") as f:  # ~8 MB
        for i in range(20000):
            f.write(f"document {i} " + "y" * 400 + "\n\n")
    monkeypatch.setattr(C, "_READ_CHUNK", 1 << 16)
    tracemalloc.start()
    it = resolve_source(str(big)).documents(DataConfig(source=str(big)))
    first = [next(it) for _ in range(3)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert first[0].startswith("document 0 ") and peak < 1_000_000  # one chunk, not the 8 MB file


def test_jsonl_is_streamed_as_an_iterable_dataset(tmp_path, monkeypatch):
    import datasets

    seen = []
    real = datasets.load_dataset

    def spy(*a, **kw):
        ds = real(*a, **kw)
        seen.append((kw.get("streaming"), type(ds).__name__))
        return ds

    monkeypatch.setattr(datasets, "load_dataset", spy)
    write_docs(tmp_path)
    dm = DataModule(DataConfig(source=str(tmp_path / "c.jsonl"), seq_len=16, cache_dir=str(tmp_path / "cache")))
    assert seen and all(s == (True, "IterableDataset") for s in seen)
    assert len(dm.train) > 100


def test_a_failure_mid_build_leaves_no_cache(tmp_path, monkeypatch):
    write_docs(tmp_path)
    monkeypatch.setattr(
        ByteTokenizer, "encode_batch_flat", lambda self, texts: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    with pytest.raises(RuntimeError, match="boom"):
        DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=16, cache_dir=str(tmp_path / "cache")))
    assert list((tmp_path / "cache").iterdir()) == []


# ----------------------------------------------------------------------------- issue 42 item 6: surviving mutants
@pytest.mark.parametrize("n_tokens,seq_len", [(103, 10), (64, 7), (41, 8), (20, 10), (12, 10)])
def test_every_window_of_every_epoch_lies_inside_the_corpus_and_the_offset_spans_the_slack(n_tokens, seq_len):
    """From the sampler's rule (window = seq_len + 1 tokens from start; n = (N-1)//L windows an epoch, the
    epoch's offset uniform in [0, N-1-n*L]): over many epochs, every window ends inside the corpus and every
    offset of the slack occurs, so an offset one token past the slack, or one short of it, is seen."""
    from nexus.data.sampler import WindowSampler

    n = (n_tokens - 1) // seq_len
    slack = n_tokens - 1 - n * seq_len
    s = WindowSampler(n_tokens, seq_len, seed=3)
    offsets = set()
    for e in range(300):
        starts = np.sort(s.starts(e * n, n))
        off = int(starts[0])
        assert starts.tolist() == [off + k * seq_len for k in range(n)]  # each window once, on the epoch's grid
        assert int(starts.max()) + seq_len + 1 <= n_tokens  # the last target still a corpus token
        offsets.add(off)
    assert offsets == set(range(slack + 1))


def test_sft_targets_out_of_the_loader_are_exactly_the_assistant_tokens(tmp_path):
    """The masked targets the trainer gets, against an independent rule on the tokens themselves: user text
    is upper case, replies lower case, so a target is kept iff it is a lower-case byte or the <eos> that
    closes a reply (the chat template), and is then the token itself; everything else is ignored (-100)."""
    from nexus.data.chat import ChatByteTokenizer
    from nexus.models.lm_loss import IGNORE_INDEX

    rng = np.random.default_rng(0)
    with open(tmp_path / "chat.jsonl", "w") as f:
        for i in range(120):
            msgs = []
            for _ in range(1 + i % 3):
                msgs.append({"role": "user", "content": "".join(rng.choice(list("ABCDEFG"), 5 + i % 7))})
                msgs.append({"role": "assistant", "content": "".join(rng.choice(list("abcdefg"), 3 + i % 5))})
            f.write(json.dumps({"messages": msgs}) + "\n")
    tok = ChatByteTokenizer()
    dm = DataModule(
        DataConfig(source=str(tmp_path / "chat.jsonl"), chat=True, seq_len=24, cache_dir=str(tmp_path / "cache"))
    )
    tokens = np.asarray(dm.train.tokens).astype(np.int64)
    lower = set(tok.encode("abcdefg"))
    for step in range(6):
        x, y = dm.train_batch(step, 0, 8, accum=1)
        starts = dm.sampler.starts(dm.sample_index(step, 0, 8, 1), 8)
        for row, st in enumerate(starts):
            target = tokens[st + 1 : st + 1 + 24]
            keep = np.array([t in lower or t == tok.eos_id for t in target])
            want = np.where(keep, target, IGNORE_INDEX)
            assert x[row].tolist() == tokens[st : st + 24].tolist()
            assert y[row].tolist() == want.tolist()
    assert (y != IGNORE_INDEX).any() and (y == IGNORE_INDEX).any()


def test_a_corpus_prepared_with_another_bpe_of_the_same_size_is_refused(tmp_path):
    """The tokenizer check compares the tokenizer's hash, not only its kind and vocabulary size: two BPE
    tokenizers of one size trained on different text give different ids."""
    from nexus.data.prepare import prepare

    write_docs(tmp_path, 200)
    words = ["".join(chr(97 + (i * 7 + j * 3) % 26) for j in range(2 + i % 6)) for i in range(400)]
    a = BPETokenizer.train([" ".join(words[k : k + 40]) for k in range(0, 400, 40)] * 5, 300)
    b = BPETokenizer.train(["lorem ipsum dolor sit amet consectetur adipiscing " * 50] * 20 + words, 300)
    assert a.vocab_size == b.vocab_size and a.encode("lorem ipsum") != b.encode("lorem ipsum")
    out = tmp_path / "prep"
    prepare(resolve_source(str(tmp_path / "c.txt")), DataConfig(), a, out, num_proc=1, progress=False)
    b.save(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"was prepared with tokenizer bpe \(vocab 300, sha256 [0-9a-f]{16}\), but "
        r"the run's data.tokenizer is bpe \(vocab 300, sha256",
    ):
        DataModule(DataConfig(source=str(out), seq_len=16, tokenizer=str(tmp_path / "tokenizer.json")))
    assert DataModule(DataConfig(source=str(out), seq_len=16, tokenizer=str(out / "tokenizer.json"))).vocab_size == 300
