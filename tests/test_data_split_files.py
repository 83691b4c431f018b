"""Files named as splits are the splits (a held-out file is never trained on), and a run whose validation
tokens repeat its training tokens says so in one line (data/overlap.py, held to a brute-force reference)."""

import json
from pathlib import Path

import numpy as np
import pytest
from data_helpers import byte_documents

from nexus.cli import main
from nexus.config import DataConfig
from nexus.data.loader import DataModule
from nexus.data.overlap import find_overlap
from nexus.data.sources import resolve_source


def docs_of(n, tag):
    return [f"{tag} document {i}. " + f"{tag} words and more {tag} words " * (2 + i % 4) + "end" for i in range(n)]


def write_txt(path: Path, docs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(docs))


def text_of(stream, eos):
    """The documents of a token stream (byte ids), split at EOS."""
    return byte_documents(np.asarray(stream.tokens).tolist(), eos)


def test_nanogpt_folder_uses_val_bin_as_validation_never_as_training(tmp_path, capsys):
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, 6000).astype(np.uint16)
    val = rng.integers(0, 256, 900).astype(np.uint16)
    (tmp_path / "nano").mkdir()
    train.tofile(tmp_path / "nano" / "train.bin")
    val.tofile(tmp_path / "nano" / "val.bin")
    dm = DataModule(DataConfig(source=str(tmp_path / "nano"), seq_len=32))
    assert np.array_equal(np.asarray(dm.train.tokens), train)
    assert np.array_equal(np.asarray(dm.val.tokens), val)
    assert "val.bin" in dm.summary() and dm.overlap_note() is None
    # the reproduction: `nexus train --data DIR` on the folder, briefly
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--data",
            str(tmp_path / "nano"),
            "--train.steps",
            "1",
            "--train.out_dir",
            str(tmp_path / "run"),
        ]
    )
    err = "".join(capsys.readouterr())
    assert rc == 0 and "train 6,000 tokens | validation 900 tokens" in err and "val.bin" in err, err
    assert "overlaps" not in err


def test_text_folders_and_lists_named_as_splits(tmp_path):
    tr, va, te = docs_of(6, "train"), docs_of(3, "val"), docs_of(2, "test")
    write_txt(tmp_path / "a" / "train.txt", tr)
    write_txt(tmp_path / "a" / "validation.txt", va)
    write_txt(tmp_path / "a" / "test.txt", te)
    write_txt(tmp_path / "a" / "test_notes.txt", ["notes are training text, not a split"])
    src = resolve_source(str(tmp_path / "a"))
    assert [p.name for p in src.files] == ["test_notes.txt", "train.txt"]
    assert [p.name for p in src.val_files] == ["validation.txt"] and [p.name for p in src.unread] == ["test.txt"]
    dm = DataModule(DataConfig(source=str(tmp_path / "a"), seq_len=16, cache_dir=str(tmp_path / "cache")))
    eos = dm.tokenizer.eos_id
    assert text_of(dm.val, eos) == va
    assert sorted(text_of(dm.train, eos)) == sorted(["notes are training text, not a split"] + tr)
    assert "validation.txt" in dm.summary() and "1 test file(s) not read (test.txt)" in dm.summary()
    # HF's numbered shards and split folders; a list whose only held-out file is a test file validates on it
    for i, chunk in enumerate((tr[:3], tr[3:])):
        p = tmp_path / "hf" / "train" / f"part-{i}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(json.dumps({"text": d}) + "\n" for d in chunk))
    p = tmp_path / "hf" / "validation-00000-of-00001.jsonl"
    p.write_text("".join(json.dumps({"text": d}) + "\n" for d in va))
    src = resolve_source(str(tmp_path / "hf"))
    assert [p.name for p in src.val_files] == ["validation-00000-of-00001.jsonl"] and len(src.files) == 2
    cfg = DataConfig()
    assert [d for d, v in src.split_documents(cfg) if v] == va
    assert [d for d, v in src.split_documents(cfg) if not v] == tr
    listed = resolve_source(f"{tmp_path / 'a' / 'train.txt'},{tmp_path / 'a' / 'test.txt'}")
    assert [p.name for p in listed.val_files] == ["test.txt"] and not listed.unread


def test_prepare_keeps_named_splits_and_says_so_in_the_manifest(tmp_path):
    tr, va = docs_of(8, "train"), docs_of(3, "val")
    write_txt(tmp_path / "c" / "train.txt", tr)
    write_txt(tmp_path / "c" / "val.txt", va)
    assert (
        main(["data", "prepare", str(tmp_path / "c"), "--tokenizer", "byte", "--out", str(tmp_path / "p"), "--quiet"])
        == 0
    )
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["split"]["unit"] == "file" and m["documents"] == {"train": 8, "val": 3}
    dm = DataModule(DataConfig(source=str(tmp_path / "p"), seq_len=16))
    assert text_of(dm.val, dm.tokenizer.eos_id) == va


