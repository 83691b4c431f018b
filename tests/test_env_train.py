"""The seed's environment-variable training interface, the chat (SFT) template, and bad input."""

import json
import os
import subprocess
import sys

import pytest
import torch

from nexus.cli import env_train
from nexus.data.chat import ChatByteTokenizer, chat_prompt_ids, encode_conversation
from nexus.data.tokenizer import BPETokenizer, ByteTokenizer

CONV = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
}


# ----------------------------------------------------------------------------- chat template
@pytest.mark.parametrize("tok", [ChatByteTokenizer(), BPETokenizer.train(["hello world, hi there"] * 20, 300)])
def test_chat_loss_mask_covers_exactly_the_assistant_replies(tok):
    ids, mask = encode_conversation(tok, CONV)
    assert len(ids) == len(mask) and ids[0] == tok.bos_id
    trained = [i for i, m in zip(ids, mask) if m]
    expected = tok.encode("Hello!") + [tok.eos_id] + tok.encode("4") + [tok.eos_id]
    assert trained == expected
    for special in ("<|user|>", "<|assistant|>", "<|end|>"):
        assert tok.token_id(special) in ids
        assert all(m == 0 for i, m in zip(ids, mask) if i == tok.token_id(special))
    # user text never carries loss
    prompt = chat_prompt_ids(tok, [{"role": "user", "content": "Hi"}])
    assert prompt[-1] == tok.token_id("<|assistant|>")
    assert prompt[:-1] == encode_conversation(tok, {"messages": [{"role": "user", "content": "Hi"}]})[0]


def test_chat_byte_tokenizer_keeps_plain_byte_models_working(tmp_path):
    from nexus.data.tokenizer_files import load_tokenizer_from_dir

    assert ByteTokenizer().vocab_size == 259 and ChatByteTokenizer().vocab_size == 262
    ChatByteTokenizer().save(tmp_path)
    assert isinstance(load_tokenizer_from_dir(tmp_path), ChatByteTokenizer)
    with pytest.raises(Exception, match="<\\|user\\|>"):
        encode_conversation(ByteTokenizer(), CONV)  # no chat specials: a clear error, not silent text


def test_bad_chat_rows_are_config_errors():
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match="messages"):
        encode_conversation(ChatByteTokenizer(), {"text": "no messages"})
    with pytest.raises(ConfigError, match="role"):
        encode_conversation(ChatByteTokenizer(), {"messages": [{"role": "robot", "content": "x"}]})


# ----------------------------------------------------------------------------- env vars
def test_defaults_are_the_seeds():
    env = env_train.read_env({})
    assert (
        env["MODEL_SIZE"],
        env["BATCH_SIZE"],
        env["GRAD_ACCUM"],
        env["SEQ_LEN"],
        env["LR"],
        env["WARMUP_STEPS"],
        env["TOTAL_STEPS"],
        env["LOG_EVERY"],
        env["SAVE_EVERY"],
        env["EVAL_EVERY"],
        env["N_SUP"],
        env["T_INNER"],
        env["PHASE"],
        env["OUTPUT_DIR"],
        env["HUB_MODEL_ID"],
        env["MAX_SAMPLES"],
    ) == ("small", 4, 8, 256, 3e-4, 500, 20000, 10, 1000, 500, 0, 0, "pretrain", "./nexus-out", "", 0)
    sft = env_train.read_env({"PHASE": "sft"})
    assert (sft["LR"], sft["WARMUP_STEPS"], sft["DATASET"]) == (1e-4, 100, "hf:HuggingFaceTB/smol-smoltalk")
    cfg = env_train.build_run_config(env_train.read_env({"MODEL_SIZE": "tiny", "N_SUP": "2", "T_INNER": "7"}))
    assert cfg.preset == "nexus-tiny" and (cfg.model.arch.n_sup, cfg.model.arch.t_inner) == (2, 7)
    assert (cfg.train.batch_size, cfg.train.grad_accum, cfg.train.optimizer.betas, cfg.train.weight_decay) == (
        4,
        8,
        [0.9, 0.95],
        0.01,
    )


