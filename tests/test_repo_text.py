"""The repository's own text files carry no unresolved merge-conflict markers.

A conflict block committed into README.md once showed users two contradictory benchmark rows.
"""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in out.splitlines():
        if name.endswith((".md", ".py", ".toml", ".yaml", ".yml", ".txt", ".cfg")) or name.startswith(".ci/"):
            yield ROOT / name


def test_marker_pattern_catches_a_conflict_block():
    planted = "row\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> main\n"
    assert len(MARKER.findall(planted)) == 3


def test_no_tracked_file_holds_a_conflict_marker():
    hits = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if MARKER.match(line):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line[:40]}")
    assert not hits, "unresolved merge-conflict markers:\n" + "\n".join(hits)
