"""Issue 46 item 3: a manifest that cannot be written (an error, not a kill: `chattr +i .nexus-run`, a read-only
remount) while a file nexus owns is replaced leaves the folder as its manifest describes it, so once the cause is
gone the run resumes; before, metrics.jsonl kept its new bytes with the old hash and every later resume or
--overwrite refused the run forever."""

from __future__ import annotations

import json

import pytest

from nexus import atomic
from nexus.cli import main
from nexus.outdir.manifest import entry_unchanged, read_manifest


def test_an_error_entering_a_rewritten_file_puts_its_old_bytes_back(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "baseline-micro", "--out", "run", "--train.steps", "4", "--quiet"]) == 0
    log = tmp_path / "run" / "metrics.jsonl"
    before = log.read_bytes()
    assert any(json.loads(x).get("final") for x in before.decode().splitlines())

    def immutable_manifest(final):
        raise PermissionError(1, "Operation not permitted", str(final.parent / ".nexus-run"))

    monkeypatch.setattr(atomic, "enter_in_folder", immutable_manifest)
    rc = main(["train", "--resume", "auto", "--out", "run", "--preset", "baseline-micro", "--train.steps", "6"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and err and "Traceback" not in "\n".join(err)
    assert log.read_bytes() == before  # the final record is still final, and still the bytes the manifest holds
    assert entry_unchanged(log, read_manifest(tmp_path / "run")["files"]["metrics.jsonl"])
    assert not [p.name for p in (tmp_path / "run").iterdir() if ".old-" in p.name or ".tmp-" in p.name]
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            ["train", "--resume", "auto", "--out", "run", "--preset", "baseline-micro", "--train.steps", "6", "--quiet"]
        )
        == 0
    )


@pytest.mark.parametrize("enter", [True, False])
def test_a_file_replaced_without_error_keeps_no_side_link(tmp_path, enter):
    f = tmp_path / "x.txt"
    f.write_text("old")
    atomic.write_text_atomic(f, "new", enter=enter)
    assert f.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]
