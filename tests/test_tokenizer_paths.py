"""One rule for what tokenizer a path holds (data/tokenizer_files.load_tokenizer): --data.tokenizer on a prepared
byte corpus (tokenizer.txt), `nexus import` and --init-from of an HF export agree on nexus's byte tokenizer."""

from pathlib import Path

import pytest

from nexus.checkpoint import save_checkpoint
from nexus.cli import main
from nexus.config import ConfigError, ModelConfig, RunConfig
from nexus.data.chat import ChatByteTokenizer
from nexus.data.tokenizer import ByteTokenizer
from nexus.data.tokenizer_files import load_tokenizer
from nexus.models import build_model


def _corpus(path: Path) -> Path:
    path.write_text("\n\n".join(f"document {i}: " + "plain words, and more of them " * 8 for i in range(40)))
    return path


def test_train_on_a_byte_prepared_corpus_with_its_directory_as_tokenizer(tmp_path, capsys):
    prep = tmp_path / "prep"
    assert (
        main(
            ["data", "prepare", str(_corpus(tmp_path / "c.txt")), "--tokenizer", "byte", "--out", str(prep), "--quiet"]
        )
        == 0
    )
    assert (prep / "tokenizer.txt").is_file() and not (prep / "tokenizer.json").exists()
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--data",
            str(prep),
            "--data.tokenizer",
            str(prep),
            "--data.seq_len",
            "32",
            "--train.steps",
            "1",
            "--train.out_dir",
            str(tmp_path / "run"),
        ]
    )
    out = "".join(capsys.readouterr())
    assert rc == 0 and "tokenizer byte" in out, out


def test_tokenizer_paths_name_what_they_hold(tmp_path):
    (tmp_path / "b").mkdir()
    ByteTokenizer().save(tmp_path / "b")
    (tmp_path / "bc").mkdir()
    ChatByteTokenizer().save(tmp_path / "bc")
    assert type(load_tokenizer(tmp_path / "b")) is ByteTokenizer
    assert type(load_tokenizer(tmp_path / "b" / "tokenizer.txt")) is ByteTokenizer
    assert type(load_tokenizer(tmp_path / "bc")) is ChatByteTokenizer
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no tokenizer.*tokenizer.txt"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.txt").write_text("sentencepiece\n")
    with pytest.raises(ConfigError, match="'byte' or 'byte_chat'"):
        load_tokenizer(tmp_path / "bad")


def test_import_and_init_from_agree_on_an_exported_byte_model(tmp_path, capsys):
    cfg = RunConfig(model=ModelConfig(vocab_size=259, d_model=32, n_layers=1, n_heads=2, max_seq_len=64))
    cfg.data.seq_len = 32
    save_checkpoint(tmp_path / "ck", build_model(cfg.model), cfg, ByteTokenizer())
    assert (
        main(
            ["export", "--checkpoint", str(tmp_path / "ck"), "--format", "hf", "--out", str(tmp_path / "hf"), "--json"]
        )
        == 0
    )
    assert type(load_tokenizer(tmp_path / "hf")) is ByteTokenizer  # the path --init-from's config names
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "imp"), "--json"]) == 0
    assert '"tokenizer": "byte"' in capsys.readouterr().out
    prep = tmp_path / "prep"
    assert (
        main(
            ["data", "prepare", str(_corpus(tmp_path / "c.txt")), "--tokenizer", "byte", "--out", str(prep), "--quiet"]
        )
        == 0
    )
    capsys.readouterr()
    for extra in ([], ["--data.tokenizer", str(prep)]):  # without a flag, and with the one the docs give
        rc = main(
            [
                "train",
                "--init-from",
                str(tmp_path / "hf"),
                "--data",
                str(prep),
                *extra,
                "--data.seq_len",
                "32",
                "--train.steps",
                "1",
                "--train.out_dir",
                str(tmp_path / f"run{len(extra)}"),
            ]
        )
        out = "".join(capsys.readouterr())
        assert rc == 0 and "tokenizer byte" in out, out
