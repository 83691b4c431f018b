"""Another revision of this repository checked out beside the tree, for the benchmarks that compare the
code of two revisions (bitwise_presets.py, revision_step_speed.py); each side then runs in its own
process with its own `src` on PYTHONPATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# main before the issue-25 session (its last commit of 2026-11-25): what that redesign is compared with
BEFORE_REDESIGN = "ecda7df"


def checkout(worktree: str, rev: str) -> tuple[Path, str, str]:
    """(the reference's checkout, its short commit, this tree's short commit); `git worktree add --detach`
    when `worktree` does not exist yet (an existing one is used as it is: its commit is printed)."""
    ref = Path(worktree)
    if not ref.is_dir():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(ref), rev], check=True, capture_output=True
        )
    return ref, _short(ref), _short(ROOT)


def _short(path: Path) -> str:
    return (
        subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or f"{path} (not a git checkout)"
    )
