"""Bad values, paths and data end in one stderr line and exit 2, with nothing written outside a fresh
temporary output (issue 18's list)."""

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nexus
from nexus.cli import main

MICRO = [
    "--preset",
    "baseline-micro",
    "--train.steps",
    "4",
    "--train.eval_every",
    "0",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.sample_tokens",
    "4",
]


def snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(root).rglob("*"))
    }


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Run from a fresh directory holding a victim tree; every test checks neither changed beyond `out`."""
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep")
    (victim / "sub" / "thesis.tex").write_text("\\section{x}")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    yield tmp_path / "work" / "out"
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("work/out")} == before


def one_line_exit_2(capsys, argv, needle):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert needle in err, err
    return err


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "r"
    assert main(["train", *MICRO, "--model.max_seq_len", "48", "--out", str(out), "--quiet"]) == 0
    return out / "checkpoint"


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", ".inf"])
def test_nonfinite_learning_rate(capsys, sandbox, value):
    one_line_exit_2(capsys, ["train", *MICRO, "--train.lr", value, "--out", sandbox], "train.lr=")
    assert not sandbox.exists()


def test_grow_at_beyond_steps(capsys, sandbox):
    one_line_exit_2(
        capsys,
        ["train", *MICRO, "--grow-at", "10", "--growth", "{family: width, hidden: 64}", "--out", sandbox],
        "train.hooks[0].at=10",
    )
    assert not sandbox.exists()


@pytest.mark.parametrize(
    "growth,needle",
    [
        ("{family: width, hidden: 16}", "never shrinks"),
        ("{family: nexus_rank, delta_m: 16}", "no Nexus-Rank"),
        ("{family: width}", "width"),
    ],
)
def test_growth_that_cannot_apply_fails_before_step_0(capsys, sandbox, growth, needle):
    one_line_exit_2(capsys, ["train", *MICRO, "--grow-at", "2", "--growth", growth, "--out", sandbox], needle)
    assert not sandbox.exists()


@pytest.mark.parametrize(
    "override",
    [
        ["--model.d_model", "1048576", "--model.n_layers", "64", "--model.n_heads", "8"],
        ["--train.batch_size", "100000000"],
    ],
)
def test_sizes_that_cannot_fit_are_refused_with_the_estimate(capsys, sandbox, override):
    err = one_line_exit_2(capsys, ["train", *MICRO, *override, "--out", sandbox], "GB is free")
    assert "needs at least" in err
    assert not sandbox.exists()


def test_memory_estimate_is_a_lower_bound():
    """Weights + grads + AdamW state alone, counted from a real model, never exceed the estimate."""
    from nexus.config_overrides import parse_overrides
    from nexus.models import build_model
    from nexus.presets import get_preset
    from nexus.train.memory import training_bytes

    cfg = parse_overrides(get_preset("baseline-micro"), ["--model.d_model", "48"]).validate()
    n = sum(p.numel() for p in build_model(cfg.model).parameters())
    est = training_bytes(cfg)
    assert est["params"] == n and est["total"] >= 16 * n + cfg.train.batch_size * cfg.data.seq_len * 4


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--temperature", "nan"], "--temperature='nan'"),
        (["--temperature", "inf"], "--temperature='inf'"),
        (["--top-k", "-5"], "--top-k='-5'"),
        (["--seed", str(2**64)], "--seed="),
        (["--seed", "-1"], "--seed='-1'"),
        (["--prompt", "bad \udc80 char"], "surrogate"),
        (["--prompt", "x" * 60], "context is 48"),
    ],
)
def test_generate_bad_values(capsys, sandbox, ckpt, argv, needle):
    one_line_exit_2(capsys, ["generate", "--checkpoint", ckpt, *argv], needle)


def test_generate_past_the_context_says_it_stops(capsys, ckpt):
    import warnings

    with warnings.catch_warnings(record=True) as seen:  # the CLI's note alone, not the Python API's warning too
        warnings.simplefilter("always")
        assert (
            main(
                [
                    "generate",
                    "--checkpoint",
                    str(ckpt),
                    "--prompt",
                    "x" * 40,
                    "--max-new-tokens",
                    "100",
                    "--temperature",
                    "0",
                ]
            )
            == 0
        )
    assert not [w for w in seen if "generation stops" in str(w.message)]
    cap = capsys.readouterr()
    assert "stops after 9 new tokens" in cap.err
    assert len(cap.out.rstrip("\n")) == 40 + 9  # byte tokens: one character each, all printable x's here


def test_binary_data_is_refused(capsys, sandbox, tmp_path):
    f = tmp_path / "work" / "data.txt"
    f.write_bytes(bytes(range(256)) * 64)
    one_line_exit_2(capsys, ["train", *MICRO, "--data.source", f, "--out", sandbox], "looks binary")
    f.unlink()
    assert not sandbox.exists()


def test_non_utf8_text_is_refused(capsys, sandbox, tmp_path):
    f = tmp_path / "work" / "latin1.txt"
    f.write_bytes(("caf\u00e9 cr\u00e8me br\u00fbl\u00e9e\n\n" * 400).encode("latin-1"))
    one_line_exit_2(capsys, ["train", *MICRO, "--data.source", f, "--out", sandbox], "not UTF-8")
    f.unlink()


def test_a_few_bad_bytes_are_replaced_with_a_counted_warning(capsys, tmp_path):
    from nexus.data.corpus import read_utf8_text

    f = tmp_path / "mostly.txt"
    f.write_bytes(("good text " * 500).encode() + b"\xff\xfe" + "ok \ufffd kept".encode())
    text = read_utf8_text(f, str(f))
    assert text.count("\ufffd") == 3  # two replaced bytes + the one the file really holds
    assert "2 undecodable" in capsys.readouterr().err


def test_load_of_a_number_is_a_type_error():
    with pytest.raises(TypeError, match="checkpoint directory.*not int"):
        nexus.load(123)


def test_env_entry_refuses_an_unrelated_output_dir(tmp_path, capsys):
    from nexus.cli import env_train

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    rc = env_train.main([], {"MODEL_SIZE": "micro", "DATASET": "embedded", "OUTPUT_DIR": str(victim)})
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "OUTPUT_DIR=" in err, err
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]


# ----------------------------------------------------------------------------- a hung rank
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_default_collective_timeout_is_at_most_a_minute():
    from nexus.config import TrainConfig

    assert TrainConfig().dist_timeout_s <= 60


@pytest.mark.slow  # two processes start and train (~15-50 s on a busy machine)
def test_a_stopped_rank_ends_the_other_ranks(tmp_path):
    """Rank 1 is SIGSTOPped mid-run; rank 0 must give up at the next collective (train.dist_timeout_s)
    and exit non-zero instead of waiting forever, and rank 1 exits non-zero once it runs again."""
    out = tmp_path / "run"
    args = [
        "train",
        *MICRO,
        "--train.steps",
        "100000",
        "--train.log_every",
        "1",
        "--train.save_every",
        "0",
        "--train.dist_timeout_s",
        "5",
        "--model.n_layers",
        "1",
        "--train.batch_size",
        "2",
        "--quiet",
        "--out",
        str(out),
    ]
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "NEXUS_DIST_TIMEOUT"}
    env.update(
        OMP_NUM_THREADS="1", NEXUS_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(Path(nexus.__file__).parents[1])
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "nexus", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env
            | {
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
        )
        for r in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 120
        while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().count("\n") >= 3):
            assert time.monotonic() < deadline and procs[0].poll() is None, "training never started"
            time.sleep(0.2)
        os.kill(procs[1].pid, signal.SIGSTOP)
        t0 = time.monotonic()
        procs[0].wait(timeout=60)
        waited = time.monotonic() - t0
        os.kill(procs[1].pid, signal.SIGCONT)
        procs[1].wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
    assert procs[0].returncode != 0 and procs[1].returncode != 0
    assert waited < 60


@pytest.mark.parametrize("cmd", ["train", "analyze", "progressive"])
def test_unwritable_out_dir_is_one_line(capsys, sandbox, tmp_path, monkeypatch, cmd):
    """A read-only or immutable directory: mkdir there fails with EACCES/EPERM/EROFS. Tests run as root
    here, which chmod cannot stop, so the kernel's answer is stood in for at the one place nexus asks."""
    import errno
    import tempfile

    ro = tmp_path / "work" / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    real = tempfile.mkdtemp

    def mkdtemp(*a, dir=None, **k):
        if dir is not None and Path(dir).resolve() == ro.resolve():
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    argv = {
        "train": ["train", *MICRO, "--out", ro / "out"],
        "analyze": ["analyze", "params", "--preset", "baseline-micro", "--out", ro / "out"],
        "progressive": ["experiment", "progressive", "--tokens", "8192", "--out", ro / "out"],
    }[cmd]
    one_line_exit_2(capsys, argv, "cannot write")
    assert list(ro.iterdir()) == []
    os.chmod(ro, 0o755)
    ro.rmdir()
