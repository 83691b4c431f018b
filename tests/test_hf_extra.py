"""`nexus export --format hf` without transformers names the extra that installs it, and that extra exists
(issue 50 item 6)."""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
import torch

from nexus.checkpoint import save_checkpoint
from nexus.cli import main
from nexus.models import build_model
from nexus.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]


def test_export_hf_without_transformers_names_the_hf_extra_which_installs_it(tmp_path, capsys, monkeypatch):
    cfg = get_preset("baseline-micro")
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ckpt", build_model(cfg.model), cfg)
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "hf", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'nexus[hf]'" in err[0], err
    assert not out.exists()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("transformers") for req in extras["hf"])