@pytest.mark.parametrize(
    "var,value",
    [
        ("MODEL_SIZE", "huge"),
        ("PHASE", "rlhf"),
        ("BATCH_SIZE", "four"),
        ("LR", "-1e-3"),
        ("TOTAL_STEPS", "0"),
        ("T_INNER", "-2"),
        ("SEQ_LEN", "1.5"),
        ("LR", "nan"),
        ("HUB_MODEL_ID", "no-slash"),
    ],
)
def test_bad_values_name_the_variable(var, value):
    with pytest.raises(env_train.EnvError) as e:
        env_train.read_env({var: value})
    assert str(e.value).startswith(f"{var}=") and "valid" in str(e.value)


def _run_cli(env_vars, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {v.name for v in env_train.VARS}}
    env.update(env_vars, NEXUS_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "nexus.cli.env_train"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


def test_bad_variable_exits_2_with_one_line(tmp_path):
    r = _run_cli({"MODEL_SIZE": "gigantic"}, tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "nexus-train-env: error: MODEL_SIZE='gigantic' (valid: tiny|small|base|medium|micro)"
    ]


@pytest.mark.slow  # two env-script processes that each import the hub stack (~35 s);
# the in-process offline check stays in test_data_sources
def test_offline_hub_dataset_and_hub_push_fail_with_one_line(tmp_path):
    r = _run_cli({"MODEL_SIZE": "micro", "TOTAL_STEPS": "1", "OUTPUT_DIR": str(tmp_path / "o")}, tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.source='hf:HuggingFaceFW/fineweb-edu:sample-10BT'" in lines[0], r.stderr
    r = _run_cli({"MODEL_SIZE": "micro", "DATASET": "embedded", "HUB_MODEL_ID": "someone/nexus-tiny"}, tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nexus-train-env: error: HUB_MODEL_ID='someone/nexus-tiny'"), (
        r.stderr
    )


def _train(tmp_path, capsys, monkeypatch, **extra):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    env = {
        "MODEL_SIZE": "micro",
        "BATCH_SIZE": "2",
        "GRAD_ACCUM": "2",
        "SEQ_LEN": "16",
        "TOTAL_STEPS": "3",
        "LOG_EVERY": "1",
        "SAVE_EVERY": "2",
        "EVAL_EVERY": "2",
        "N_SUP": "2",
        "T_INNER": "2",
        "WARMUP_STEPS": "1",
        "DATASET": "embedded",
        "MAX_SAMPLES": "40",
        "SAMPLE_TOKENS": "4",
        "OUTPUT_DIR": str(tmp_path / "run"),
    }
    env.update(extra)
    rc = env_train.main([], env)
    return rc, capsys.readouterr().out


def test_env_entry_trains_micro_model_end_to_end_and_resumes(tmp_path, capsys, monkeypatch):
    rc, out = _train(tmp_path, capsys, monkeypatch)
    assert rc == 0, out
    steps = [l for l in out.splitlines() if l.startswith("step")]
    assert len(steps) == 3 + 2  # every step logged, plus the validations at EVAL_EVERY and at the end
    assert all(" | mem rss " in l or " | mem alloc " in l for l in steps)  # memory in every log line
    assert "--- samples @ step 2 ---" in out and out.count(" -> ") >= 8  # 4 completions per eval + final
    run = tmp_path / "run"
    assert (run / "step_0000002" / "trainer_state.pt").is_file()  # periodic checkpoint with optimizer state
    state = torch.load(run / "checkpoint" / "trainer_state.pt", weights_only=True)
    assert state["step"] == 3 and state["optimizer"]
    # a second launch with more steps resumes from the newest checkpoint instead of starting over
    rc, out = _train(tmp_path, capsys, monkeypatch, TOTAL_STEPS="4")
    assert rc == 0 and "resuming from" in out and str(run / "checkpoint") in out
    records = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4]


def test_sft_phase_from_pretrained_byte_model(tmp_path, capsys, monkeypatch):
    from nexus.checkpoint import load_checkpoint

    rc, _ = _train(tmp_path, capsys, monkeypatch, TOTAL_STEPS="1", N_SUP="1", T_INNER="1")
    assert rc == 0
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(json.dumps(CONV) for _ in range(30)))
    rc, out = _train(
        tmp_path,
        capsys,
        monkeypatch,
        PHASE="sft",
        DATASET=str(data),
        TOTAL_STEPS="2",
        N_SUP="1",
        T_INNER="1",
        OUTPUT_DIR=str(tmp_path / "sft"),
        INIT_CHECKPOINT=str(tmp_path / "run" / "checkpoint"),
    )
    assert rc == 0, out
    model, cfg, tok = load_checkpoint(tmp_path / "sft" / "checkpoint")
    assert isinstance(tok, ChatByteTokenizer) and cfg.data.chat and model.embed.weight.shape[0] == 262
    pre, _, _ = load_checkpoint(tmp_path / "run" / "checkpoint")
    assert cfg.train.lr == 1e-4
    # the pretrained rows were kept (then trained), the new special rows appended
    assert model.embed.weight.shape[1] == pre.embed.weight.shape[1]


