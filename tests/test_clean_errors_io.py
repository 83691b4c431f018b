"""Clean errors where the environment is hostile (issue 42 item 4): a full disk, an immutable file, a user's
folder under the lock's name, a non-UTF-8 output name, a binary config, NaN growth options, an unreachable
hub, a malformed data file. Each is one line naming what is wrong, exit code 2, and nothing of the user's
lost or half-written."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from pathlib import Path

import pytest
from test_clean_errors import ckpt  # noqa: F401  (the module-scoped checkpoint fixture)
from test_output_safety import MICRO, one_line_exit_2, snapshot

from nexus.cli import main, run_guarded


@pytest.fixture
def small_disk(tmp_path):
    """A 600 KB tmpfs: a real full disk (needs root to mount; skipped where it cannot be mounted)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


@pytest.fixture
def immutable():
    """chattr +i on paths (root only); cleared again at teardown so tmp_path can be removed."""
    done = []

    def make(p: Path) -> None:
        if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available here")
        done.append(p)

    yield make
    for p in done:
        subprocess.run(["chattr", "-i", str(p)], check=True)


# ----------------------------------------------------------------------------- a full disk
def test_training_into_a_full_disk_is_one_line(capsys, small_disk):
    """Was `SafetensorError ... No space left on device` (and torch's `[enforce fail at inline_container.cc]`)
    with a traceback. The weights (0.9 MB at d_model 128) cannot fit in 600 KB; no temporary is left."""
    out = small_disk / "run"
    one_line_exit_2(capsys, ["train", *MICRO, "--model.d_model", "128", "--out", out], "no space left on the device")
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]


def test_prepare_into_a_full_disk_is_one_line_and_leaves_nothing(capsys, small_disk, tmp_path):
    """Was `OSError: 178852 requested and 40960 written` (numpy's tofile loses the errno)."""
    text = "\n\n".join(f"document {i} " + "words of text " * 40 for i in range(3000))  # ~1.7 MB of tokens
    (tmp_path / "c.txt").write_text(text)
    one_line_exit_2(
        capsys,
        [
            "data",
            "prepare",
            tmp_path / "c.txt",
            "--tokenizer",
            "byte",
            "--out",
            small_disk / "prep",
            "--num-proc",
            "1",
            "--quiet",
        ],
        "no space left on the device",
    )
    assert list(small_disk.iterdir()) == []


@pytest.mark.parametrize(
    "exc,needle",
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/x/model.safetensors"),
            "no space left on the device writing '/x/",
        ),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "no space left on the device"),
        (
            RuntimeError(
                "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: file "
                "write failed"
            ),
            "a file could not be written (RuntimeError: [enforce fail",
        ),
        (
            PermissionError(errno.EPERM, "Operation not permitted", "run/config.yaml"),
            "the file system refused writing 'run/config.yaml': Operation not permitted",
        ),
        (OSError(errno.EROFS, "Read-only file system", "/ro/x"), "Read-only file system"),
    ],
)
def test_file_system_refusals_are_one_line_exit_2(capsys, exc, needle):
    def command():
        raise exc

    assert run_guarded("nexus train", command) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("nexus train: error: ") and needle in err


def test_an_internal_fault_keeps_its_traceback():
    def command():
        raise OSError(errno.EBADF, "Bad file descriptor")

    with pytest.raises(OSError, match="Bad file descriptor"):
        run_guarded("nexus train", command)


# ----------------------------------------------------------------------------- immutable files, the lock's name
def test_overwrite_with_an_immutable_config_is_one_line_and_recoverable(capsys, tmp_path, immutable):
    """Was a PermissionError traceback. After the user clears the flag the same command succeeds."""
    out = tmp_path / "run"
    assert main([*["train", *MICRO], "--out", str(out)]) == 0
    immutable(out / "config.yaml")
    one_line_exit_2(capsys, ["train", *MICRO, "--out", out, "--overwrite"], "Operation not permitted")
    subprocess.run(["chattr", "-i", str(out / "config.yaml")], check=True)
    assert main(["train", *MICRO, "--out", str(out), "--overwrite"]) == 0
    assert (out / "checkpoint" / "model.safetensors").is_file()


def test_a_user_directory_named_like_the_lock_is_refused_and_kept(capsys, tmp_path):
    """Was IsADirectoryError, after the user's directory had been renamed aside as a stale lock."""
    mine = tmp_path / ".B7.nexus-lock"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "a.txt").write_text("mine")
    before = snapshot(tmp_path)
    one_line_exit_2(capsys, ["train", *MICRO, "--out", tmp_path / "B7"], "is a folder (valid: move it away")
    assert snapshot(tmp_path) == before


def test_a_non_utf8_out_name_is_refused_before_training(capsys, tmp_path):
    """Was a matplotlib traceback after the whole run (the name in the loss plot's title)."""
    out = tmp_path / os.fsdecode(b"bad\xffname")
    err = one_line_exit_2(capsys, ["train", *MICRO, "--out", out], "is not valid UTF-8")
    assert "bad\\xffname" in err and list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- inputs
def test_a_binary_config_is_one_line(capsys, tmp_path):
    """Was UnicodeDecodeError."""
    (tmp_path / "c.yaml").write_bytes(bytes([0x80, 0xCA, 0xFE, 0x00]) * 50)
    one_line_exit_2(
        capsys, ["train", "--config", tmp_path / "c.yaml", "--out", tmp_path / "run"], "is not UTF-8 text (byte 0"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["nan,5", "inf,5", "1.3,inf", "nan,nan"])
def test_non_finite_rewarmup_is_refused(capsys, tmp_path, ckpt, value):  # noqa: F811  (ckpt: the imported fixture)
    """`--rewarmup nan,5` was accepted and wrote "rho": NaN; resuming gave loss nan, then a traceback."""
    one_line_exit_2(
        capsys,
        ["grow", "--checkpoint", ckpt, "--width.hidden", "48", "--rewarmup", value, "--out", tmp_path / "g"],
        f"--rewarmup={value!r}",
    )
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("rho", [float("nan"), float("inf"), 0.0])
def test_a_growth_record_with_a_bad_rho_is_refused_on_resume(rho):
    from nexus.config import ConfigError
    from nexus.growth.rewarmup import make_rewarmup

    with pytest.raises(ConfigError, match="a finite rho > 0"):
        make_rewarmup({"step": 10, "rewarmup": {"rho": rho, "tau": 5}})


def test_a_malformed_jsonl_is_nexus_line_alone(capfd, tmp_path):
    """datasets printed its own 'Failed to load JSON from file ...' line before nexus's (capfd: the library's
    logging handler writes to the process's stderr)."""
    (tmp_path / "broken.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    one_line_exit_2(
        capfd,
        ["train", *MICRO, "--data", tmp_path / "broken.jsonl", "--out", tmp_path / "run"],
        "could not be read as json",
    )


def test_an_unreachable_hub_is_one_line_at_once(capfd, tmp_path, monkeypatch):
    """Offline, `--data hf:owner/name` printed 11 retry lines over 37 s before nexus's line. Here every TCP
    connection fails (no network, as on a machine without one; nothing can be downloaded either way), and
    the offline flags the test suite sets are cleared so nexus must notice by itself."""
    import datasets.config
    import huggingface_hub.constants

    def no_network(self, address):
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    err = one_line_exit_2(
        capfd,
        ["train", *MICRO, "--data", "hf:someowner/somename", "--out", tmp_path / "run"],
        "data.source='hf:someowner/somename' could not be loaded from the hub (the hub is unreachable",
    )
    assert "Retry" not in err and not (tmp_path / "run").exists()
