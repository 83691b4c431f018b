"""Issue 24 item 7: the small things a user meets first (help texts, pipes, file modes, the README's
Python example, generating from a packed export)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nexus.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


def _option_help_chunks(text: str) -> dict[str, str]:
    """--help's options section -> {first option string: its help text}."""
    chunks, cur = {}, None
    for line in text.split("options:", 1)[1].splitlines():
        m = re.match(r"^  (-[-\w]+)", line)
        if m:
            cur = m.group(1)
            chunks[cur] = line
        elif cur:
            chunks[cur] += " " + line.strip()
    return chunks


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_help_shows_every_option_with_its_default(command):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    chunks = _option_help_chunks(sub.format_help())
    for action in sub._actions:
        if not action.option_strings or action.dest == "help":
            continue
        chunk = " ".join(chunks[action.option_strings[0]].split())
        if action.required:
            assert "(default:" not in chunk
            continue
        # an option's help either states its default in its own words or gets "(default: VALUE)" appended
        assert "default" in chunk, f"{command} {action.option_strings[0]} shows no default: {chunk!r}"
        d = action.default
        if "(default: " in chunk and d not in (None, False, []):  # the value itself, not only the word
            assert str(d) in chunk, chunk


def test_output_piped_into_head_exits_quietly(tmp_path):
    """`nexus config | head -2`: the reader closes the pipe early; no BrokenPipeError traceback."""
    proc = subprocess.run(
        f"{sys.executable} -m nexus config | head -2",
        shell=True,
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        executable="/bin/bash",
    )
    assert proc.stderr == "" and len(proc.stdout.splitlines()) == 2


def test_readme_python_example_computes_the_next_token_loss():
    """The README's example, run on random ids: its loss is cross-entropy of each position's logits against
    the following token (written here from the definition, not from nexus' loss code)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Python API\n\n```python\n(.*?)```", text, re.S).group(1)
    model_part = block[block.index("from nexus.config import ModelConfig") :]
    torch.manual_seed(0)
    ids = torch.randint(0, 259, (2, 17))
    scope = {"ids": ids, "print": lambda *a: None}
    exec("import nexus, torch\n" + model_part, scope)
    m = scope["m"]
    with torch.no_grad():
        logits = m(ids).logits
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    assert float(scope["out"].loss.detach()) == pytest.approx(float(expected), rel=1e-5)


def _ternary_export(tmp_path):
    from nexus.checkpoint import save_checkpoint
    from nexus.config import ModelConfig, RunConfig
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.export.ternary import save_ternary
    from nexus.models import build_model
    from nexus.models.recurrent import RecurrentOptions

    torch.manual_seed(0)
    cfg = RunConfig(
        model=ModelConfig(arch=RecurrentOptions(n_sup=2, t_inner=2), d_model=32, n_layers=2, n_heads=1, ffn_hidden=80)
    )
    model = build_model(cfg.model)
    ckpt = save_checkpoint(tmp_path / "ckpt", model, cfg, ByteTokenizer())
    save_ternary(model, cfg, ByteTokenizer(), tmp_path / "model.tern")
    return ckpt, tmp_path / "model.tern"


def test_checkpoint_and_export_files_follow_the_umask(tmp_path):
    """safetensors creates its files 0600; under umask 022 a collaborator must be able to read them."""
    old = os.umask(0o022)
    try:
        ckpt, tern = _ternary_export(tmp_path)
    finally:
        os.umask(old)
    files = [p for p in Path(ckpt).rglob("*") if p.is_file()] + [tern]
    assert Path(ckpt) / "model.safetensors" in files
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o644, f"{f.name}: {oct(f.stat().st_mode & 0o777)}"


def test_generate_reads_a_packed_ternary_export(tmp_path, capsys):
    ckpt, tern = _ternary_export(tmp_path)
    argv = ["--prompt", "ab", "--max-new-tokens", "6", "--temperature", "0"]
    assert main(["generate", "--checkpoint", str(tern), *argv]) == 0
    from_packed = capsys.readouterr().out
    assert main(["generate", "--checkpoint", str(ckpt), *argv]) == 0
    assert from_packed == capsys.readouterr().out  # greedy text of the packed file equals the checkpoint's
    # test-time depth applies to the packed model too; a shape-changing field is refused with one line
    assert main(["generate", "--checkpoint", str(tern), *argv, "--set", "arch.t_inner=3"]) == 0
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(tern), *argv, "--set", "d_model=64"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "model.tern" in err


def test_import_of_a_hub_id_offline_is_one_line_and_downloads_nothing(tmp_path):
    """`nexus import --hf OWNER/NAME` takes a hub id; offline and not cached it is one line, exit 2, and
    neither --out nor anything in the hub cache is written."""
    env = {**ENV, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    proc = subprocess.run(
        [sys.executable, "-m", "nexus", "import", "--hf", "someone/tiny-llama", "--out", str(tmp_path / "ck")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--hf='someone/tiny-llama'" in proc.stderr and "HF_HUB_OFFLINE" in proc.stderr
    assert not (tmp_path / "ck").exists()
    hub = tmp_path / "hf-home"
    assert not hub.exists() or not [p for p in hub.rglob("*") if p.is_file()]
