"""docs/experiments.md says what the progressive experiment's from-scratch lr is, as the code chooses it and
report.md words it (issue 50 item 6: the docs called the default "untuned" while report.md said tuned 0.002)."""

from __future__ import annotations

from pathlib import Path

from nexus.experiments.progressive import methods, plan_progressive

DOC = (Path(__file__).resolve().parents[1] / "docs" / "experiments.md").read_text()


def _row(name: str) -> str:
    return next(line for line in DOC.splitlines() if line.startswith(f"| {name} |"))


def test_the_docs_scratch_lr_row_says_what_the_default_plan_and_report_say(tmp_path):
    default = plan_progressive("sparkling", out=str(tmp_path / "p"))
    rule = default["scratch_lr_rule"]  # what report.md prints after "from-scratch peak lr:"
    assert rule.startswith("tuned: ")
    row = _row("scratch lr")
    assert rule.split(" (")[0] in row  # e.g. "tuned: 0.004"
    untuned = next(n for n, m in methods().items() if not m.lrs)
    assert plan_progressive(untuned, out=str(tmp_path / "u"))["scratch_lr_rule"] == "the small model's lr (untuned)"
    assert "untuned" in row  # and the row says when the lr is the small model's, untuned
