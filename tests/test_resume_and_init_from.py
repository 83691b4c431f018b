"""`nexus train --resume` keeps what the user says or refuses with one line (issue 24.1), and
`nexus train --init-from` starts a new run from a checkpoint's weights only (issue 24.2)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from nexus.checkpoint import load_checkpoint
from nexus.cli import main

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "2",
    "--train.sample_tokens",
    "4",
    "--train.log_every",
    "1",
    "--train.warmup_steps",
    "1",
]


def snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(root).rglob("*"))
    }


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def recorded(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 4-step run with a step checkpoint at 2."""
    out = tmp_path_factory.mktemp("runs") / "base"
    assert main(["train", *MICRO, "--train.steps", "4", "--train.save_every", "2", "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture
def copy(base, tmp_path):
    r = tmp_path / "r"
    shutil.copytree(base, r)
    return r


def resume(run: Path, *args) -> int:
    return main(["train", "--resume", str(run / "step_0000002"), "--quiet", *map(str, args)])


# ----------------------------------------------------------------------------- honoured on resume
def test_resume_honours_a_new_data_source_and_sequence_length(copy, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document {i}: " + "zebra quartz " * 40 for i in range(30)))
    assert resume(copy, "--data", corpus, "--data.seq_len", "16") == 0
    cfg = recorded(copy)
    assert cfg["data"]["source"] == str(corpus) and cfg["data"]["seq_len"] == 16
    # the steps after the resume trained on 16-token windows of the new corpus: 2 x 16 loss tokens each
    assert {r["step"]: r["tokens"] for r in records(copy) if "loss" in r} == {1: 64, 2: 64, 3: 32, 4: 32}
    assert load_checkpoint(copy / "checkpoint")[1].data.source == str(corpus)


def test_resume_honours_steps_and_an_explicit_schedule_horizon(copy):
    assert resume(copy, "--train.steps", "6", "--train.schedule_steps", "6") == 0
    cfg = recorded(copy)
    assert (cfg["train"]["steps"], cfg["train"]["schedule_steps"]) == (6, 6)
    assert [r["step"] for r in records(copy) if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_resume_honours_logging_eval_and_save_cadence(copy):
    assert (
        resume(
            copy,
            "--train.steps",
            "8",
            "--train.log_every",
            "3",
            "--train.eval_every",
            "3",
            "--train.save_every",
            "3",
            "--train.keep_last",
            "4",
        )
        == 0
    )
    cfg = recorded(copy)["train"]
    assert (cfg["log_every"], cfg["eval_every"], cfg["save_every"]) == (3, 3, 3)
    after = [r for r in records(copy) if r["step"] > 2]
    assert [r["step"] for r in after if "loss" in r] == [3, 6, 8]  # every 3rd step, and the last
    assert [r["step"] for r in after if "val_loss" in r] == [3, 6, 8]
    assert sorted(p.name for p in copy.glob("step_*")) == ["step_0000002", "step_0000003", "step_0000006"]


def test_resume_honours_a_larger_batch_through_accumulation(copy, capsys):
    assert resume(copy, "--train.grad_accum", "3") == 0
    assert recorded(copy)["train"]["grad_accum"] == 3
    tokens = {r["step"]: r["tokens"] for r in records(copy) if "loss" in r}
    assert tokens[3] == tokens[4] == 3 * tokens[1]
    assert "global batch 2 -> 6 sequences" in capsys.readouterr().err


def test_resume_honours_a_model_field_the_weights_do_not_depend_on(copy):
    assert resume(copy, "--model.z_loss", "0.001") == 0
    assert recorded(copy)["model"]["z_loss"] == 0.001


# ----------------------------------------------------------------------------- refused on resume
@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model.n_layers", "8"], "nexus grow --checkpoint"),  # the example: shape
        (["--model.d_model", "64", "--data.seq_len", "16"], "nexus grow --checkpoint"),
        (["--model.attention.gate", "headwise"], "changes the model's shape"),  # new tensors, same sizes elsewhere
        (["--data.tokenizer", "bpe"], "--init-from"),
        (["--data.chat", "true"], "changes the tokenizer"),
        (["--train.optimizer", "muon"], "fresh optimizer: `nexus train --init-from"),
        # issue 40 item 4: same tensor sizes, another function (4 heads of 8 instead of 2 of 16; another RoPE)
        (["--model.n_heads", "4"], "changes the function the checkpoint's weights compute"),
        (["--model.rope_theta", "500"], "changes the function the checkpoint's weights compute"),
    ],
)
def test_resume_refuses_what_the_checkpoint_cannot_take_with_one_line(copy, tmp_path, capsys, args, needle):
    before = snapshot(copy)
    code = resume(copy, *args, "--train.steps", "6")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert args[0][2:] in err  # names the field
    assert snapshot(copy) == before  # nothing written


def test_resume_refuses_a_data_field_the_prepared_source_does_not_read(copy, tmp_path, capsys):
    """Issue 40 item 4: --data.val_fraction on a prepared directory was "resumed with" and changed nothing
    (its split was fixed when it was prepared)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document {i}: " + "zebra quartz " * 40 for i in range(30)))
    prep = tmp_path / "prep"
    assert main(["data", "prepare", str(corpus), "--tokenizer", "byte", "--out", str(prep), "--quiet"]) == 0
    capsys.readouterr()
    before = snapshot(copy)
    code = resume(copy, "--data", prep, "--data.val_fraction", "0.2")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "data.val_fraction=0.2" in err and "has no effect" in err and "prepared" in err, err
    assert snapshot(copy) == before
    assert resume(copy, "--data", prep) == 0  # the same source without it is taken


def test_resume_lr_note_names_the_step_it_applies_from(copy, capsys):
    assert resume(copy, "--train.lr", "0.001") == 0
    assert "-> 0.001 from step 2 on" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --init-from
def test_init_from_takes_weights_only_with_new_data_and_schedule(base, tmp_path):
    from nexus.cli import build_parser
    from nexus.cli.train import flag_overrides, plan_run
    from nexus.train.trainer import Trainer

    corpus = tmp_path / "sft.txt"
    corpus.write_text("\n\n".join(f"question {i}? answer {i}." * 5 for i in range(40)))
    out = tmp_path / "cont"
    argv = [
        "train",
        *MICRO,
        "--init-from",
        str(base / "checkpoint"),
        "--data",
        str(corpus),
        "--train.steps",
        "3",
        "--train.lr",
        "1e-3",
        "--out",
        str(out),
    ]
    args, extra = build_parser("train").parse_known_args(argv)
    plan = plan_run(args, flag_overrides(args, extra)[0])
    trainer = Trainer(plan.cfg, init_model=plan.init_model, init_tokenizer=plan.init_tokenizer, quiet=True)
    src, _, _ = load_checkpoint(base / "checkpoint")
    assert trainer.step == 0 and trainer.resumed_step is None
    assert all(not s for s in trainer.optimizer.state_dict()["state"].values())  # a fresh optimizer
    for (name, a), (_, b) in zip(trainer.model.state_dict().items(), src.state_dict().items()):
        assert torch.equal(a, b), name
    assert main([*argv, "--quiet"]) == 0
    lrs = {r["step"]: r["lr"] for r in records(out) if "lr" in r}
    assert lrs[1] == pytest.approx(1e-3)  # the new run's peak after its 1 warmup step, not the source's schedule
    cfg = recorded(out)
    assert cfg["data"]["source"] == str(corpus) and cfg["train"]["steps"] == 3 and cfg["model"]["d_model"] == 32


def test_init_from_a_grown_checkpoint_keeps_its_shape(base, tmp_path, capsys):
    grown = tmp_path / "wide"
    assert main(["grow", "--checkpoint", str(base / "checkpoint"), "--out", str(grown), "--width.ffn", "128"]) == 0
    out = tmp_path / "cont"
    assert main(["train", *MICRO, "--init-from", str(grown), "--train.steps", "2", "--out", str(out), "--quiet"]) == 0
    cfg = recorded(out)
    assert cfg["model"]["ffn_hidden"] == 128 and cfg["growth_history"] == []
    assert "fresh optimizer and LR schedule" in capsys.readouterr().err


def test_init_from_with_another_vocabulary_is_refused_unless_resized(base, tmp_path, capsys):
    chats = tmp_path / "chats.jsonl"
    chats.write_text(
        "\n".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"hello {i}"}]}
            )
            for i in range(40)
        )
    )
    out = tmp_path / "sft"
    argv = [
        "train",
        *MICRO,
        "--init-from",
        str(base / "checkpoint"),
        "--data",
        str(chats),
        "--data.chat",
        "true",
        "--train.steps",
        "2",
        "--out",
        str(out),
        "--quiet",
    ]
    before = snapshot(base)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.vocab_size=259" in err and "262" in err and "--resize-vocab" in err
    assert not out.exists() and snapshot(base) == before
    # asked for: the embedding grows to the chat tokenizer's 262 rows, the 259 trained rows kept
    assert main([*argv, "--resize-vocab", "--train.lr", "1e-9"]) == 0
    assert "--resize-vocab: model.vocab_size 259 -> 262" in capsys.readouterr().err
    model, cfg, tok = load_checkpoint(out / "checkpoint")
    src, _, _ = load_checkpoint(base / "checkpoint")
    assert cfg.model.vocab_size == tok.vocab_size == 262 and model.embed.weight.shape[0] == 262
    assert torch.allclose(model.embed.weight[:259], src.embed.weight, atol=1e-6)


def test_init_from_refuses_a_new_shape_naming_nexus_grow(base, tmp_path, capsys):
    out = tmp_path / "x"
    assert (
        main(["train", *MICRO, "--init-from", str(base / "checkpoint"), "--model.n_layers", "3", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.n_layers=3" in err and "nexus grow" in err
    assert not out.exists()


def test_init_from_without_a_preset_trains_with_the_checkpoints_settings_and_name(base, tmp_path, capsys):
    """Issue 40 item 8: --init-from a baseline-micro checkpoint was labelled baseline-tiny and trained with
    baseline-tiny's batch (the default preset's training settings, silently)."""
    out = tmp_path / "cpt"
    assert main(["train", "--init-from", str(base / "checkpoint"), "--train.steps", "2", "--out", str(out)]) == 0
    err, printed = capsys.readouterr()[::-1]
    src = recorded(base)
    cfg = recorded(out)
    assert cfg["preset"] == src["preset"] == "baseline-micro"
    assert "nexus: baseline-micro |" in printed
    assert (cfg["train"]["batch_size"], cfg["data"]["seq_len"], cfg["train"]["lr"]) == (
        src["train"]["batch_size"],
        src["data"]["seq_len"],
        src["train"]["lr"],
    )
    batch = src["train"]["batch_size"] * src["train"]["grad_accum"] * src["data"]["seq_len"]
    assert {r["step"]: r["tokens"] for r in records(out) if "loss" in r} == {1: batch, 2: batch}
    assert "training settings" in err and "from the checkpoint's config" in err


def test_init_from_a_hf_directory(tmp_path, capsys):
    from hf_helpers import VOCAB, tiny_hf

    hf = tmp_path / "hf"
    tiny_hf("llama", seed=3).save_pretrained(hf)  # no tokenizer: imported with the byte tokenizer
    out = tmp_path / "ft"
    argv = [
        "train",
        "--init-from",
        str(hf),
        "--train.steps",
        "2",
        "--data.seq_len",
        "32",
        "--train.batch_size",
        "2",
        "--train.eval_every",
        "0",
        "--train.sample_tokens",
        "4",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 2 and "--resize-vocab" in capsys.readouterr().err
    assert main([*argv, "--resize-vocab", "--train.lr", "1e-9"]) == 0
    model, cfg, _ = load_checkpoint(out / "checkpoint")
    from nexus.hf import import_hf

    imported, _ = import_hf(hf)
    assert cfg.model.vocab_size == 259 and model.embed.weight.shape[0] == 259
    assert torch.allclose(model.embed.weight[:VOCAB], imported.embed.weight, atol=1e-6)


# ----------------------------------------------------------------------------- --push-to-hub
def test_push_to_hub_is_checked_before_training_and_pushes_the_final_checkpoint(tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants

    from nexus.hf import hub

    out = tmp_path / "run"
    argv = ["train", *MICRO, "--train.steps", "2", "--out", str(out), "--quiet", "--push-to-hub", "me/nexus-micro"]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--push-to-hub='me/nexus-micro'" in err and not out.exists()
    # online (the hub itself is out of reach of the tests): the final checkpoint is what gets uploaded
    pushed = []
    monkeypatch.setattr(hub, "check_hub_reachable", lambda repo: None)
    monkeypatch.setattr(hub, "push_folder", lambda folder, repo, what: pushed.append((folder, repo, what)) or "url")
    assert main(argv) == 0
    assert pushed == [(out / "checkpoint", "me/nexus-micro", "checkpoint")]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["pushed"] == "url"
