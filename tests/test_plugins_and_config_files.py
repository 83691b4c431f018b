"""Issue 24 item 5: your own presets (YAML files, --preset with --config) and third-party plugins
registered through the `nexus.plugins` entry-point group."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nexus.cli import main

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = """
from nexus.analysis import register_analysis
from nexus.presets import get_preset, register


@register("plug-micro", "a preset from a third-party package")
def plug_micro():
    cfg = get_preset("baseline-micro")
    cfg.model.n_layers = 3
    cfg.train.steps, cfg.train.batch_size, cfg.train.eval_every, cfg.train.eval_batches = 2, 2, 0, 1
    cfg.train.sample_every, cfg.train.save_every, cfg.train.sample_tokens, cfg.data.seq_len = 0, 0, 4, 16
    return cfg


@register_analysis("plug-count", "parameter count, from a plugin")
def plug_count(src, out_dir, args):
    return {"params": sum(p.numel() for p in src.model().parameters())}
"""


def _install(site: Path, name: str, entry: str, module_text: str | None) -> None:
    """A package as pip leaves it on sys.path: its module and a dist-info with entry_points.txt."""
    site.mkdir(parents=True, exist_ok=True)
    if module_text is not None:
        (site / f"{name}.py").write_text(module_text)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[nexus.plugins]\n{name} = {entry}\n")


def _nexus(site: Path, cwd: Path, *argv: str):
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT / 'src'}", "OMP_NUM_THREADS": "1"}
    env.pop("NEXUS_DISABLE_PLUGINS", None)
    return subprocess.run(
        [sys.executable, "-m", "nexus", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # builds and pip-installs a package (~14 s); run with -m slow
def test_a_plugin_package_adds_a_preset_and_an_analysis_used_from_the_cli(tmp_path):
    site = tmp_path / "site"
    _install(site, "nexusplug", "nexusplug", PLUGIN)
    listed = _nexus(site, tmp_path, "presets", "--filter", "plug")
    assert listed.returncode == 0, listed.stderr
    assert "plug-micro" in listed.stdout and "[plugin nexusplug]" in listed.stdout
    run = _nexus(site, tmp_path, "train", "--preset", "plug-micro", "--out", str(tmp_path / "run"), "--quiet")
    assert run.returncode == 0, run.stderr
    cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert cfg["preset"] == "plug-micro" and cfg["model"]["n_layers"] == 3 and cfg["train"]["steps"] == 2
    an = _nexus(
        site, tmp_path, "analyze", "plug-count", "--preset", "plug-micro", "--out", str(tmp_path / "an"), "--json"
    )
    assert an.returncode == 0, an.stderr
    assert json.loads(an.stdout.strip().splitlines()[-1])["params"] > 0


@pytest.mark.parametrize(
    "entry,module_text,needle",
    [
        ("missingplug_mod", None, "names module 'missingplug_mod', which is not installed"),
        ("brokenplug", "import a_module_that_does_not_exist\n", "failed to load (ModuleNotFoundError"),
        (
            "brokenplug:setup",
            "def setup():\n    raise ImportError('needs libfoo')\n",
            "failed to load (ImportError: needs libfoo)",
        ),
    ],
)
def test_an_unknown_or_broken_plugin_is_one_line_and_exit_2(tmp_path, entry, module_text, needle):
    site = tmp_path / "site"
    _install(site, "brokenplug", entry, module_text)
    proc = _nexus(site, tmp_path, "config", "--preset", "baseline-micro")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "plugin 'brokenplug'" in proc.stderr and needle in proc.stderr


@pytest.mark.parametrize("argv", [["train", "--train.steps", "1", "--out", "run"], ["grow", "--help"]])
def test_a_broken_plugin_is_one_line_and_exit_2_in_train_and_grow_help(tmp_path, argv):
    """Issue 40 item 7: these commands build options from the growth registry (plugins load there), before
    the guard that turns a ConfigError into one line: a traceback and exit 1."""
    site = tmp_path / "site"
    _install(site, "brokenplug", "brokenplug", "import a_module_that_does_not_exist\n")
    proc = _nexus(site, tmp_path, *argv)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"nexus {argv[0]}: error: plugin 'brokenplug'")
    assert not (tmp_path / "run").exists()


def _config(tmp_path, text: str) -> Path:
    f = tmp_path / "mine.yaml"
    f.write_text(text)
    return f


def test_preset_and_config_together_file_over_preset_command_line_over_file(tmp_path, capsys):
    f = _config(tmp_path, "model:\n  n_layers: 5\ntrain:\n  lr: 0.002\n  steps: 7\n")
    assert main(["config", "--preset", "baseline-micro", "--config", str(f), "--yaml"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    from nexus.presets import get_preset

    micro = get_preset("baseline-micro")
    assert cfg["model"]["n_layers"] == 5 and cfg["train"]["lr"] == 0.002 and cfg["train"]["steps"] == 7
    # what the file does not name stays the preset's
    assert cfg["model"]["d_model"] == micro.model.d_model and cfg["data"]["seq_len"] == micro.data.seq_len
    from types import SimpleNamespace

    from nexus.cli.common import build_config

    args = SimpleNamespace(preset="baseline-micro", config=str(f), default_preset="baseline-tiny")
    built = build_config(args, ["--train.steps", "3"])
    assert built.train.steps == 3 and built.model.n_layers == 5 and built.model.d_model == micro.model.d_model


def test_a_preset_file_works_wherever_a_preset_name_does(tmp_path, capsys):
    from nexus.experiments.compare import plan_compare
    from nexus.experiments.progressive import plan_progressive
    from nexus.presets import get_preset

    base = get_preset("baseline-micro")
    base.model.n_layers = 3
    f = tmp_path / "my-small.yaml"
    base.save_yaml(f)
    plan = plan_progressive("sparkling", str(f), [], None, 0.5, 0, str(tmp_path / "prog"))
    small = plan["configs"]["0"]["small"]
    assert small["model"]["n_layers"] == 3 and small["model"]["d_model"] == base.model.d_model
    cplan = plan_compare([str(f), "baseline-micro"], [0], out=str(tmp_path / "cmp"))
    assert cplan["runs"][0]["preset"] == "my-small"
    assert Path(cplan["runs"][0]["config"]["train"]["out_dir"]) == tmp_path / "cmp" / "my-small" / "seed0"
    assert main(["config", "--preset", str(f), "--section", "model.n_layers"]) == 0
    assert "= 3" in capsys.readouterr().out


def test_a_bad_config_file_field_is_one_line_naming_it(tmp_path, capsys):
    f = _config(tmp_path, "model:\n  n_layerz: 5\n")
    assert main(["train", "--preset", "baseline-micro", "--config", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "model.n_layerz" in err
    assert not (tmp_path / "o").exists()
