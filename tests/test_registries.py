"""One extension pattern: every extension point is a plugins.Registry filled by its package's modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nexus.config import ConfigError
from nexus.plugins import Registry


def test_a_registry_imports_its_package_and_finds_what_the_modules_register(tmp_path, monkeypatch):
    pkg = tmp_path / "toyplugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from nexus.plugins import Registry\nTOYS = Registry('--toy', __name__)\n")
    for name in ("alpha", "beta"):
        (pkg / f"{name}.py").write_text(
            f"from . import TOYS\n\n@TOYS.register('{name}')\ndef make():\n    return '{name}!'\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    import toyplugins

    assert "toyplugins.alpha" not in sys.modules  # nothing imported until the first lookup
    assert toyplugins.TOYS.get("beta")() == "beta!"
    assert sorted(toyplugins.TOYS.names()) == ["alpha", "beta"]
    with pytest.raises(ConfigError, match=r"--toy='gamma' \(valid: alpha\|beta\)"):
        toyplugins.TOYS.get("gamma")
    with pytest.raises(RuntimeError, match="registered twice"):
        toyplugins.TOYS.register("alpha")(lambda: None)


def test_every_extension_point_is_a_registry_with_its_entries():
    from nexus.analysis import ANALYSES
    from nexus.cli import COMMANDS
    from nexus.growth import GROWERS
    from nexus.models.kinds import ATTENTION_KINDS, MLP_KINDS
    from nexus.models.projections import PROJECTIONS
    from nexus.presets import PRESETS
    from nexus.train.hooks import HOOK_KINDS

    expect = {
        PRESETS: {"baseline-tiny", "exo-dynamic-e-tiny", "nexus-micro"},
        PROJECTIONS: {"nexus_rank", "pattention"},
        ATTENTION_KINDS: {"higher_order"},
        MLP_KINDS: {"moe"},
        ANALYSES: {"attention", "mixing", "representations", "params", "flops", "growth"},
        COMMANDS: {
            "train",
            "grow",
            "eval",
            "generate",
            "analyze",
            "export",
            "import",
            "presets",
            "experiment",
            "config",
        },
        GROWERS: {"width", "nexus_rank", "tokenformer", "retrofit"},
        HOOK_KINDS: {"growth"},
    }
    for registry, names in expect.items():
        assert isinstance(registry, Registry)
        assert names <= set(registry.names()), registry.what


def test_projection_kinds_register_without_a_central_import_list():
    """A fresh process that never imports nexus_rank / pattention by name still builds those models."""
    code = (
        "import sys; from nexus.models import build_model; from nexus.presets import get_preset; "
        "assert 'nexus.models.pattention' not in sys.modules; "
        "m = build_model(get_preset('tokenformer-tiny').model); "
        "assert any(type(x).__name__ == 'Pattention' for x in m.modules())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
