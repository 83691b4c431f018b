"""The data-source registry (nexus/data/readers/, issue 49 items 2 and 3; issue 50 item 4).

Registry-wide: every registered file format, at each of its suffixes, writes a small generated file (the reader's
own `example`), and `nexus data prepare FILE` and direct training (`nexus train --data FILE`'s DataModule) read the
same tokens, which are the documents written; a format holding token ids is refused by prepare in one line and
read as its ids by training. Every message listing formats names each registered suffix. A new format added as a
new file (tests/fixtures/extension_kinds/tsv_source) is held to the same tests (test_extension_by_new_files.py).
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
from data_helpers import byte_documents

from nexus.cli import main
from nexus.config import DataConfig
from nexus.data.loader import DataModule
from nexus.data.readers import file_readers, readers, valid_sources
from nexus.data.shards import SPLITS, open_prepared, read_manifest
from nexus.data.tokenizer import ByteTokenizer

FORMATS = [(r.name, s) for r in file_readers() for s in r.suffixes]
EOS = ByteTokenizer().eos_id


def generated_documents(n: int = 24) -> list[str]:
    """Documents with non-ASCII text, inner single newlines and different lengths (no blank line inside one)."""
    rng = np.random.default_rng(7)
    words = ["growth", "Ränder", "λ-mixing", "tokens", "naïve", "copy", "RMS", "步骤", "width", "depth"]
    return [
        f"doc {i}: " + " ".join(rng.choice(words, size=int(rng.integers(5, 40)))) + ("\nsecond line" if i % 3 else "")
        for i in range(n)
    ]


def stream_tokens(dm: DataModule) -> dict[str, np.ndarray]:
    return {"train": np.asarray(dm.train.tokens), "val": np.asarray(dm.val.tokens)}


@pytest.mark.parametrize("name,suffix", FORMATS, ids=[f"{n}-{s}" for n, s in FORMATS])
def test_every_registered_format_reads_the_same_tokens_through_prepare_and_training(tmp_path, capsys, name, suffix):
    from nexus.data.readers import reader

    r = reader(name)
    docs = generated_documents()
    f = r.example(tmp_path / f"corpus{suffix}", docs)
    assert f.name.endswith(suffix) and f.is_file()
    direct = DataModule(
        DataConfig(source=str(f), seq_len=16, cache_dir=str(tmp_path / "cache"), num_proc=1), quiet=True
    )
    got = stream_tokens(direct)
    rc = main(
        [
            "data",
            "prepare",
            str(f),
            "--tokenizer",
            "byte",
            "--out",
            str(tmp_path / "prep"),
            "--quiet",
            "--num-proc",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    if r.tokenized:  # ids already: prepare refuses in one line, training reads the file's ids as they are
        assert rc == 2 and len(err) == 1 and "already tokenized" in err[0], err
        assert not (tmp_path / "prep").exists()
        ids = np.concatenate([got["train"], got["val"]])
        assert byte_documents(ids, EOS) == docs
        return
    assert rc == 0, err
    prepared = stream_tokens(DataModule(DataConfig(source=str(tmp_path / "prep"), seq_len=16), quiet=True))
    for split in SPLITS:
        assert np.array_equal(prepared[split], got[split]), split
    pieces = byte_documents(got["train"], EOS) + byte_documents(got["val"], EOS)
    if r.whole_files:  # one file, one document: training holds out its tail, so its two pieces make the file
        assert len(pieces) == 2 and "".join(pieces) == "\n\n".join(docs)
    else:
        assert sorted(pieces) == sorted(docs)


def test_every_registered_file_suffix_is_named_when_a_suffix_is_unknown(tmp_path, capsys):
    (tmp_path / "notes.xyz").write_text("some text\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (
        ["train", "--preset", "baseline-micro", "--data", str(tmp_path / "notes.xyz"), "--out", str(tmp_path / "run")],
        ["data", "prepare", str(tmp_path / "notes.xyz"), "--tokenizer", "byte", "--out", str(tmp_path / "prep")],
    ):
        rc = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "'.xyz'" in err[0], err
        listed = set(re.findall(r"\.[a-z0-9.]*[a-z0-9]", err[0].split("(valid: ")[1]))
        assert {s for _, s in FORMATS} <= listed, listed
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_help_texts_list_the_registered_forms(capsys):
    """`nexus train --help` and `nexus data prepare --help` name every form from the registry (prepare: those
    whose documents it tokenizes); the env entry's DATASET help too."""
    from nexus.cli.env_train import usage

    for argv in (["train", "--help"], ["data", "prepare", "--help"]):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's --help exits 0
            rc = e.code
        assert rc in (0, None), rc
        text = re.sub(r"\s+", "", capsys.readouterr().out)  # argparse wraps lines, at hyphens too
        prepare = argv[0] == "data"
        for r in readers():
            if prepare and not r.documents_to_prepare:
                continue
            named = [r.form] if r.form else list(r.suffixes)
            assert all(re.sub(r"\s+", "", n) in text for n in named), (argv, r.name, named)
        assert re.sub(r"\s+", "", valid_sources(prepare_only=prepare)) in text
    assert valid_sources() in usage()


