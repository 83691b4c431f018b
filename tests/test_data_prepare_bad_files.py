"""`nexus data prepare` on a real folder: every bad file named at once, --skip-bad, --document-per-file, a rerun on
a finished directory says so, and a changed setting is refused naming it (old -> new)."""

import json
from pathlib import Path

import numpy as np
from data_helpers import byte_documents

from nexus.cli import main
from nexus.data.tokenizer import ByteTokenizer

EOS = ByteTokenizer().eos_id


def _folder(root: Path, n_good: int = 4) -> list[str]:
    """n_good files of two paragraphs each plus an empty, a binary and a Latin-1 file; -> the good files' texts."""
    root.mkdir()
    texts = []
    for i in range(n_good):
        text = f"file {i}, first paragraph, " + "words " * (5 + i) + f"\n\nfile {i}, second paragraph, the end"
        (root / f"good{i}.txt").write_text(text)
        texts.append(text)
    (root / "empty.txt").write_bytes(b"")
    (root / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.txt").write_bytes("café à la crème, naïve résumé".encode("latin-1"))
    return texts


def _run(capsys, *argv) -> tuple[int, list[str]]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err.strip().splitlines()


def _documents(prep: Path) -> list[str]:
    """Every document of a prepared byte corpus (both splits), decoded."""
    m = json.loads((prep / "manifest.json").read_text())
    ids = np.concatenate(
        [np.fromfile(prep / e["file"], dtype=m["dtype"]) for s in ("train", "val") for e in m["shards"][s]]
    ).tolist()
    return byte_documents(ids, EOS)


def test_every_bad_file_is_named_in_one_line_and_nothing_is_written(tmp_path, capsys):
    _folder(tmp_path / "corpus")
    rc, err = _run(
        capsys, "data", "prepare", str(tmp_path / "corpus"), "--tokenizer", "byte", "--out", str(tmp_path / "prep")
    )
    assert rc == 2 and len(err) == 1, err
    for name, why in (("empty.txt", "is empty"), ("image.txt", "looks binary"), ("latin1.txt", "is not UTF-8")):
        assert f"{name}' {why}" in err[0], err
    assert "3 bad file(s)" in err[0] and "--skip-bad" in err[0] and not (tmp_path / "prep").exists()
    rc, err = _run(
        capsys,
        "train",
        "--preset",
        "baseline-micro",
        "--data",
        str(tmp_path / "corpus"),
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "run"),
    )
    assert rc == 2 and len(err) == 1 and "3 bad file(s)" in err[0], err


def test_skip_bad_leaves_them_out_with_a_count(tmp_path, capsys):
    texts = _folder(tmp_path / "corpus")
    rc, err = _run(
        capsys,
        "data",
        "prepare",
        str(tmp_path / "corpus"),
        "--tokenizer",
        "byte",
        "--out",
        str(tmp_path / "prep"),
        "--skip-bad",
        "--num-proc",
        "1",
    )
    assert rc == 0 and any("--skip-bad left out 3 bad file(s)" in ln for ln in err), err
    want = [p.strip() for t in texts for p in t.split("\n\n")]  # blank-line separated documents of the good files only
    assert sorted(_documents(tmp_path / "prep")) == sorted(want)


def test_document_per_file(tmp_path, capsys):
    texts = _folder(tmp_path / "corpus")
    rc, err = _run(
        capsys,
        "data",
        "prepare",
        str(tmp_path / "corpus"),
        "--tokenizer",
        "byte",
        "--out",
        str(tmp_path / "prep"),
        "--skip-bad",
        "--document-per-file",
        "--num-proc",
        "1",
    )
    assert rc == 0, err
    assert sorted(_documents(tmp_path / "prep")) == sorted(texts)  # one document per file, paragraphs kept together
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"text": "a row"}) + "\n")
    rc, err = _run(
        capsys,
        "data",
        "prepare",
        str(rows),
        "--tokenizer",
        "byte",
        "--out",
        str(tmp_path / "p2"),
        "--document-per-file",
    )
    assert rc == 2 and len(err) == 1 and "document_per_file" in err[0] and not (tmp_path / "p2").exists(), err


def test_rerun_says_already_prepared_and_a_changed_setting_is_named(tmp_path, capsys):
    _folder(tmp_path / "corpus")
    cmd = [
        "data",
        "prepare",
        str(tmp_path / "corpus"),
        "--tokenizer",
        "byte",
        "--out",
        str(tmp_path / "prep"),
        "--skip-bad",
        "--num-proc",
        "1",
    ]
    assert _run(capsys, *cmd)[0] == 0
    m = json.loads((tmp_path / "prep" / "manifest.json").read_text())
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "prep").iterdir()}
    rc, err = _run(capsys, *cmd)
    files = len(m["shards"]["train"]) + len(m["shards"]["val"])
    line = (
        f"already prepared in {tmp_path / 'prep'} ({m['tokens']['train']:,} train + {m['tokens']['val']:,} "
        f"validation tokens, {files} shard files)"
    )
    assert rc == 0 and sum(line in ln for ln in err) == 1, err
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "prep").iterdir()} == before
    for extra, named in (
        (["--shard-mb", "2"], "--shard-mb 8 -> 2"),
        (["--val-fraction", "0.2"], "--val-fraction 0.05 -> 0.2"),
        (["--document-per-file"], "--document-per-file off -> on"),
    ):
        rc, err = _run(capsys, *cmd, *extra)
        assert rc == 2 and named in err[-1] and "prepared with other settings" in err[-1], err
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "prep").iterdir()} == before
