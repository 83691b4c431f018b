"""Clean errors for what still raised Python exceptions or was silently accepted (issue 28 item 5): one
line naming the field, the value and what is valid, exit code 2, nothing written; the Python API
raises ValueError/TypeError naming the argument."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch

import nexus
from nexus.checkpoint import _sha256, save_checkpoint
from nexus.cli import main
from nexus.models import build_model
from nexus.presets import get_preset
from test_output_safety import MICRO, one_line_exit_2, snapshot


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    cfg = get_preset("baseline-micro")
    cfg.model.d_model, cfg.model.vocab_size = 32, 259
    torch.manual_seed(0)
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "ck", build_model(cfg.validate().model), cfg)


def damaged(tmp_path: Path, ckpt: Path, name: str, data: bytes, rehash: bool = True) -> Path:
    """A copy of `ckpt` whose file `name` holds `data` (its checksum updated, so only the content is wrong)."""
    c = tmp_path / "damaged"
    shutil.copytree(ckpt, c)
    (c / name).write_bytes(data)
    if rehash and name != "meta.json":
        meta = json.loads((c / "meta.json").read_text())
        meta["sha256"][name] = _sha256(c / name)
        (c / "meta.json").write_text(json.dumps(meta))
    return c


# ----------------------------------------------------------------------------- checkpoint files
@pytest.mark.parametrize("name,text", [("config.json", "[1, 2]"), ("config.json", '"a string"'),
                                       ("config.json", '{"model": 5}'), ("meta.json", "[]"),
                                       ("meta.json", '{"format_version": 1, "sha256": ["x"]}')])
def test_checkpoint_json_of_the_wrong_type_is_one_line(capsys, tmp_path, ckpt, name, text):
    c = damaged(tmp_path, ckpt, name, text.encode())
    one_line_exit_2(capsys, ["generate", "--checkpoint", c, "--max-new-tokens", "2"], name)


def test_a_tokenizer_file_that_is_not_text_is_one_line(capsys, tmp_path, ckpt):
    c = damaged(tmp_path, ckpt, "tokenizer.json", bytes(range(256)) * 4)
    one_line_exit_2(capsys, ["generate", "--checkpoint", c, "--max-new-tokens", "2"], "tokenizer.json")
    out = tmp_path / "run"
    one_line_exit_2(capsys, ["train", *MICRO, "--data.tokenizer", c / "tokenizer.json", "--out", out], "tokenizer.json")
    assert not out.exists()


def test_integer_weights_are_refused_not_cast(tmp_path, ckpt):
    from safetensors.torch import load_file, save_file

    sd = load_file(str(ckpt / "model.safetensors"))
    name = next(k for k, v in sd.items() if v.dim() == 2)
    sd[name] = sd[name].round().to(torch.int64)
    c = tmp_path / "int"
    shutil.copytree(ckpt, c)
    save_file(sd, str(c / "model.safetensors"))
    meta = json.loads((c / "meta.json").read_text())
    meta["sha256"]["model.safetensors"] = _sha256(c / "model.safetensors")
    (c / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(nexus.ConfigError, match=f"{name}.*int64"):
        nexus.load(c)


# ----------------------------------------------------------------------------- config values
@pytest.mark.parametrize("field,value", [("train.eps", "-1"), ("train.eps", "nan"), ("train.seed", "-1"),
                                         ("train.seed", "4294967296"), ("train.muon_momentum", "1.5")])
def test_out_of_range_optimizer_and_seed_values_are_one_line(capsys, tmp_path, field, value):
    out = tmp_path / "run"
    one_line_exit_2(capsys, ["train", *MICRO, f"--{field}", value, "--out", out], f"{field}=")
    assert not out.exists()


@pytest.mark.parametrize("how", ["data.cache_dir", "NEXUS_CACHE"])
@pytest.mark.parametrize("bad", ["a file", "below a file"])
def test_a_cache_directory_that_cannot_be_one_is_one_line(capsys, tmp_path, monkeypatch, how, bad):
    f = tmp_path / "afile"
    f.write_text("x")
    cache = f if bad == "a file" else f / "cache"
    out = tmp_path / "run"
    extra = []
    if how == "NEXUS_CACHE":
        monkeypatch.setenv("NEXUS_CACHE", str(cache))
    else:
        extra = ["--data.cache_dir", str(cache)]
    one_line_exit_2(capsys, ["train", *MICRO, *extra, "--out", out], how)
    assert not out.exists() and f.read_text() == "x"


@pytest.mark.parametrize("env,needle", [({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"),
                                        ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR"),
                                        ({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "127.0.0.1",
                                          "MASTER_PORT": "29500"}, "RANK='5'"),
                                        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1",
                                          "MASTER_PORT": "port"}, "MASTER_PORT='port'")])
def test_malformed_distributed_environment_is_one_line(capsys, tmp_path, monkeypatch, env, needle):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "run"
    one_line_exit_2(capsys, ["train", *MICRO, "--out", out], needle)
    assert not out.exists()


# ----------------------------------------------------------------------------- --out paths
def _bad_out(tmp_path: Path, how: str) -> tuple[Path, str]:
    if how == "long name":
        return tmp_path / ("x" * 300), "255 bytes"
    if how == "symlink loop":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        return tmp_path / "a", "symlink loop"
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere" / "deep")
    return (tmp_path / "gone" / "out" if how == "dangling symlink above" else tmp_path / "gone"), "does not exist"


@pytest.mark.parametrize("how", ["long name", "symlink loop", "dangling symlink", "dangling symlink above"])
@pytest.mark.parametrize("cmd", ["train", "grow"])
def test_unusable_out_names_are_one_line_before_any_work(capsys, tmp_path, ckpt, how, cmd):
    work = tmp_path / "w"
    work.mkdir()
    out, needle = _bad_out(work, how)
    before = tree(work)
    argv = (["train", *MICRO, "--out", out] if cmd == "train" else
            ["grow", "--checkpoint", ckpt, "--width.hidden", "48", "--out", out])
    one_line_exit_2(capsys, argv, needle)
    assert tree(work) == before and not (tmp_path / "nowhere").exists()


def tree(root: Path) -> dict:
    """Every path below root: a symlink's target, else its bytes' sha256 (None for folders)."""
    import hashlib

    return {str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else None if p.is_dir()
            else hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


# ----------------------------------------------------------------------------- silent acceptance
def test_synthetic_task_eval_of_a_text_model_is_refused(capsys, ckpt):
    one_line_exit_2(capsys, ["eval", "--checkpoint", ckpt, "--task", "mqar"], "data.source='embedded'")


# ----------------------------------------------------------------------------- the Python API
@pytest.mark.parametrize("kwargs,needle", [
    ({"max_new_tokens": -1}, "max_new_tokens"), ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ({"temperature": -0.5}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_k": -1}, "top_k"), ({"top_k": 1.5}, "top_k")])
def test_generate_validates_its_arguments(ckpt, kwargs, needle):
    model = nexus.load(ckpt)
    with pytest.raises(ValueError, match=needle):
        model.generate(torch.tensor([[1, 2, 3]]), **kwargs)


@pytest.mark.parametrize("prompt,needle", [(torch.tensor([1, 2, 3]), "2-D"), (torch.zeros(1, 0, dtype=torch.long), "empty"),
                                           (torch.tensor([[1, 259]]), "vocabulary"), (torch.tensor([[-1, 2]]), "vocabulary"),
                                           (torch.tensor([[1.0, 2.0]]), "integer"), ([[1, 2]], "tensor")])
def test_generate_validates_its_prompt(ckpt, prompt, needle):
    model = nexus.load(ckpt)
    with pytest.raises((ValueError, TypeError), match=needle):
        model.generate(prompt, max_new_tokens=2)


def test_generate_with_valid_arguments_still_samples(ckpt):
    model = nexus.load(ckpt)
    out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3, temperature=0, top_k=0, top_p=1.0)
    assert out.shape == (1, 6)


def test_build_model_names_a_wrong_argument():
    with pytest.raises(TypeError, match="RunConfig.*cfg.model"):
        nexus.build_model(get_preset("baseline-micro"))
    with pytest.raises(TypeError, match="ModelConfig"):
        nexus.build_model({"d_model": 32})
