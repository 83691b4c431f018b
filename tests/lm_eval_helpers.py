"""A tiny local multiple-choice lm-eval task (YAML + JSONL data), so lm-eval tests run offline."""

from __future__ import annotations

import json
from pathlib import Path

TASK = "nexus_tiny_mc"


def write_tiny_mc_task(directory: Path, data_file: Path | None = None) -> list[dict]:
    """Write tiny_mc.yaml (task nexus_tiny_mc) and its data into `directory`; returns the rows.

    `data_file` points the YAML elsewhere (a missing file: a task that is found but cannot load).
    """
    rows = [
        {"question": "The cat sat on the", "choices": [" mat", " qqq", " zzz"], "answer": 0},
        {"question": "def foo():\n    return", "choices": [" 1", " banana"], "answer": 1},
        {"question": "import", "choices": [" os", " $$", " x"], "answer": 0},
        {"question": "1 + 1 =", "choices": [" 2", " 7"], "answer": 0},
    ]
    directory = Path(directory)
    data = directory / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "tiny_mc.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data_file or data}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return rows
