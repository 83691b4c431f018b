"""HF interop beyond logits: the byte tokenizer as a tokenizer.json that AutoTokenizer loads (so HF
`generate` runs end to end), any tokenizer.json for training with its own EOS, generation_config.json
kept through import and export, and `nexus export --push-to-hub` (offline failure, local stand-in)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from hf_helpers import load_hf, randomize_, tiny_hf

from nexus.checkpoint import save_checkpoint
from nexus.cli import main
from nexus.config import ConfigError, DataConfig, ModelConfig, RunConfig
from nexus.data.chat import ChatByteTokenizer
from nexus.data.hf_tokenizer import HFTokenizer
from nexus.data.loader import DataModule
from nexus.data.tokenizer import ByteTokenizer
from nexus.models import build_model

TEXT = "héllo wörld\n\t 日本 ok"


def _byte_checkpoint(tmp_path, tokenizer=None, seed=3):
    tok = tokenizer or ByteTokenizer()
    cfg = RunConfig(
        model=ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=2, max_seq_len=64),
        data=DataConfig(seq_len=32),
    )
    torch.manual_seed(seed)
    model = randomize_(build_model(cfg.model), seed, std=0.3).eval()
    return save_checkpoint(tmp_path / "ckpt", model, cfg, tok), model


def test_byte_model_exports_a_tokenizer_and_hf_generate_matches_nexus(tmp_path):
    ckpt, model = _byte_checkpoint(tmp_path)
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (256, 257, 258)
    hf_cfg = json.loads((out / "config.json").read_text())
    assert (hf_cfg["bos_token_id"], hf_cfg["eos_token_id"], hf_cfg["pad_token_id"]) == (256, 257, 258)
    gen = json.loads((out / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (256, 257, 258)
    assert tok(TEXT)["input_ids"] == ByteTokenizer().encode(TEXT)  # token id == UTF-8 byte
    hf = load_hf(out)
    ids = tok("The ", return_tensors="pt")
    got = hf.generate(**ids, max_new_tokens=12, do_sample=False)
    ref = model.generate(torch.tensor([ByteTokenizer().encode("The ")]), max_new_tokens=12, temperature=0)
    assert got.tolist() == ref.tolist()
    new = got[0, 4:].tolist()
    if all(i < 256 for i in new):
        assert tok.decode(new) == ByteTokenizer().decode(new)


def test_exported_byte_tokenizer_imports_back_as_the_byte_tokenizer(tmp_path):
    ckpt, _ = _byte_checkpoint(tmp_path, ChatByteTokenizer())
    out, back = tmp_path / "hf", tmp_path / "back"
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert tok.convert_tokens_to_ids("<|assistant|>") == 260
    assert main(["import", "--hf", str(out), "--out", str(back)]) == 0
    import nexus

    assert type(nexus.load(back).tokenizer) is ChatByteTokenizer


def _bpe_json(tmp_path, specials, name="tok"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        [TEXT, "some more words for merges"] * 5,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=specials,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    d = tmp_path / name
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    return d / "tokenizer.json", tok


@pytest.mark.parametrize("specials,eos", [(["<s>", "</s>", "<unk>"], "</s>"), (["<|endoftext|>"], "<|endoftext|>")])
def test_training_data_takes_the_tokenizers_own_eos(tmp_path, monkeypatch, specials, eos):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    path, tok = _bpe_json(tmp_path, specials)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"document {i} {TEXT}" for i in range(40)))
    dm = DataModule(DataConfig(source=str(corpus), tokenizer=str(path), seq_len=16))
    assert isinstance(dm.tokenizer, HFTokenizer) and dm.tokenizer.eos_id == tok.token_to_id(eos)
    toks = dm.train.tokens.tolist()
    assert toks.count(tok.token_to_id(eos)) >= 30  # one EOS after every training document


def test_tokenizer_config_beside_the_json_names_the_eos(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    path, tok = _bpe_json(tmp_path, ["<|endoftext|>", "<|im_end|>"])
    (path.parent / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"document {i} {TEXT}" for i in range(40)))
    dm = DataModule(DataConfig(source=str(corpus), tokenizer=str(path), seq_len=16))
    assert dm.tokenizer.eos_id == tok.token_to_id("<|im_end|>")


def test_tokenizer_without_any_eos_is_a_one_line_error(tmp_path, capsys):
    path, _ = _bpe_json(tmp_path, ["<unk>"])
    with pytest.raises(ConfigError, match="no end-of-sequence token"):
        DataModule(DataConfig(tokenizer=str(path), seq_len=16))
    rc = main(
        [
            "train",
            "--preset",
            "baseline-micro",
            "--quiet",
            "--data.tokenizer",
            str(path),
            "--train.out_dir",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "data.tokenizer" in err[0]
    assert not (tmp_path / "run").exists()


def test_generation_config_survives_import_and_export(tmp_path):
    hf_dir, ckpt, out = tmp_path / "hf", tmp_path / "ckpt", tmp_path / "out"
    model = tiny_hf("llama", seed=4)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=1, eos_token_id=[2, 7], do_sample=True, temperature=0.6, top_p=0.9, max_new_tokens=33
    )
    model.save_pretrained(hf_dir)
    original = json.loads((hf_dir / "generation_config.json").read_text())
    assert main(["import", "--hf", str(hf_dir), "--out", str(ckpt)]) == 0
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out)]) == 0
    assert json.loads((out / "generation_config.json").read_text()) == original
    loaded = transformers.GenerationConfig.from_pretrained(str(out))
    assert loaded.temperature == 0.6 and loaded.eos_token_id == [2, 7] and loaded.max_new_tokens == 33


class FakeHub:
    """Stand-in for huggingface_hub.HfApi: records what would be created and uploaded."""

    calls: list = []

    def create_repo(self, repo_id, repo_type=None, exist_ok=False, **kw):
        FakeHub.calls.append(("create_repo", repo_id, exist_ok))
        return f"https://hub.example/{repo_id}"

    def upload_folder(self, folder_path, repo_id, repo_type=None, commit_message=None, **kw):
        from pathlib import Path

        FakeHub.calls.append(("upload_folder", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))


def test_push_to_hub_uploads_the_export(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from nexus.hf import hub

    ckpt, _ = _byte_checkpoint(tmp_path)
    FakeHub.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the tests run with it set
    monkeypatch.setattr(hub.socket, "create_connection", lambda *a, **k: __import__("io").BytesIO())
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--push-to-hub", "me/tiny-byte"]) == 0
    assert FakeHub.calls[0] == ("create_repo", "me/tiny-byte", True)
    kind, repo, files = FakeHub.calls[1]
    assert (kind, repo) == ("upload_folder", "me/tiny-byte")
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= set(files)
    assert "pushed to https://hub.example/me/tiny-byte" in capsys.readouterr().out


def test_push_to_hub_offline_fails_before_any_work(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from nexus.hf import hub

    ckpt, _ = _byte_checkpoint(tmp_path)
    FakeHub.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)

    def offline(*a, **k):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(hub.socket, "create_connection", offline)
    monkeypatch.setattr(
        "nexus.cli.export.export_hf_checkpoint", lambda *a, **k: pytest.fail("export ran while offline")
    )
    out = tmp_path / "out"
    for offline_flag, says in ((True, "HF_HUB_OFFLINE is set"), (False, "not reachable")):
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline_flag)
        rc = main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out), "--push-to-hub", "me/x"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "--push-to-hub='me/x'" in err[0] and says in err[0]
        assert not out.exists() and FakeHub.calls == []
    rc = main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--push-to-hub", "bad repo id!!"])
    assert rc == 2 and "not a valid repo id" in capsys.readouterr().err


def test_exported_byte_tokenizer_pads_left_so_batched_hf_generate_matches_one_by_one(tmp_path):
    # Right padding (transformers' default) put pad ids between the short prompt and its continuation.
    ckpt, model = _byte_checkpoint(tmp_path)
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--out", str(out)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert tok.padding_side == "left" and tok.model_max_length == model.cfg.max_seq_len
    hf = load_hf(out)
    prompts = ["The ", "A longer prompt "]
    batch = tok(prompts, return_tensors="pt", padding=True)
    got = hf.generate(**batch, max_new_tokens=8, do_sample=False)[:, batch["input_ids"].shape[1] :]
    for row, prompt in zip(got.tolist(), prompts):
        ref = model.generate(torch.tensor([ByteTokenizer().encode(prompt)]), max_new_tokens=8, temperature=0)
        assert row == ref[0, len(prompt.encode()) :].tolist()
