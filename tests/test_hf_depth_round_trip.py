"""Issue 48 item 5: a Llama-style HF model imported with `nexus import`, depth-grown with `--depth.init zero`,
keeps HF's logits; it continues training, and `nexus export --format hf` writes a model transformers loads with
the new layer count, computing what the trained nexus checkpoint computes."""

from __future__ import annotations

import json

import torch
from hf_helpers import VOCAB, load_hf, max_diff, tiny_hf, token_batch
from test_hf_cli import hf_style_tokenizer

import nexus
from nexus.cli import main


def test_an_imported_llama_grows_deeper_keeps_hf_logits_trains_and_exports_with_the_new_layer_count(tmp_path, capsys):
    hf_dir, ckpt, grown, run, out = (tmp_path / n for n in ("hf", "ck", "grown", "run", "exported"))
    original = tiny_hf("llama", seed=5)  # 2 layers, GQA, untied head
    original.save_pretrained(hf_dir)
    hf_style_tokenizer(["<|endoftext|>"]).save(str(hf_dir / "tokenizer.json"))
    (hf_dir / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"})
    )
    assert main(["import", "--hf", str(hf_dir), "--out", str(ckpt)]) == 0
    assert (
        main(
            [
                "grow",
                "--checkpoint",
                str(ckpt),
                "--out",
                str(grown),
                "--depth.layers",
                "4",
                "--depth.init",
                "zero",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["verify"]["max_abs_dlogits"] == 0.0
    ids = token_batch(seed=4)
    imported, deeper = nexus.load(ckpt).eval(), nexus.load(grown).eval()
    assert len(deeper.layers) == 4
    with torch.no_grad():
        assert torch.equal(deeper(ids).logits, imported(ids).logits)  # the growth itself: exact
        assert max_diff(deeper(ids).logits, original(ids).logits) < 1e-5  # and so HF's, to the import's rounding

    assert (
        main(
            [
                "train",
                "--init-from",
                str(grown),
                "--data.seq_len",
                "32",
                "--train.steps",
                "3",
                "--train.batch_size",
                "2",
                "--train.eval_every",
                "0",
                "--train.sample_tokens",
                "1",
                "--out",
                str(run),
                "--quiet",
            ]
        )
        == 0
    )
    trained = nexus.load(run / "checkpoint").eval()
    assert len(trained.layers) == 4
    with torch.no_grad():  # the new blocks trained away from zero
        assert any(float(trained.layers[k].attn.o_proj.weight.abs().max()) > 0 for k in (1, 3))
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run / "checkpoint"), "--format", "hf", "--out", str(out), "--json"]) == 0
    back = load_hf(out)
    assert back.config.num_hidden_layers == 4 and type(back).__name__ == "LlamaForCausalLM"
    assert back.config.vocab_size == VOCAB
    with torch.no_grad():
        assert max_diff(back(ids).logits, trained(ids).logits) < 1e-4