def test_a_gzip_json_lines_file_is_checked_decompressed(tmp_path, capsys):
    """The UTF-8 pre-check belongs to the text readers: a .jsonl.gz is checked as the text it holds (its
    compressed bytes are not UTF-8, and its documents are read), a damaged or non-UTF-8 one is refused naming it."""
    rows = "".join(json.dumps({"text": f"row {i} ünïcode"}) + "\n" for i in range(30))
    with gzip.open(tmp_path / "good.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(rows)
    (tmp_path / "plain.jsonl").write_text(rows, encoding="utf-8")
    for name in ("good.jsonl.gz", "plain.jsonl"):
        assert (
            main(
                [
                    "data",
                    "prepare",
                    str(tmp_path / name),
                    "--tokenizer",
                    "byte",
                    "--out",
                    str(tmp_path / f"prep-{name}"),
                    "--quiet",
                    "--num-proc",
                    "1",
                ]
            )
            == 0
        )
    a, b = (read_manifest(tmp_path / f"prep-{n}", n) for n in ("good.jsonl.gz", "plain.jsonl"))
    for split in SPLITS:  # the compressed file gives exactly the tokens of the plain one
        assert np.array_equal(
            open_prepared(tmp_path / "prep-good.jsonl.gz", a)[split][0],
            open_prepared(tmp_path / "prep-plain.jsonl", b)[split][0],
        )
    capsys.readouterr()
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(rows.encode())[:-20])
    with gzip.open(tmp_path / "latin.jsonl.gz", "wb") as f:
        f.write(
            "".join(json.dumps({"text": "x"}, ensure_ascii=False) + "\n" for _ in range(3)).encode()
            + bytes(range(0x80, 0xFF)) * 40
        )
    for name, why in (("cut.jsonl.gz", "not a complete gzip file"), ("latin.jsonl.gz", "once decompressed")):
        rc = main(["data", "prepare", str(tmp_path / name), "--tokenizer", "byte", "--out", str(tmp_path / "bad")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and name in err[0] and why in err[0], err
        assert not (tmp_path / "bad").exists()


def test_source_code_is_one_document_per_file_and_never_split_across_train_and_val(tmp_path):
    """Issue 50 item 4: a folder of .py files is prepared (it was refused), each file is one document (blank
    lines inside a file do not cut it), so no file has pieces on both sides of the train/validation split."""
    folder = tmp_path / "repo"
    (folder / "pkg").mkdir(parents=True)
    files = {}
    for i in range(30):
        body = (
            f'def f{i}(x):\n    return x + {i}\n\n\nclass C{i}:\n    """Doc {i}."""\n\n    def m(self):\n'
            f"        return {i} * 2\n"
        )
        p = folder / ("pkg" if i % 2 else ".") / f"mod_{i:02d}.py"
        p.write_text(body)
        files[p.name] = body.strip()
    assert (
        main(
            [
                "data",
                "prepare",
                str(folder),
                "--tokenizer",
                "byte",
                "--out",
                str(tmp_path / "prep"),
                "--quiet",
                "--num-proc",
                "1",
                "--val-fraction",
                "0.3",
            ]
        )
        == 0
    )
    m = read_manifest(tmp_path / "prep", "prep")
    streams = open_prepared(tmp_path / "prep", m)
    sides = {s: byte_documents(np.asarray(streams[s][0]), EOS) for s in SPLITS}
    owner = {text: name for name, text in files.items()}
    assert all(d in owner for s in SPLITS for d in sides[s])  # every document is one whole file
    train, val = ({owner[d] for d in sides[s]} for s in SPLITS)
    assert train and val and not train & val and train | val == set(files)
    assert m["documents"]["train"] + m["documents"]["val"] == len(files)
