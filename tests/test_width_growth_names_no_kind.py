"""Width growth asks each kind what it can grow (issue 37 item 3): growth/width.py names no registered kind,
and a kind's own check_width_growth / pin_sizes are what refuse or keep its sizes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nexus.growth.width as W
from nexus.config import ConfigError, ModelConfig, ProjectionOptions


def registered_kinds() -> set[str]:
    return {k for section in ModelConfig().kind_sections() for k in type(section).kinds()}


def test_width_growth_source_names_no_kind():
    src = Path(W.__file__).read_text()
    code = re.sub(r'"""(?:.|\n)*?"""|#[^\n]*', "", src)  # prose may cite a paper's kind; code may not branch on one
    named = sorted(k for k in registered_kinds() if re.search(rf"""["']{re.escape(k)}["']""", code))
    assert named == []
    assert ".kind ==" not in code and ".kind !=" not in code


def test_every_section_kind_answers_the_width_growth_questions():
    for section in ModelConfig().kind_sections():
        for kind, cls in type(section).kinds().items():
            assert callable(cls.check_width_growth) and callable(cls.pin_sizes), kind


def test_a_new_kinds_refusal_is_asked_without_editing_width_py():
    from nexus.growth.width import WidthSpec
    from nexus.presets import get_preset

    class Stubborn(ProjectionOptions):
        def check_width_growth(self, model, targets):
            raise ConfigError(f"width.hidden={targets.get('hidden')} on a stubborn projection (valid: none)")

    m = get_preset("baseline-micro").model
    m.projection = Stubborn()  # a subclass of the baseline kind, not registered: nothing names it
    with pytest.raises(ConfigError, match="stubborn projection"):
        WidthSpec(hidden=m.d_model * 2).validate().applies_to(m)