def test_a_grown_run_in_output_dir_resumes_with_its_growth(tmp_path, capsys, monkeypatch):
    """The variables go through `nexus train`'s front door, growth hook included: a run that grew resumes with
    its re-warmup and keeps logging the post-growth diagnostics (this interface refused such runs before)."""
    from nexus.cli import main

    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    growth = "{family: width, hidden: 48, ffn: 128, init: [copy, copy], rewarmup: [1.3, 4]}"
    assert (
        main(
            [
                "train",
                "--preset",
                "baseline-micro",
                "--quiet",
                "--out",
                str(run),
                "--train.steps",
                "4",
                "--data.seq_len",
                "16",
                "--train.batch_size",
                "2",
                "--train.eval_every",
                "0",
                "--train.log_every",
                "1",
                "--model.d_model",
                "32",
                "--model.n_heads",
                "2",
                "--grow-at",
                "2",
                "--growth",
                growth,
            ]
        )
        == 0
    )
    capsys.readouterr()
    rc, out = _train(tmp_path, capsys, monkeypatch, TOTAL_STEPS="6", N_SUP="0", T_INNER="0")
    assert rc == 0, out
    assert f"resuming from {run / 'checkpoint'}" in out
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5, 6]
    assert any("symmetry_lock_mean" in r for r in rows if r["step"] > 4)  # the growth hook ran after the resume
    import yaml

    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["model"]["d_model"] == 48 and recorded["growth_history"][0]["step"] == 2
    assert recorded["train"]["steps"] == 6 and recorded["train"]["grad_accum"] == 2  # the variables were honoured


def test_last_step_is_sampled_evaluated_and_logged_once(tmp_path, capsys, monkeypatch):
    """TOTAL_STEPS a multiple of EVAL_EVERY: the final evaluation and samples cover the last step alone."""
    rc, out = _train(tmp_path, capsys, monkeypatch, TOTAL_STEPS="4")
    assert rc == 0, out
    assert out.count("--- samples @ step 2 ---") == 1 and out.count("--- samples @ step 4 ---") == 1
    assert out.count(" -> ") == 8  # 4 prompts at step 2, 4 at the end
    val_lines = [l.split("|")[0].split() for l in out.splitlines() if l.startswith("step") and "val loss" in l]
    assert val_lines == [["step", "2"], ["step", "4"]]
    records = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "val_loss" in r) for r in records] == [
        (1, False),
        (2, False),
        (2, True),
        (3, False),
        (4, False),
        (4, True),
    ]
