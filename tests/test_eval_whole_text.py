"""Whole-text evaluation: every token scored once, bits per byte against hand computations (uniform
model; direct full forward; per-token sliding context), `nexus eval --data` on text and prepared data."""

import json
import math

import pytest
import torch

from nexus.checkpoint import save_checkpoint
from nexus.cli import main
from nexus.data.tokenizer import BPETokenizer
from nexus.eval.whole_text import IGNORE, document_windows, score, text_documents
from nexus.models import build_model
from nexus.presets import get_preset

DOCS = [
    "The cat sat on the mat. " * 6 + "Ünïcödé ✓ bytes.",
    "short one",
    ("A third document, of middling length. " * 3).strip(),
]


def tiny(vocab):
    cfg = get_preset("baseline-micro")
    cfg.model.vocab_size, cfg.model.d_model = vocab, 32
    torch.manual_seed(0)
    return cfg, build_model(cfg.model).eval()


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(DOCS * 5, 300)


def test_windows_score_every_token_once_with_at_most_window_inputs():
    ids = list(range(10, 33))  # 23 tokens
    for window, stride in ((8, 8), (8, 3), (30, 30), (5, 1)):
        targets = []
        for x, y in document_windows(ids, 0, window, stride):
            assert len(x) == len(y) <= window
            seq = [0] + ids
            assert all(t == IGNORE or t == seq[seq.index(x[0]) + i + 1] for i, t in enumerate(y))
            targets += [t for t in y if t != IGNORE]
        assert targets == ids, (window, stride)
    # disjoint windows of 8: inputs start at the prefix, then at the token before each new chunk; the last
    # one predicts 7 tokens and, as lm-eval's rolling windows do, fills its input with earlier context
    got = list(document_windows(ids, 0, 8, 8))
    assert [x for x, _ in got] == [[0] + ids[:7], ids[7:15], ids[14:22]]
    assert got[2][1] == [IGNORE] + ids[16:23]