def test_only_held_out_files_is_one_line(tmp_path, capsys):
    write_txt(tmp_path / "v" / "val.txt", docs_of(3, "v"))
    rc = main(["train", "--preset", "baseline-micro", "--data", str(tmp_path / "v"), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "only held-out files" in err[0], err
    assert not (tmp_path / "r").exists()


# ----------------------------------------------------------------------------- the overlap check
def reference_overlap(train: np.ndarray, val: np.ndarray, window: int, samples: int) -> int:
    """Brute force: every training window as a tuple in a set; the same evenly spaced validation windows."""
    grams = {tuple(train[i : i + window].tolist()) for i in range(len(train) - window + 1)}
    starts = np.unique(np.linspace(0, len(val) - window, num=min(samples, len(val) - window + 1)).astype(np.int64))
    return sum(tuple(val[s : s + window].tolist()) in grams for s in starts)


@pytest.mark.parametrize("chunk", [50, 257, 1 << 22])
def test_overlap_matches_brute_force(chunk):
    rng = np.random.default_rng(1)
    val = rng.integers(0, 7, 600).astype(np.uint16)  # a small alphabet: short windows collide by chance too
    train = rng.integers(0, 7, 3000).astype(np.uint16)
    train[1000:1200] = val[100:300]  # planted: a copied stretch, across chunk boundaries for small chunks
    train[2900:3000] = val[500:600]  # and at the very end
    for window in (3, 8, 16):
        got = find_overlap(train, val, window=window, samples=80, chunk=chunk)
        assert got.found == reference_overlap(train, val, window, 80) and got.scanned == len(train)
    assert find_overlap(train, val, window=16, samples=80, chunk=chunk).found > 0
    clean = rng.integers(0, 7, 3000).astype(np.uint16)
    assert find_overlap(clean, val, window=16, samples=80, chunk=chunk).found == reference_overlap(clean, val, 16, 80)


def test_overlap_sampling_large_corpora_says_how_much_was_read():
    rng = np.random.default_rng(2)
    val = rng.integers(0, 256, 400).astype(np.uint16)
    train = rng.integers(0, 256, 10_000).astype(np.uint16)
    train[:400] = val
    got = find_overlap(train, val, window=32, samples=16, chunk=1000, max_scan=3000)
    assert got.scanned == 3000 and got.found == 16  # chunk 0 is always read: the copy is in it
    assert "3,000 of 10,000 (evenly spaced chunks)" in got.note()


def test_a_run_whose_validation_repeats_training_says_so(tmp_path, capsys):
    docs = docs_of(40, "x")
    write_txt(tmp_path / "c" / "a.txt", docs)
    write_txt(tmp_path / "c" / "b.txt", docs)  # the same corpus twice: each held-out document is also trained on
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--data",
            str(tmp_path / "c"),
            "--train.steps",
            "1",
            "--data.seq_len",
            "32",
            "--data.cache_dir",
            str(tmp_path / "cache"),
            "--train.out_dir",
            str(tmp_path / "run"),
        ]
    )
    err = "".join(capsys.readouterr())
    lines = [ln for ln in err.splitlines() if "overlaps training" in ln]
    assert rc == 0 and len(lines) == 1 and "64-token validation windows occur verbatim" in lines[0], err


def test_embedded_corpus_holds_each_document_once():
    """Copies of one docstring on both sides of the split were a leak in the default corpus."""
    from nexus.data.corpus import embedded_documents

    docs = embedded_documents()
    assert len(docs) == len(set(docs))
    dm = DataModule(DataConfig(source="embedded"), quiet=True)
    assert dm.overlap_note() is None


def test_a_split_written_as_uint32_beside_a_uint16_one_is_refused_not_read_as_half_zeros(tmp_path):
    """Issue 46 item 6: val.bin as uint32 beside train.bin as uint16 read every second validation id as 0."""
    from nexus.config import ConfigError

    rng = np.random.default_rng(0)
    (tmp_path / "nano").mkdir()
    rng.integers(1, 256, 6000).astype(np.uint16).tofile(tmp_path / "nano" / "train.bin")
    rng.integers(1, 256, 900).astype(np.uint32).tofile(tmp_path / "nano" / "val.bin")
    with pytest.raises(ConfigError) as e:
        DataModule(DataConfig(source=str(tmp_path / "nano"), seq_len=32))
    msg = str(e.value)
    assert "val.bin" in msg and "uint32" in msg and "\n" not in msg
    # both uint32, said so: read as they are
    rng.integers(1, 256, 6000).astype(np.uint32).tofile(tmp_path / "nano" / "train.bin")
    dm = DataModule(DataConfig(source=str(tmp_path / "nano"), seq_len=32, dtype="uint32"))
    assert np.asarray(dm.val.tokens).min() >= 1
