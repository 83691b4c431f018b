"""Fixes for what the adversarial harness (tools/adversarial.py, issue 42's target) found: each test
fails without its fix. Fast, in-process where it can be."""
from __future__ import annotations

import json
import socket
from pathlib import Path

from nexus.outdir.lock import read_journal
from nexus.outdir.manifest import MARKER, read_manifest

DEEP = "[" * 200_000 + "]" * 200_000  # nested past Python's recursion limit: json raises RecursionError


def test_a_manifest_nested_past_the_recursion_limit_is_no_proof_not_a_traceback(tmp_path):
    (tmp_path / MARKER).write_text('{"kind": "train run", "files": ' + DEEP + "}")
    assert read_manifest(tmp_path) is None


def test_a_journal_line_nested_past_the_recursion_limit_is_skipped(tmp_path):
    lf = tmp_path / ".run.nexus-lock"
    holder = {"pid": 1, "host": socket.gethostname()}
    lf.write_text(json.dumps(holder) + "\n" + DEEP + "\n" + json.dumps({"pending": ".run.tmp-1-1"}) + "\n")
    h, pending, _ = read_journal(lf)
    assert h == holder and pending == [".run.tmp-1-1"]
