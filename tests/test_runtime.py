"""Process-level CPU allocator tuning (nexus/runtime.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PROBE = "from nexus.runtime import tune_cpu_allocator as t; print(t(), t())"


def _probe(**env) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"),
    reason="mallopt tuning applies to Linux/glibc only",
)
def test_malloc_tuning_is_accepted_by_glibc_and_idempotent():
    assert _probe() == "True True"


def test_malloc_tuning_can_be_switched_off():
    assert _probe(NEXUS_MALLOC_TUNING="0") == "False False"


def test_cli_applies_the_tuning(monkeypatch):
    import nexus.cli as cli

    calls = []
    monkeypatch.setattr(cli, "tune_cpu_allocator", lambda: calls.append(1))
    assert cli.main(["presets"]) == 0
    assert calls == [1]
