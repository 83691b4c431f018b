"""Data sources: files, folders, globs, lists, the stdlib corpus, bare .bin files; every bad form is one
line and exit 2 with nothing written; the hub fails offline in one line."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from nexus.cli import main
from nexus.config import ConfigError, DataConfig
from nexus.data.loader import DataModule
from nexus.data.sources import resolve_source


def docs_of(n, tag):
    return [f"{tag} document {i}. " + "words and more words " * (2 + i % 4) + "end" for i in range(n)]


def write_txt(path: Path, docs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(docs))


def test_folder_glob_and_list_read_the_same_documents_in_order(tmp_path):
    a, b, c = docs_of(5, "a"), docs_of(4, "b"), docs_of(3, "c")
    write_txt(tmp_path / "d" / "1.txt", a)
    write_txt(tmp_path / "d" / "2.txt", b)
    write_txt(tmp_path / "d" / "sub" / "3.txt", c)
    (tmp_path / "d" / ".hidden").write_text("not a document")
    cfg = DataConfig()
    want = a + b + c
    assert list(resolve_source(str(tmp_path / "d")).documents(cfg)) == want
    assert list(resolve_source(str(tmp_path / "d" / "**" / "*.txt")).documents(cfg)) == want
    listed = ",".join(str(tmp_path / "d" / p) for p in ("1.txt", "2.txt", "sub/3.txt"))
    assert list(resolve_source(listed).documents(cfg)) == want
    two_jsonl = []
    for i, chunk in enumerate((a, b)):
        p = tmp_path / "j" / f"{i}.jsonl"
        p.parent.mkdir(exist_ok=True)
        p.write_text("".join(json.dumps({"text": d}) + "\n" for d in chunk))
        two_jsonl.append(str(p))
    assert list(resolve_source(",".join(two_jsonl)).documents(cfg)) == a + b


def test_max_documents_zero_means_all_and_a_cap_is_printed(tmp_path):
    write_txt(tmp_path / "c.txt", docs_of(30, "x"))
    assert len(list(resolve_source(str(tmp_path / "c.txt")).documents(DataConfig(max_documents=0)))) == 30
    assert len(list(resolve_source(str(tmp_path / "c.txt")).documents(DataConfig(max_documents=7)))) == 7
    assert (
        "capped at data.max_documents=7"
        in DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=16, max_documents=7)).summary()
    )
    assert "capped" not in DataModule(DataConfig(source=str(tmp_path / "c.txt"), seq_len=16)).summary()


def test_hub_source_is_streamed_never_listed():
    """The hub reader is a generator over the stream: rows are handed on as they arrive."""
    import inspect

    import nexus.data.corpus as C

    assert inspect.isgeneratorfunction(C.hub_documents)
    src = inspect.getsource(C)
    assert "20000" not in src and "rows.append" not in src


def test_stdlib_corpus_is_this_pythons_sources_in_sorted_order():
    import sysconfig

    from nexus.data.stdlib_corpus import describe, stdlib_documents, stdlib_files

    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    rel = [p.relative_to(root).as_posix() for p in files]
    assert rel == sorted(rel) and all(r.endswith(".py") for r in rel)
    assert not any("site-packages" in r for r in rel)
    assert "json/decoder.py" in rel  # a module every CPython ships
    first = next(stdlib_documents())
    assert first == files[0].read_text(encoding="utf-8", errors="replace").strip()
    size = sum(p.stat().st_size for p in files)
    line = describe()
    assert f"{len(files):,} .py files" in line and sys.version.split()[0] in line
    # the total, and the test package as a part of it (issue 40: "31.5 MB (with the test package, 17.1 MB)" read as
    # a contradiction)
    test = sum(p.stat().st_size for p, r in zip(files, rel) if r.startswith("test/"))
    if test:
        assert (
            f"{size / 1e6:.1f} MB in all (of which the test package is {test / 1e6:.1f} MB and the rest "
            f"{(size - test) / 1e6:.1f} MB)"
        ) in line, line
    else:
        assert f"{size / 1e6:.1f} MB in all (no test package in this Python)" in line, line


def test_stdlib_split_is_deterministic_and_large(tmp_path):
    cfg = DataConfig(source="stdlib", seq_len=64, max_documents=60, cache_dir=str(tmp_path / "c1"))
    a = DataModule(cfg)
    b = DataModule(DataConfig(source="stdlib", seq_len=64, max_documents=60, cache_dir=str(tmp_path / "c2")))
    assert np.array_equal(np.asarray(a.val.tokens), np.asarray(b.val.tokens))
    assert np.array_equal(np.asarray(a.train.tokens), np.asarray(b.train.tokens))
    assert int((np.asarray(a.val.tokens) == a.tokenizer.eos_id).sum()) == 3  # round(60 * 0.05) documents
    from nexus.data.stdlib_corpus import describe

    assert describe() in a.summary()  # what this Python's stdlib holds is part of the run's data summary


# ----------------------------------------------------------------------------- bare .bin files
def test_nanogpt_bin_pair_is_mapped_with_its_val_file(tmp_path):
    rng = np.random.default_rng(0)
    train = rng.integers(0, 259, 5000).astype(np.uint16)
    val = rng.integers(0, 259, 700).astype(np.uint16)
    train.tofile(tmp_path / "train.bin")
    val.tofile(tmp_path / "val.bin")
    dm = DataModule(DataConfig(source=str(tmp_path / "train.bin"), seq_len=32))
    assert isinstance(dm.train.tokens, np.memmap) and np.array_equal(np.asarray(dm.train.tokens), train)
    assert np.array_equal(np.asarray(dm.val.tokens), val)
    train.astype(np.uint32).tofile(tmp_path / "wide.bin")
    dm = DataModule(DataConfig(source=str(tmp_path / "wide.bin"), seq_len=32, dtype="uint32", val_fraction=0.1))
    assert np.array_equal(np.concatenate([np.asarray(dm.train.tokens), np.asarray(dm.val.tokens)]), train)
    assert len(dm.val) == 500


# ----------------------------------------------------------------------------- bad input: one line, exit 2
def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if "nexus-cache" not in p.parts}


def _bad_cases(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "mixed").mkdir()
    write_txt(tmp_path / "mixed" / "a.txt", docs_of(3, "a"))
    (tmp_path / "mixed" / "b.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    np.arange(11, dtype=np.uint8).tofile(tmp_path / "odd.bin")  # 11 bytes: not whole uint16 ids
    np.array([1, 2, 300, 4] * 50, dtype=np.uint16).tofile(tmp_path / "big_ids.bin")
    return {
        "empty folder": (str(tmp_path / "empty"), "holds no files"),
        "glob matching nothing": (str(tmp_path / "nope*.txt"), "matches no file"),
        "mixed file types": (str(tmp_path / "mixed"), "mixes file formats"),
        "bin not a multiple of its dtype": (str(tmp_path / "odd.bin"), "not a multiple of uint16"),
        "ids beyond the vocabulary": (str(tmp_path / "big_ids.bin"), "holds id 300"),
        "missing path": (str(tmp_path / "absent.txt"), "does not exist"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "empty folder",
        "glob matching nothing",
        "mixed file types",
        "bin not a multiple of its dtype",
        "ids beyond the vocabulary",
        "missing path",
    ],
)
def test_bad_data_is_one_line_exit_2_nothing_written(tmp_path, capsys, monkeypatch, case):
    source, message = _bad_cases(tmp_path)[case]
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    rc = main(["train", "--preset", "baseline-micro", "--data", source, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0] and "data.source" in err[0], err
    if case not in ("bin not a multiple of its dtype", "ids beyond the vocabulary"):
        rc = main(["data", "prepare", source, "--tokenizer", "byte", "--out", str(tmp_path / "prep")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and message in err[0], err
    assert _snapshot(tmp_path) == before


def test_prepared_tokenizer_mismatch_is_one_line(tmp_path, capsys):
    write_txt(tmp_path / "c.txt", docs_of(40, "x"))
    assert (
        main(
            [
                "data",
                "prepare",
                str(tmp_path / "c.txt"),
                "--tokenizer",
                "bpe",
                "--bpe-vocab-size",
                "300",
                "--out",
                str(tmp_path / "prep"),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    before = _snapshot(tmp_path)
    rc = main(["train", "--preset", "baseline-micro", "--data", str(tmp_path / "prep"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "prepared with tokenizer bpe" in err[0] and "--data.tokenizer" in err[0], err
    assert _snapshot(tmp_path) == before
    dm = DataModule(DataConfig(source=str(tmp_path / "prep"), tokenizer=str(tmp_path / "prep"), seq_len=16))
    assert dm.vocab_size == 300
    # a model's own tokenizer (eval, resume, init-from) cannot be switched: the advice is a corpus made with it
    from nexus.config import RunConfig
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.eval.whole_text import evaluate_source

    cfg = RunConfig()
    cfg.data.source, cfg.data.seq_len = str(tmp_path / "prep"), 16
    for attempt in (
        lambda: DataModule(cfg.data, tokenizer=ByteTokenizer()),
        lambda: evaluate_source(None, cfg, ByteTokenizer(), str(tmp_path / "prep"), "val", 16, 16, 2),
    ):
        with pytest.raises(ConfigError) as e:
            attempt()
        msg = str(e.value)
        assert "model's tokenizer" in msg and "nexus data prepare TEXT --tokenizer CHECKPOINT" in msg, msg
        assert "--data.tokenizer" not in msg


def test_hub_offline_is_one_line_without_retry_noise(tmp_path, capfd):
    """conftest sets HF_DATASETS_OFFLINE=1 / HF_HUB_OFFLINE=1 before datasets is imported; capfd sees
    everything written to the process's stderr, the library's own logging included."""
    assert os.environ["HF_DATASETS_OFFLINE"] == "1"
    rc = main(["data", "prepare", "hf:HuggingFaceFW/fineweb-edu", "--tokenizer", "byte", "--out", str(tmp_path / "o")])
    lines = capfd.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert "hf:HuggingFaceFW/fineweb-edu" in lines[0] and "OFFLINE" in lines[0]
    assert not (tmp_path / "o").exists()
