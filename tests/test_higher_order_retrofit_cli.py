"""`nexus grow --retrofit higher-order ...` then `nexus train --resume`, and the exit-2 path for a
checkpoint that is not a Transformer (nothing written)."""

from __future__ import annotations

from nexus.models import build_model
from nexus.presets import get_preset


def _nexus(*args) -> int:
    from nexus.cli import main

    return main([str(a) for a in args])  # in-process: the same code path as the console script, minus the start-up


def test_cli_grow_retrofit_then_resume_training(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert (
        _nexus(
            "train",
            "--preset",
            "baseline-micro",
            "--train.steps",
            "4",
            "--train.eval_every",
            "0",
            "--train.eval_batches",
            "1",
            "--train.sample_tokens",
            "4",
            "--train.out_dir",
            a,
        )
        == 0
    )
    assert (
        _nexus(
            "grow",
            "--checkpoint",
            a / "checkpoint",
            "--out",
            b,
            "--retrofit",
            "higher-order",
            "--order",
            "2",
            "--lossless",
        )
        == 0
    )
    from nexus.checkpoint import load_checkpoint

    _, grown_cfg, _ = load_checkpoint(b)
    assert grown_cfg.model.attention.order == 2 and grown_cfg.model.attention.ho_gate
    assert (
        _nexus(
            "train",
            "--resume",
            b,
            "--train.steps",
            "7",
            "--train.out_dir",
            c,
            "--train.eval_every",
            "0",
            "--train.eval_batches",
            "1",
            "--train.sample_tokens",
            "4",
        )
        == 0
    )
    model, cfg, _ = load_checkpoint(c / "checkpoint")
    assert cfg.model.attention.order == 2
    assert any(p.abs().max() > 0 for n, p in model.named_parameters() if ".ho_gate." in n)  # fine-tuned gates


def test_cli_retrofit_of_a_non_transformer_exits_2_and_writes_nothing(tmp_path, capsys):
    from nexus.checkpoint import save_checkpoint

    cfg = get_preset("baseline-micro")
    cfg.model.arch = "recurrent"
    cfg.model.arch.n_sup, cfg.model.arch.t_inner = 1, 1
    cfg.validate()
    from nexus.data.tokenizer import ByteTokenizer

    save_checkpoint(tmp_path / "rec", build_model(cfg.model), cfg, ByteTokenizer(), None)
    out = tmp_path / "out"
    assert _nexus("grow", "--checkpoint", tmp_path / "rec", "--out", out, "--retrofit", "higher-order") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arch" in err[0]
    assert not out.exists()
