"""A config file is read (and an old one upgraded) once, and merged onto a preset as the mapping it is
(issue 37 item 1)."""

from __future__ import annotations

import yaml

import nexus.config_migration as M
from nexus.config_overrides import merge_config_file
from nexus.presets import get_preset


def test_a_config_file_is_upgraded_once_where_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"model": {"moe": {"n_experts": 4, "top_k": 1}}, "train": {"steps": 7}}))
    calls = []
    real = M.upgrade
    monkeypatch.setattr(M, "upgrade", lambda d: calls.append(1) or real(d))
    cfg = M.load_config_file(path)
    assert len(calls) == 1
    assert (cfg.model.mlp.kind, cfg.model.mlp.n_experts, cfg.model.mlp.top_k, cfg.train.steps) == ("moe", 4, 1, 7)


def test_a_kind_section_takes_its_kind_first_whatever_the_order(tmp_path):
    """The kind's own options may come before `kind` in the file: written as dotted strings in file order,
    `order` was refused as no option of the preset's standard attention."""
    path = tmp_path / "ho.yaml"
    path.write_text("model:\n  attention:\n    order: 3\n    gate: headwise\n    kind: higher_order\n")
    cfg = merge_config_file(get_preset("baseline-micro"), path)
    assert (cfg.model.attention.kind, cfg.model.attention.order, cfg.model.attention.gate) == (
        "higher_order",
        3,
        "headwise",
    )
    assert cfg.model.d_model == get_preset("baseline-micro").model.d_model  # fields the file leaves out: the preset's


def test_typed_values_are_kept_as_typed(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("train:\n  sample_prompt: 'yes'\n  lr: 1.0e-3\n  betas: [0.8, 0.9]\n")
    cfg = merge_config_file(get_preset("baseline-micro"), path)
    assert (cfg.train.sample_prompt, cfg.train.lr, cfg.train.optimizer.betas) == ("yes", 1e-3, [0.8, 0.9])
