"""`nexus import` / `nexus export` end to end, and the tokenizers that travel with HF checkpoints."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import transformers
from hf_helpers import VOCAB, load_hf, max_diff, tiny_hf, token_batch

import nexus
from nexus.checkpoint import save_checkpoint
from nexus.cli import main
from nexus.config import ModelConfig, RunConfig
from nexus.data.hf_tokenizer import HFTokenizer
from nexus.data.tokenizer import BPETokenizer
from nexus.hf import import_hf
from nexus.models import build_model

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello nexus",
    "pack my box with five dozen jugs",
] * 5
SAMPLE = "hello quick fox, pack the box"


def hf_style_tokenizer(specials: list[str]):
    """A tiny byte-level BPE trained here, with the special tokens a HF checkpoint would carry."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 30,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=sorted(set("".join(TEXTS))),
    )
    tok.train_from_iterator(TEXTS, trainer)
    assert tok.get_vocab_size() <= VOCAB
    return tok


@pytest.fixture
def hf_dir(tmp_path):
    """A Qwen2-style checkpoint with an HF tokenizer whose end token is <|endoftext|> (not nexus's <eos>)."""
    d = tmp_path / "hf"
    tiny_hf("qwen2", seed=21).save_pretrained(d)
    hf_style_tokenizer(["<|endoftext|>", "<|im_start|>"]).save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "chat_template": "{{ messages }}",
            }
        )
    )
    return d


def test_cli_import_then_export_keeps_logits_and_tokenizer(tmp_path, hf_dir, capsys):
    ckpt, out = tmp_path / "ckpt", tmp_path / "exported"
    assert main(["import", "--hf", str(hf_dir), "--out", str(ckpt), "--verify"]) == 0
    printed = capsys.readouterr().out
    assert "imported Qwen2ForCausalLM" in printed and "max |logit difference|" in printed

    ref_hf = load_hf(hf_dir)
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    model = nexus.load(ckpt)
    assert isinstance(model.tokenizer, HFTokenizer)
    assert model.tokenizer.encode(SAMPLE) == ref_tok(SAMPLE)["input_ids"]
    assert model.tokenizer.eos_id == ref_tok.eos_token_id
    ids = token_batch(seed=9)
    with torch.no_grad():
        assert max_diff(model(ids).logits, ref_hf(ids).logits) < 1e-5

    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["architecture"] == "Qwen2ForCausalLM" and res["tokenizer"] == "tokenizer.json"
    back = load_hf(out)
    back_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    with torch.no_grad():
        assert max_diff(back(ids).logits, ref_hf(ids).logits) < 1e-5
    assert back_tok(SAMPLE)["input_ids"] == ref_tok(SAMPLE)["input_ids"]
    assert back_tok.eos_token == "<|endoftext|>" and back_tok.chat_template == "{{ messages }}"
    assert back.config.eos_token_id == ref_tok.eos_token_id


def test_tokenizer_with_nexus_specials_is_a_plain_bpe_tokenizer(tmp_path):
    tiny_hf("llama", seed=1).save_pretrained(tmp_path)
    hf_style_tokenizer(["<bos>", "<eos>", "<pad>"]).save(str(tmp_path / "tokenizer.json"))
    model, cfg = import_hf(tmp_path)
    assert type(model.tokenizer) is BPETokenizer
    assert model.tokenizer.eos_id == model.tokenizer.tok.token_to_id("<eos>")