def test_bits_per_byte_of_a_uniform_model_is_tokens_times_log2_vocab_over_bytes(tok):
    cfg, model = tiny(tok.vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # every logit 0: each token costs ln(V) nats
    res = score(model, text_documents(DOCS, tok), tok.eos_id, window=16, stride=16, batch_size=3)
    n_tok = sum(len(tok.encode(d)) for d in DOCS)
    n_bytes = sum(len(d.encode("utf-8")) for d in DOCS)
    assert n_tok != n_bytes  # BPE: tokens and bytes differ, so the ratio matters
    assert res["tokens"] == n_tok and res["bytes"] == n_bytes
    assert res["bits_per_byte"] == pytest.approx(n_tok * math.log2(tok.vocab_size) / n_bytes, rel=1e-6)
    assert res["loss"] == pytest.approx(math.log(tok.vocab_size), rel=1e-6)
    words = sum(len(d.split()) for d in DOCS)  # no leading/trailing whitespace: split() == re.split(r"\s+")
    assert res["word_perplexity"] == pytest.approx(math.exp(n_tok * math.log(tok.vocab_size) / words), rel=1e-5)


def hand_nll(model, seq, context):
    """Sum over targets j >= 1 of -log p(seq[j] | the last `context` tokens before it), one forward each."""
    total = 0.0
    with torch.no_grad():
        for j in range(1, len(seq)):
            x = torch.tensor([seq[max(0, j - context) : j]])
            total -= float(torch.log_softmax(model(x).logits[0, -1].double(), -1)[seq[j]])
    return total


def test_bits_per_byte_matches_a_hand_computation(tok):
    cfg, model = tiny(tok.vocab_size)
    docs = DOCS[:2]
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    seqs = [[tok.eos_id] + tok.encode(d) for d in docs]
    # one window longer than every document: each token sees its whole document (prefix included)
    res = score(model, text_documents(docs, tok), tok.eos_id, window=64, stride=64, batch_size=2)
    want = sum(hand_nll(model, s, 10**6) for s in seqs)
    assert res["bits_per_byte"] == pytest.approx(want / math.log(2) / n_bytes, rel=1e-5)
    # stride 1: every token conditioned on exactly the previous `window` tokens
    res = score(model, text_documents(docs, tok), tok.eos_id, window=6, stride=1, batch_size=5)
    want = sum(hand_nll(model, s, 6) for s in seqs)
    assert res["bits_per_byte"] == pytest.approx(want / math.log(2) / n_bytes, rel=1e-5)
    assert res["windows"] == "sliding"


def test_eval_cli_scores_whole_text_and_prepared_val_alike(tmp_path, tok, capsys):
    cfg, model = tiny(tok.vocab_size)
    cfg.data.tokenizer, cfg.data.seq_len = "bpe", 32
    save_checkpoint(tmp_path / "ckpt", model, cfg, tok)
    text = "\n\n".join(f"doc {i}: " + DOCS[i % 3] for i in range(40))
    (tmp_path / "t.txt").write_text(text)
    assert main(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--data", str(tmp_path / "t.txt"), "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["documents"] == 40 and whole["bytes"] == sum(len(d.encode()) for d in text.split("\n\n"))
    assert whole["windows"] == "disjoint" and whole["window"] == 32
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(tmp_path / "ckpt"),
                "--data",
                str(tmp_path / "t.txt"),
                "--split",
                "val",
                "--json",
            ]
        )
        == 0
    )
    val = json.loads(capsys.readouterr().out)
    assert val["documents"] == 2  # round(40 * 0.05)
    assert (
        main(
            [
                "data",
                "prepare",
                str(tmp_path / "t.txt"),
                "--tokenizer",
                str(tmp_path / "ckpt"),
                "--out",
                str(tmp_path / "prep"),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(tmp_path / "ckpt"),
                "--data",
                str(tmp_path / "prep"),
                "--split",
                "val",
                "--json",
            ]
        )
        == 0
    )
    prep = json.loads(capsys.readouterr().out)
    assert prep["bytes"] == val["bytes"] and prep["tokens"] == val["tokens"]
    assert prep["bits_per_byte"] == pytest.approx(val["bits_per_byte"], rel=1e-6)
    assert (
        main(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--data", str(tmp_path / "t.txt"), "--stride", "8"]) == 0
    )
    line = capsys.readouterr().out
    assert "bits per byte" in line and "sliding windows of 32 tokens, stride 8" in line


def test_eval_scores_a_folder_of_nanogpt_token_files_in_nats_per_token(tmp_path, tok, capsys):
    """Issue 50 item 3: `--split val` on a folder of .bin was refused ("bits per byte need byte counts")."""
    import numpy as np

    cfg, model = tiny(tok.vocab_size)
    folder = tmp_path / "bins"
    folder.mkdir()
    train_docs, val_docs = [DOCS[0], DOCS[2]] * 3, DOCS[1:]
    streams = {}
    for name, docs in (("train", train_docs), ("val", val_docs)):
        ids = [t for d in docs for t in tok.encode(d) + [tok.eos_id]]  # nanoGPT's layout: EOS after each document
        np.asarray(ids, dtype=np.uint16).tofile(folder / f"{name}.bin")
        streams[name] = ids
    cfg.data.tokenizer, cfg.data.seq_len, cfg.data.source = "bpe", 32, str(folder)
    save_checkpoint(tmp_path / "ckpt", model, cfg, tok)
    ckpt = str(tmp_path / "ckpt")
    # the run's own data, its validation file whole: the command
    assert main(["eval", "--checkpoint", ckpt, "--split", "val", "--json"]) == 0
    val = json.loads(capsys.readouterr().out)
    seqs = [[tok.eos_id] + tok.encode(d) for d in val_docs]
    want = sum(hand_nll(model, s, 32) for s in seqs) / sum(len(s) - 1 for s in seqs)
    assert val["tokens"] == sum(len(s) - 1 for s in seqs) and val["loss"] == pytest.approx(want, rel=1e-5)
    assert val["bits_per_byte"] is None and val["bytes"] is None and val["loss_unit"] == "nats per token"
    assert main(["eval", "--checkpoint", ckpt, "--data", str(folder), "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["tokens"] == sum(1 for t in streams["train"] + streams["val"] if t != tok.eos_id)
    # val.bin named alone is the held-out file itself, scored as above
    assert main(["eval", "--checkpoint", ckpt, "--data", str(folder / "val.bin")]) == 0
    line = capsys.readouterr().out
    assert f"loss {val['loss']:.4f} nats per token" in line and "bits per byte: not computed" in line
