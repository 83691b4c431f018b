"""Data: tokenizers, local formats, deterministic split, memory-mapped cache, EOS between documents."""
import json

import numpy as np
import pytest
import torch

from nexus.config import ConfigError, DataConfig
from nexus.data.corpus import embedded_documents
from nexus.data.loader import DataModule
from nexus.data.tokenizer import BPETokenizer, ByteTokenizer


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
    train_docs, val_docs = a._split([f"d{i}" for i in range(40)])
    assert len(val_docs) == 8 and not set(train_docs) & set(val_docs)
    assert a._split([f"d{i}" for i in range(40)]) == (train_docs, val_docs)


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


def test_bpe_train_save_load(tmp_path):
    docs = write_docs(tmp_path)
    tok = BPETokenizer.train(docs, 300)
    tok.save(tmp_path)
    again = BPETokenizer.load(tmp_path / "tokenizer.json")
    assert again.decode(again.encode(docs[3])) == docs[3]
    assert len(again.encode(docs[3])) < len(docs[3].encode())
    dm = DataModule(DataConfig(source=str(tmp_path / "c.txt"), tokenizer="bpe", bpe_vocab_size=300, seq_len=16))
    assert dm.vocab_size == 300
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="broken.json"):
        BPETokenizer.load(tmp_path / "broken.json")


def test_too_little_text_is_a_clear_error(tmp_path):
    (tmp_path / "t.txt").write_text("hi")
    with pytest.raises(ConfigError, match="data.seq_len"):
        DataModule(DataConfig(source=str(tmp_path / "t.txt"), seq_len=64))


def test_hub_offline_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="hf:HuggingFaceFW/fineweb-edu"):
        DataModule(DataConfig(source="hf:HuggingFaceFW/fineweb-edu", seq_len=16, cache_dir=str(tmp_path)))