def test_checkpoint_without_tokenizer_uses_bytes(tmp_path, capsys):
    tiny_hf("llama", seed=1).save_pretrained(tmp_path / "hf")
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["tokenizer"] == "byte" and any("byte tokenizer" in n for n in res["notes"])
    assert nexus.load(tmp_path / "ck").tokenizer.kind == "byte"


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    assert main(["import", "--hf", str(tmp_path / "nope"), "--out", str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hf=" in err
    assert not (tmp_path / "ck").exists()

    cfg = RunConfig(model=ModelConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=64))
    cfg.model.attention.gate = "headwise"
    cfg.data.seq_len = 32
    save_checkpoint(tmp_path / "gated", build_model(cfg.model), cfg)
    assert (
        main(["export", "--checkpoint", str(tmp_path / "gated"), "--format", "hf", "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.attention" in err
    assert not (tmp_path / "o").exists()

    assert (
        main(["export", "--checkpoint", str(tmp_path / "gated"), "--format", "onnx", "--out", str(tmp_path / "o")]) == 2
    )
    assert "invalid choice: 'onnx'" in capsys.readouterr().err


def test_ternary_format_without_exporter_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "nexus.export.ternary", None)  # import now raises ImportError
    assert (
        main(
            ["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "ternary", "--out", str(tmp_path / "t.bin")]
        )
        == 2
    )
    assert "--format=ternary is not available" in capsys.readouterr().err


def test_ternary_format_dispatches_to_exporter(tmp_path, capsys, monkeypatch):
    calls = []
    fake = type(sys)("nexus.export.ternary")
    fake.export_ternary = lambda ckpt, out, packing: calls.append((ckpt, out, packing)) or {"file": out, "bytes": 123}
    monkeypatch.setitem(sys.modules, "nexus.export.ternary", fake)
    assert (
        main(
            [
                "export",
                "--checkpoint",
                str(tmp_path / "c"),
                "--format",
                "ternary",
                "--out",
                str(tmp_path / "t.bin"),
                "--json",
            ]
        )
        == 0
    )
    assert calls == [(str(tmp_path / "c"), str(tmp_path / "t.bin"), "2bit")]
    assert json.loads(capsys.readouterr().out) == {"file": str(tmp_path / "t.bin"), "bytes": 123}


def test_damaged_stored_hf_tokenizer_is_a_clear_error(tmp_path, hf_dir):
    from nexus.config import ConfigError

    assert main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 0
    (tmp_path / "ck" / "hf_tokenizer_meta.json").write_text("{broken")
    with pytest.raises(ConfigError, match="hf_tokenizer_meta.json.*corrupted"):
        nexus.load(tmp_path / "ck")  # the checksum in meta.json catches it first
    with pytest.raises(ConfigError, match="tokenizer in .* is damaged"):
        HFTokenizer.load_dir(tmp_path / "ck")


@pytest.mark.parametrize(
    "ids",
    [
        {},  # transformers' defaults: no special ids at all
        {"bos_token_id": 1, "eos_token_id": [2, 5], "pad_token_id": 0},
    ],
)
def test_small_vocab_import_without_tokenizer_exports_back_and_verifies(tmp_path, capsys, ids):
    """A HF model with 97 tokens and no tokenizer.json: the checkpoint falls back to the byte tokenizer
    (ids up to 258), which must not reach the export; the model's own special ids must."""
    hf_dir, ckpt, out = tmp_path / "hf", tmp_path / "ck", tmp_path / "o"
    original = tiny_hf("qwen3", seed=0, **ids)
    original.save_pretrained(hf_dir)
    assert main(["import", "--hf", str(hf_dir), "--out", str(ckpt), "--verify"]) == 0
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out), "--verify", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["max_logit_diff"] < 1e-5 and res["tokenizer"] == "none"
    assert not (out / "tokenizer.json").exists()  # the byte fallback is not this model's tokenizer
    written = json.loads((out / "config.json").read_text())
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert written[name] == ids.get(name), name
    back = load_hf(out)
    tokens = token_batch(seed=3)
    with torch.no_grad():
        assert max_diff(back(tokens).logits, original(tokens).logits) < 1e-5


def _tiny_byte_checkpoint(path):
    """A baseline checkpoint with 97 embedding rows but the byte tokenizer (ids up to 258)."""
    from nexus.data.tokenizer import ByteTokenizer

    cfg = RunConfig(model=ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=64))
    cfg.data.seq_len = 32
    save_checkpoint(path, build_model(cfg.model), cfg, ByteTokenizer())


def test_export_with_special_ids_outside_the_vocabulary_exits_2_and_writes_nothing(tmp_path, capsys):
    _tiny_byte_checkpoint(tmp_path / "ck")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert (
        main(
            ["export", "--checkpoint", str(tmp_path / "ck"), "--format", "hf", "--out", str(tmp_path / "o"), "--verify"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bos_token_id=256" in err and "0..96" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no temporary directory


@pytest.mark.parametrize("fault", ["unloadable", "wrong_logits"])
def test_export_failing_verification_is_an_error_and_leaves_no_output(tmp_path, capsys, monkeypatch, fault):
    """An export that `transformers` cannot load, or that loads with other logits, is our fault (the input
    was checked): RuntimeError, and --out keeps what it held before (nothing, or the previous export)."""
    import nexus.hf.convert as convert

    tiny_hf("qwen3", seed=2).save_pretrained(tmp_path / "hf")
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck")]) == 0
    export = ["export", "--checkpoint", str(tmp_path / "ck"), "--format", "hf", "--verify"]
    assert main(export + ["--out", str(tmp_path / "prev")]) == 0
    previous = {p.name: p.read_bytes() for p in (tmp_path / "prev").iterdir()}
    if fault == "unloadable":  # an invalid special id slipping past the check: nn.Embedding refuses its padding_idx
        real = convert.hf_config_from_model

        def bad_config(mcfg, arch, special):
            hf_cfg = real(mcfg, arch, special)
            hf_cfg.pad_token_id = mcfg.vocab_size + 5
            return hf_cfg

        monkeypatch.setattr(convert, "hf_config_from_model", bad_config)
        match = "does not load in transformers"
    else:  # a wrong weight mapping
        real_state = convert.nexus_state_to_hf
        monkeypatch.setattr(
            convert,
            "nexus_state_to_hf",
            lambda *a: {k: v * 1.5 if "embed" in k else v for k, v in real_state(*a).items()},
        )
        match = "logits differ"
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RuntimeError, match=match):
        main(export + ["--out", str(tmp_path / "o")])
    with pytest.raises(RuntimeError, match=match):
        main(export + ["--out", str(tmp_path / "prev"), "--overwrite"])
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no "o", no temporary directory
    assert {p.name: p.read_bytes() for p in (tmp_path / "prev").iterdir()} == previous


def _saved_with_other_rope_theta(real_write):
    """write_checkpoint_files that stores a wrong rope_theta: the model in memory is right, the checkpoint is not."""
    import copy

    def write(d, cfg, *rest):
        cfg = copy.deepcopy(cfg)
        cfg.model.rope_theta *= 3
        return real_write(d, cfg, *rest)

    return write


@pytest.mark.parametrize("fault", ["wrong_weights", "wrong_saved_config"])
def test_import_failing_verification_is_an_error_and_leaves_out_as_it_was(tmp_path, capsys, monkeypatch, fault):
    """An import whose checkpoint gives other logits than the HF model is our fault (the input was
    checked): RuntimeError, and --out keeps what it held before (nothing, or the previous import), with
    no temporary directory left beside it."""
    import nexus.checkpoint as checkpoint
    import nexus.hf.convert as convert

    tiny_hf("qwen3", seed=4).save_pretrained(tmp_path / "hf")
    imp = ["import", "--hf", str(tmp_path / "hf"), "--verify"]
    assert main(imp + ["--out", str(tmp_path / "prev")]) == 0
    previous = {p.name: p.read_bytes() for p in (tmp_path / "prev").iterdir()}
    if fault == "wrong_weights":  # a wrong weight mapping
        real_state = convert.hf_state_to_nexus
        monkeypatch.setattr(
            convert,
            "hf_state_to_nexus",
            lambda *a: {k: v * 1.5 if "embed" in k else v for k, v in real_state(*a).items()},
        )
    else:  # the model in memory is right but what is saved is not: only a check of the written checkpoint sees it
        monkeypatch.setattr(
            checkpoint, "write_checkpoint_files", _saved_with_other_rope_theta(checkpoint.write_checkpoint_files)
        )
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RuntimeError, match="logits differ"):
        main(imp + ["--out", str(tmp_path / "o")])
    with pytest.raises(RuntimeError, match="logits differ"):
        main(imp + ["--out", str(tmp_path / "prev"), "--overwrite"])
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no "o", no temporary directory
    assert {p.name: p.read_bytes() for p in (tmp_path / "prev").iterdir()} == previous


def test_import_verify_of_a_hf_directory_transformers_cannot_load_exits_2_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    """--verify needs transformers to load --hf; when it cannot, that is the input's problem: one line, exit 2,
    and it is found before anything is written."""
    tiny_hf("llama", seed=5).save_pretrained(tmp_path / "hf")

    def refuse(*a, **k):
        raise ValueError("Unrecognized configuration class\nsecond line")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    capsys.readouterr()  # save_pretrained's progress bar
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck"), "--verify"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hf=" in err and "ValueError: Unrecognized configuration class" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_import_verify_checks_the_written_checkpoint_and_reports_its_difference(tmp_path, capsys):
    """A normal --verify import: exit 0, the difference printed is that of the checkpoint as saved
    (reloaded here and compared with the HF model on the same batch)."""
    hf_dir = tmp_path / "hf"
    original = tiny_hf("llama", seed=6)
    original.save_pretrained(hf_dir)
    assert main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck"), "--verify", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 <= res["max_logit_diff"] < 1e-5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "hf"]
    ids = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(0))  # --verify's batch
    with torch.no_grad():
        assert max_diff(nexus.load(tmp_path / "ck")(ids).logits, original(ids).logits) == pytest.approx(
            res["max_logit_diff"], abs=1e-7
        )


def test_verify_does_not_leak_transformers_progress_bar(tmp_path, hf_dir, capfd):
    """Issue 40 item 11: `export --format hf --verify` printed transformers' `Loading weights: 100%` bar."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "exported"
    assert main(["import", "--hf", str(hf_dir), "--out", str(ckpt), "--verify"]) == 0
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out), "--verify"]) == 0
    printed = capfd.readouterr()
    assert "max |logit difference|" in printed.out
    assert "Loading weights" not in printed.err + printed.out
    assert transformers.utils.logging.is_progress_bar_enabled()  # switched off for the load only
