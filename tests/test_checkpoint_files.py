"""nexus/checkpoint.py in-process, at a tiny model: what a save writes (every file checksummed, meta.json's
fields from their sources), what a load refuses (one CheckpointError naming the file, the flag and what is
valid) and what it hands back. The CLI paths over the same functions are in test_core_cli.py and
test_clean_errors.py; this file is the fast one the mutation run maps (see docs/testing.md)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import nexus
import nexus.atomic as atomic
import nexus.checkpoint as ck
from nexus.data.tokenizer import ByteTokenizer
from nexus.models import build_model
from nexus.outdir.lock import lock_file
from nexus.outdir.manifest import MARKER, read_manifest, record
from nexus.presets import get_preset


def tiny_cfg():
    cfg = get_preset("baseline-micro")
    cfg.model.d_model, cfg.model.vocab_size = 32, 259
    return cfg.validate()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cfg = tiny_cfg()
    torch.manual_seed(0)
    model = build_model(cfg.model)
    state = {"step": 7, "rng": torch.arange(5)}
    path = ck.save_checkpoint(
        tmp_path_factory.mktemp("ck") / "ckpt",
        model,
        cfg,
        tokenizer=ByteTokenizer(),
        trainer_state=state,
        extra_files={"generation_config.json": '{"a": 1}'},
    )
    return path, model, cfg


def copy_of(saved, tmp_path: Path) -> Path:
    c = tmp_path / "copy"
    shutil.copytree(saved[0], c)
    return c


def rehash(c: Path, name: str) -> None:
    meta = json.loads((c / "meta.json").read_text())
    meta["sha256"][name] = hashlib.sha256((c / name).read_bytes()).hexdigest()
    (c / "meta.json").write_text(json.dumps(meta))


# ----------------------------------------------------------------------------- pieces
def test_nonfinite_tensors_names_floating_tensors_with_nan_or_inf_only():
    sd = {
        "ok": torch.ones(3),
        "nan": torch.tensor([1.0, float("nan")]),
        "int": torch.tensor([1, 2]),
        "note": "not a tensor",
        "neg_inf": torch.tensor([-float("inf")], dtype=torch.bfloat16),
        "inf64": torch.tensor([0.0, float("inf")], dtype=torch.float64),
    }
    assert ck.nonfinite_tensors(sd) == ["nan", "neg_inf", "inf64"]
    assert ck.nonfinite_tensors({"a": torch.zeros(2), "b": torch.tensor(3)}) == []


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, (1 << 20) + 1, 2 * (1 << 20) + 7])
def test_sha256_is_the_digest_of_the_whole_file(tmp_path, size):
    data = os.urandom(size)
    f = tmp_path / "f.bin"
    f.write_bytes(data)
    assert ck._sha256(f) == hashlib.sha256(data).hexdigest()


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_git_sha_is_the_commit_of_the_checkout_holding_the_code_whatever_the_working_directory(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    git("init", "-q", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x", cwd=repo)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not a checkout: the sha must come from the code's folder
    monkeypatch.setattr(ck, "__file__", str(repo / "pkg" / "checkpoint.py"))
    sha = ck._git_sha()
    assert sha == git("rev-parse", "HEAD", cwd=repo) and len(sha) == 40
    monkeypatch.setattr(ck, "__file__", str(elsewhere / "checkpoint.py"))
    assert ck._git_sha() == ""  # not a checkout: nothing on stdout
    monkeypatch.setenv("PATH", str(elsewhere))  # no git at all
    assert ck._git_sha() == ""


def test_git_sha_bounds_its_wait(monkeypatch):
    """A hung git must not block a save: the call carries a finite timeout, and a timeout gives ''."""
    seen = {}

    def hung(cmd, **kw):
        seen.update(kw)
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))

    monkeypatch.setattr(ck.subprocess, "run", hung)
    assert ck._git_sha() == ""
    assert seen["timeout"] == ck.GIT_TIMEOUT_S and 0 < ck.GIT_TIMEOUT_S <= 10


def test_json_object_refuses_non_text_non_json_and_non_objects(tmp_path):
    f = tmp_path / "x.json"
    f.write_bytes(b"\xff\xfe{")
    with pytest.raises(ck.CheckpointError, match=r"x\.json is corrupted \(not text\)"):
        ck._json_object(f)
    f.write_text('{\n  "a": 1,\n  oops\n}')
    with pytest.raises(ck.CheckpointError, match=r"x\.json is corrupted \(not JSON: .* at line 3\)"):
        ck._json_object(f)
    f.write_text("[1]")
    with pytest.raises(
        ck.CheckpointError, match=r"holds a JSON list, not an object \(valid: the x\.json nexus writes\)"
    ):
        ck._json_object(f)
    f.write_text('{"a": [1]}')
    assert ck._json_object(f) == {"a": [1]}


def test_checksums_in_meta_reads_meta_json_and_is_empty_without_them(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"sha256": {"a": "d1"}, "x": 1}))
    assert ck.checksums_in_meta(tmp_path) == {"a": "d1"}
    (tmp_path / "meta.json").write_text("{}")
    assert ck.checksums_in_meta(tmp_path) == {}


# ----------------------------------------------------------------------------- saving
def test_a_save_checksums_every_file_and_records_where_it_came_from(saved):
    path, model, cfg = saved
    meta = json.loads((path / "meta.json").read_text())
    on_disk = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    assert sorted(meta["sha256"]) == sorted(set(on_disk) - {"meta.json", MARKER})
    assert set(meta["sha256"]) >= {
        "model.safetensors",
        "config.json",
        "tokenizer.txt",
        "trainer_state.pt",
        "generation_config.json",
    }
    for name, digest in meta["sha256"].items():
        assert digest == hashlib.sha256((path / name).read_bytes()).hexdigest(), name
    assert meta["format_version"] == ck.FORMAT_VERSION and meta["torch"] == torch.__version__
    assert meta["git_sha"] == ck._git_sha() and meta["weights"] == "model.safetensors"
    assert abs(time.mktime(time.strptime(meta["created"], "%Y-%m-%dT%H:%M:%S")) - time.time()) < 3600
    try:
        expected = importlib.metadata.version("nexus")
    except importlib.metadata.PackageNotFoundError:
        expected = "source"
    assert meta["nexus"] == expected
    assert (path / "generation_config.json").read_text() == '{"a": 1}'
    assert json.loads((path / "config.json").read_text()) == json.loads(cfg.to_json())
    sd = load_file(str(path / "model.safetensors"))
    own = model.state_dict()
    assert sorted(sd) == sorted(own) and all(torch.equal(sd[k], own[k]) for k in own)
    st = torch.load(path / "trainer_state.pt", weights_only=True)
    assert st["step"] == 7 and torch.equal(st["rng"], torch.arange(5))
    # the ownership manifest reuses meta.json's digests: it lists the same files with the same sums
    files = read_manifest(path)["files"]
    assert all(files[n]["sha256"] == d for n, d in meta["sha256"].items())


def test_meta_names_a_source_tree_when_nexus_is_not_installed(tmp_path, monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    ck.write_checkpoint_files(tmp_path, tiny_cfg())
    assert json.loads((tmp_path / "meta.json").read_text())["nexus"] == "source"


def test_a_save_reads_each_file_once_for_its_digest(tmp_path, saved, monkeypatch):
    """Weights can be gigabytes: the ownership manifest reuses meta.json's digests instead of reading
    every file again; only meta.json itself (which lists no digest of its own) is hashed for it. The folder's
    own manifest (MARKER, a few hundred bytes) is hashed once more: the lock journal's `ready` line records it
    as the folder's hash (outdir.manifest.output_hash), so a killed save's rename is proven nexus's."""
    import nexus.outdir.manifest as manifest

    hashed = []
    for module, name in ((ck, "_sha256"), (manifest, "sha256_of")):
        real = getattr(module, name)

        def spy(path, *a, real=real, **k):
            hashed.append(Path(path).name)
            return real(path, *a, **k)

        monkeypatch.setattr(module, name, spy)
    path = ck.save_checkpoint(tmp_path / "c", saved[1], saved[2], tokenizer=ByteTokenizer(), trainer_state={"step": 1})
    files = sorted(p.name for p in path.iterdir() if p.name != MARKER)
    assert len(files) == 5 and sorted(hashed) == sorted([*files, MARKER])


def test_a_save_without_tokenizer_or_trainer_state_writes_neither(tmp_path):
    cfg = tiny_cfg()
    path = ck.save_checkpoint(tmp_path / "c", build_model(cfg.model), cfg)
    names = {p.name for p in path.iterdir()}
    assert names == {"model.safetensors", "config.json", "meta.json", MARKER}
    assert ck.load_trainer_state(path) is None


class Holder(torch.nn.Module):
    """A module whose state holds a transposed (non-contiguous) tensor and a tensor that needs a gradient."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
        self.register_buffer("wt", torch.arange(6.0).reshape(2, 3).t())


def test_weights_are_saved_detached_contiguous_and_on_the_cpu(tmp_path, monkeypatch):
    handed = {}
    cpu_results = set()
    real_cpu = torch.Tensor.cpu

    def cpu(self, *a, **k):
        out = real_cpu(self, *a, **k)
        cpu_results.add(id(out))
        return out

    def spy(sd, filename, *a, **k):
        handed.update(sd)
        return save_file(sd, filename, *a, **k)

    monkeypatch.setattr(torch.Tensor, "cpu", cpu)
    monkeypatch.setattr(ck, "save_file", spy)
    path = ck.save_checkpoint(tmp_path / "c", Holder(), tiny_cfg())
    monkeypatch.undo()
    assert all(id(t) in cpu_results and t.device.type == "cpu" for t in handed.values())  # each moved to the CPU
    assert not any(t.requires_grad for t in handed.values())
    sd = load_file(str(path / "model.safetensors"))
    assert torch.equal(sd["wt"], torch.arange(6.0).reshape(2, 3).t()) and torch.equal(sd["w"], Holder().w.detach())


def test_nonfinite_weights_are_refused_before_anything_is_written(tmp_path):
    cfg = tiny_cfg()
    model = build_model(cfg.model)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    with pytest.raises(ck.NonFiniteWeightsError, match=r"1 weight tensors hold NaN/inf \(first embed\.weight\)"):
        ck.save_checkpoint(tmp_path / "c", model, cfg)
    assert list(tmp_path.iterdir()) == []


def test_check_sees_the_complete_checkpoint_under_its_temporary_name_and_a_refusal_keeps_the_old(tmp_path, saved):
    _, model, cfg = saved
    target = tmp_path / "c"
    first = ck.save_checkpoint(target, model, cfg)
    before = (first / "model.safetensors").read_bytes()
    seen = []

    def check(d):
        seen.append(d)
        ck.verify_checksums(d)  # complete: meta.json and every file it names
        assert d != target and d.parent == tmp_path
        raise ValueError("refused")

    changed = build_model(cfg.model)  # other weights, so the survivor shows
    with pytest.raises(ValueError, match="refused"):
        ck.save_checkpoint(target, changed, cfg, check=check)
    assert len(seen) == 1 and (target / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_sharded_weights_are_checksummed_and_named_in_meta(tmp_path):
    d = tmp_path / "c"
    (d / ck.SHARDED_DIR).mkdir(parents=True)
    (d / ck.SHARDED_DIR / "__0_0.distcp").write_bytes(b"shard")
    ck.write_checkpoint_files(d, tiny_cfg())
    meta = json.loads((d / "meta.json").read_text())
    assert meta["weights"] == ck.SHARDED_DIR and ck.is_sharded(d) and not ck.is_sharded(tmp_path)
    assert meta["sha256"]["sharded/__0_0.distcp"] == hashlib.sha256(b"shard").hexdigest()
    assert sorted(meta["sha256"]) == ["config.json", "sharded/__0_0.distcp"]


@pytest.mark.parametrize(
    "name,recorded",
    [
        ("checkpoint", True),
        ("step_12", True),
        ("step_", False),
        ("best", False),
        ("checkpoint2", False),
        ("my_step_3", False),
    ],
)
def test_a_training_checkpoint_saved_into_a_run_folder_is_recorded_there(tmp_path, saved, name, recorded):
    _, model, cfg = saved
    run = tmp_path / "run"
    run.mkdir()
    record(run, "train run")
    ck.save_checkpoint(run / name, model, cfg)
    files = read_manifest(run)["files"]
    assert (files.get(name) == {"dir": True}) is recorded and read_manifest(run)["kind"] == "train run"
    assert len(files) == int(recorded)


def test_a_checkpoint_saved_into_a_folder_without_a_manifest_gives_it_none(tmp_path, saved):
    _, model, cfg = saved
    ck.save_checkpoint(tmp_path / "checkpoint", model, cfg)
    assert read_manifest(tmp_path) is None and not (tmp_path / MARKER).exists()


# ----------------------------------------------------------------------------- reading
def test_a_saved_checkpoint_loads_back_whole(saved):
    path, model, cfg = saved
    m, c, tok = ck.load_checkpoint(path)
    assert c.to_json() == cfg.to_json() and isinstance(tok, ByteTokenizer)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in m.state_dict().items())
    assert all(p.device.type == "cpu" for p in m.parameters())
    st = ck.load_trainer_state(path)
    assert st["step"] == 7 and torch.equal(st["rng"], torch.arange(5))
    loaded = nexus.load(path)
    assert not loaded.training and isinstance(loaded.tokenizer, ByteTokenizer)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_load_places_the_weights_where_asked(saved, monkeypatch):
    asked = []
    real = ck.load_file

    def spy(f, device="cpu"):
        asked.append(device)
        return real(f)  # read onto the CPU whatever was asked: this machine may have nothing else

    monkeypatch.setattr(ck, "load_file", spy)
    ck.load_checkpoint(saved[0])
    ck.load_checkpoint(saved[0], map_location="cuda:1")
    assert asked == ["cpu", "cuda:1"]


def test_overrides_set_model_fields_at_load(saved):
    m, c, _ = ck.load_checkpoint(saved[0], {"logit_scale": 0.5})
    assert c.model.logit_scale == 0.5 and m.cfg.logit_scale == 0.5
    model = nexus.load(saved[0], logit_scale=0.25)
    assert model.cfg.logit_scale == 0.25 and not model.training
    assert nexus.load(saved[0]).cfg.logit_scale == saved[2].model.logit_scale


def test_a_given_model_config_builds_the_model_and_the_stored_one_is_returned(saved, tmp_path):
    c = copy_of(saved, tmp_path)
    stored = json.loads((c / "config.json").read_text())
    stored["train"]["steps"] = -5  # invalid, but no weight depends on it
    (c / "config.json").write_text(json.dumps(stored))
    rehash(c, "config.json")
    with pytest.raises(nexus.ConfigError, match="train.steps"):
        ck.load_checkpoint(c)
    model_cfg = tiny_cfg().model
    model_cfg.logit_scale = 0.5
    m, cfg, _ = ck.load_checkpoint(c, model_cfg=model_cfg)
    assert m.cfg.logit_scale == 0.5 and cfg.model.logit_scale == 1.0 and cfg.train.steps == -5


def test_load_refuses_a_path_that_is_not_a_path():
    with pytest.raises(TypeError, match="not int: 5"):
        ck.load_checkpoint(5)


@pytest.mark.parametrize("flag", ["--checkpoint", "--init-from"])
def test_read_config_names_the_flag_and_what_is_missing(tmp_path, saved, flag):
    with pytest.raises(ck.CheckpointError, match=f"^{flag}='{tmp_path / 'none'}' \\(valid: an existing"):
        ck.read_config(tmp_path / "none", flag)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ck.CheckpointError, match=f"^{flag}='{empty}' has no config.json"):
        ck.read_config(empty, flag)
    with pytest.raises(ck.CheckpointError, match=f"^{flag}='{empty}' has no meta.json"):
        ck.verify_checksums(empty, flag)
    assert ck.read_config(saved[0], flag).to_json() == saved[2].to_json()
    with pytest.raises(ck.CheckpointError, match=f"^{flag}='{tmp_path / 'none'}' \\(valid: an existing"):
        ck.load_checkpoint(tmp_path / "none", flag=flag)
    c = copy_of(saved, tmp_path)
    (c / "meta.json").unlink()
    with pytest.raises(ck.CheckpointError, match=f"^{flag}='{c}' has no meta.json"):
        ck.load_checkpoint(c, flag=flag)


def test_the_default_flag_is_checkpoint(tmp_path):
    with pytest.raises(ck.CheckpointError, match="^--checkpoint="):
        ck.read_config(tmp_path / "none")
    with pytest.raises(ck.CheckpointError, match="^--checkpoint="):
        ck.load_checkpoint(tmp_path / "none")
    tmp_path.joinpath("c").mkdir()
    with pytest.raises(ck.CheckpointError, match="^--checkpoint="):
        ck.verify_checksums(tmp_path / "c")


def test_read_config_puts_back_a_checkpoint_whose_save_was_killed_between_its_renames(tmp_path, saved):
    target = tmp_path / "ckpt"
    aside = atomic.side_name(target, "old", "111-222")
    shutil.copytree(saved[0], aside)
    holder = {"pid": 2**22 + 12345, "host": socket.gethostname(), "proc_start": None}
    lock_file(target).write_text(json.dumps(holder) + "\n" + json.dumps({"pending": aside.name}) + "\n")
    assert ck.read_config(target).to_json() == saved[2].to_json()
    assert target.is_dir() and not aside.exists()


@pytest.mark.parametrize("error", [TypeError, AttributeError, KeyError])
def test_a_config_the_parser_trips_on_is_one_line_naming_its_file(tmp_path, saved, monkeypatch, error):
    """The parser names a bad field itself (ConfigError); anything else it raises on a config.json of the wrong
    shape is still one line naming the file, never a traceback."""
    c = copy_of(saved, tmp_path)

    def trips(d):
        raise error("boom")

    monkeypatch.setattr(ck.RunConfig, "from_dict", staticmethod(trips))
    with pytest.raises(
        ck.CheckpointError,
        match=rf"does not hold a nexus config \({error.__name__}: .*boom.*\(valid: "
        r"the config.json nexus writes\)",
    ) as e:
        ck.read_config(c)
    assert str(c / "config.json") in str(e.value)


@pytest.mark.parametrize(
    "section,value,needle",
    [
        ("model", {"d_model": "wide"}, "config.json: model.d_model"),
        (
            "model",
            {"attention": {"kind": ["x"]}},
            r"config\.json: model\.attention\.kind=\['x'\] \(valid: one of standard",
        ),
    ],
)
def test_a_config_of_the_wrong_types_names_its_file(tmp_path, saved, section, value, needle):
    c = copy_of(saved, tmp_path)
    d = json.loads((c / "config.json").read_text())
    d[section] = value if not isinstance(value, dict) else {**d[section], **value}
    (c / "config.json").write_text(json.dumps(d))
    with pytest.raises(ck.CheckpointError, match=needle) as e:
        ck.read_config(c)
    assert str(c / "config.json") in str(e.value)


def test_verify_checksums_finds_a_missing_or_changed_file_and_a_malformed_sum_table(tmp_path, saved):
    c = copy_of(saved, tmp_path)
    ck.verify_checksums(c)
    (c / "tokenizer.txt").write_text("bytes\n")
    with pytest.raises(ck.CheckpointError, match=r"tokenizer\.txt' is corrupted \(sha256 mismatch"):
        ck.verify_checksums(c)
    (c / "tokenizer.txt").unlink()
    with pytest.raises(ck.CheckpointError, match="is missing tokenizer.txt"):
        ck.verify_checksums(c)
    meta = json.loads((c / "meta.json").read_text())
    for bad, kind in [(["x"], "list"), ({"a": 1}, "dict")]:
        (c / "meta.json").write_text(json.dumps({**meta, "sha256": bad}))
        with pytest.raises(ck.CheckpointError, match=f"sha256 is a JSON {kind}"):
            ck.verify_checksums(c)
    (c / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "sha256"}))
    ck.verify_checksums(c)  # nothing listed: nothing to check


def test_weights_that_do_not_fit_the_config_are_named(saved):
    model = build_model(saved[2].model)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    first = next(iter(sd))
    for bad, needle in [
        ({k: v for k, v in sd.items() if k != first}, rf"\(missing \['{first}'\]\)"),
        (
            {
                **sd,
                "extra.a": torch.ones(1),
                "extra.b": torch.ones(1),
                "extra.c": torch.ones(1),
                "extra.d": torch.ones(1),
            },
            r"\(unexpected \['extra.a', 'extra.b', 'extra.c'\]\)",
        ),
        (
            {**sd, first: torch.ones(3, 3)},
            re.escape(f"({first} has shape (3, 3) but config.json implies {tuple(sd[first].shape)})"),
        ),
    ]:
        with pytest.raises(ck.CheckpointError, match="checkpoint 'here' does not match its config.json") as e:
            ck.load_state_dict_checked(model, bad, "here")
        assert re.search(needle, str(e.value)), (needle, str(e.value))
    missing_all = {}
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_state_dict_checked(model, missing_all, "here")
    assert str(list(sd)[:3]) in str(e.value)
    with pytest.raises(ck.CheckpointError, match=f"{first} has dtype int64"):
        ck.load_state_dict_checked(model, {**sd, first: sd[first].long()}, "here")
    target = build_model(saved[2].model)
    ck.load_state_dict_checked(target, sd, "here")
    assert all(torch.equal(target.state_dict()[k], v) for k, v in sd.items())


def test_a_load_whose_weights_do_not_fit_names_the_checkpoint(tmp_path, saved):
    c = copy_of(saved, tmp_path)
    d = json.loads((c / "config.json").read_text())
    d["model"]["d_model"] = 48  # consistent checksums, but not the config these weights were trained with
    (c / "config.json").write_text(json.dumps(d))
    rehash(c, "config.json")
    with pytest.raises(ck.CheckpointError, match=f"^checkpoint '{c}' does not match its config.json"):
        ck.load_checkpoint(c)


def test_integer_state_of_an_integer_buffer_loads():
    m = torch.nn.Module()
    m.register_buffer("count", torch.zeros(2, dtype=torch.long))
    ck.load_state_dict_checked(m, {"count": torch.tensor([3, 4])}, "here")
    assert m.count.tolist() == [3, 4]


def test_nonfinite_weights_are_refused_at_load_unless_allowed(tmp_path, saved):
    c = copy_of(saved, tmp_path)
    sd = load_file(str(c / "model.safetensors"))
    name = sorted(sd)[1]
    sd[name][0] = float("inf")
    save_file(sd, str(c / "model.safetensors"))
    rehash(c, "model.safetensors")
    with pytest.raises(
        ck.CheckpointError, match=rf"holds NaN/inf in 1 weight tensors \(first {name}\).*allow_nonfinite=True"
    ):
        ck.load_checkpoint(c)
    with pytest.raises(ck.CheckpointError, match="NaN/inf"):
        nexus.load(c)
    m, _, _ = ck.load_checkpoint(c, allow_nonfinite=True)
    assert torch.isinf(m.state_dict()[name]).any()
    assert torch.isinf(nexus.load(c, allow_nonfinite=True).state_dict()[name]).any()


def test_truncated_weights_and_trainer_state_are_one_error_each(tmp_path, saved):
    c = copy_of(saved, tmp_path)
    for name in ("model.safetensors", "trainer_state.pt"):
        data = (c / name).read_bytes()
        (c / name).write_bytes(data[: len(data) // 2])
        rehash(c, name)
    with pytest.raises(ck.CheckpointError, match=r"model\.safetensors is corrupted or truncated"):
        ck.load_checkpoint(c)
    with pytest.raises(ck.CheckpointError, match=r"trainer_state\.pt is corrupted \("):
        ck.load_trainer_state(c)


def test_trainer_state_is_loaded_as_plain_data_onto_the_cpu(saved, monkeypatch):
    seen = {}
    real = torch.load

    def spy(f, **kw):
        seen.update(kw)
        return real(f, **kw)

    monkeypatch.setattr(ck.torch, "load", spy)
    ck.load_trainer_state(saved[0])
    assert seen == {"weights_only": True, "map_location": "cpu"}


def sharded_checkpoint(tmp_path: Path, saved, optim: bool) -> tuple[Path, dict, dict]:
    import warnings

    import torch.distributed.checkpoint as dcp

    c = copy_of(saved, tmp_path)
    sd = load_file(str(c / "model.safetensors"))
    for name in ("model.safetensors", "meta.json", MARKER):
        (c / name).unlink()
    opt = {"state": {"w": torch.arange(4.0)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": sd, "optim": opt}, checkpoint_id=str(c / ck.SHARDED_DIR))
    st = torch.load(c / "trainer_state.pt", weights_only=True)
    if optim:
        st["optimizer"] = {"kept": 1}
    torch.save(st, c / "trainer_state.pt")
    ck.write_checkpoint_files(c, saved[2], None, st)  # meta.json over the shards
    return c, sd, opt


def rewrite_meta(c: Path, cfg) -> None:
    (c / "meta.json").unlink()
    ck.write_checkpoint_files(c, cfg, None, torch.load(c / "trainer_state.pt", weights_only=True))


def test_a_sharded_checkpoint_loads_its_weights_and_optimizer_from_the_shards(tmp_path, saved):
    c, sd, opt = sharded_checkpoint(tmp_path, saved, optim=False)
    assert json.loads((c / "meta.json").read_text())["weights"] == ck.SHARDED_DIR
    m, _, _ = ck.load_checkpoint(c)
    assert all(torch.equal(m.state_dict()[k], v) for k, v in sd.items())
    st = ck.load_trainer_state(c)
    assert st["step"] == 7 and torch.equal(st["optimizer"]["state"]["w"], opt["state"]["w"])
    assert "optimizer" not in ck.load_trainer_state(c, with_optimizer=False)
    whole = ck.load_sharded(c, {"model", "optim"})
    assert sorted(whole) == ["model", "optim"] and all(torch.equal(whole["model"][k], v) for k, v in sd.items())
    assert list(ck.load_sharded(c, {"model"})) == ["model"]  # only what is asked is read


def test_a_step_lookup_reads_the_optimizer_shards_only(tmp_path, saved, monkeypatch):
    c, _, _ = sharded_checkpoint(tmp_path, saved, optim=False)
    asked = []
    real = ck.load_sharded

    def spy(path, keys=None):
        asked.append(keys)
        return real(path, keys)

    monkeypatch.setattr(ck, "load_sharded", spy)
    ck.load_trainer_state(c)
    assert asked == [{"optim"}]
    asked.clear()
    ck.load_checkpoint(c)  # and the weights' load reads the model shards only
    assert asked == [{"model"}]


def test_loading_shards_hides_dcps_single_process_notice_only(tmp_path, saved, monkeypatch):
    """DCP warns (UserWarning) that it loads without a process group, which is what nexus wants; any
    other warning of the load (a deprecation, say) still reaches the caller."""
    import warnings

    import torch.distributed.checkpoint.state_dict_loader as loader

    def warns(keys, checkpoint_id):
        warnings.warn("no process group: loading in a single process", UserWarning)
        warnings.warn("this loader is deprecated", FutureWarning)
        return {"model": {}}

    monkeypatch.setattr(loader, "_load_state_dict_from_keys", warns)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert ck.load_sharded(tmp_path, {"model"}) == {"model": {}}
    assert [(w.category, str(w.message)) for w in seen] == [(FutureWarning, "this loader is deprecated")]


def test_an_optimizer_state_already_in_trainer_state_is_not_read_from_the_shards(tmp_path, saved):
    c, _, _ = sharded_checkpoint(tmp_path, saved, optim=True)
    assert ck.load_trainer_state(c)["optimizer"] == {"kept": 1}


def test_model_safetensors_beside_shards_wins(tmp_path, saved):
    c, sd, _ = sharded_checkpoint(tmp_path, saved, optim=False)
    changed = {k: v + 1 for k, v in sd.items()}
    save_file(changed, str(c / "model.safetensors"))
    rewrite_meta(c, saved[2])
    m, _, _ = ck.load_checkpoint(c)
    assert all(torch.equal(m.state_dict()[k], v) for k, v in changed.items())


@pytest.mark.parametrize("damage", ["metadata", "shard"])
def test_damaged_shards_are_one_error_naming_the_folder(tmp_path, saved, damage):
    """DCP wraps a reader's error in a CheckpointException, a BaseException: before the fix it escaped
    `except Exception` as a traceback instead of one CheckpointError line."""
    c, _, _ = sharded_checkpoint(tmp_path, saved, optim=False)
    if damage == "metadata":
        (c / ck.SHARDED_DIR / ".metadata").write_bytes(b"\x00garbage")
    else:
        next((c / ck.SHARDED_DIR).glob("*.distcp")).unlink()
    with pytest.raises(ck.CheckpointError, match=rf"{ck.SHARDED_DIR} is corrupted or incomplete \(\w+: \S") as e:
        ck.load_sharded(c, {"model"})
    assert len(str(e.value).splitlines()) == 1


def test_a_shard_read_error_is_named_by_the_readers_own_error(tmp_path, monkeypatch):
    """The line names what the reader hit: the error a CheckpointException wraps (the first rank's),
    or the error itself when DCP raised it directly."""
    import torch.distributed.checkpoint.state_dict_loader as loader
    from torch.distributed.checkpoint.api import CheckpointException

    for raised, named in [
        (
            CheckpointException(
                "CheckpointException ranks",
                {0: (FileNotFoundError(2, "No such file", "__0_0.distcp"), __import__("traceback").StackSummary())},
            ),
            "(FileNotFoundError: [Errno 2] No such file: '__0_0.distcp')",
        ),
        (OSError("disk gone\nsecond line"), "(OSError: disk gone)"),
        (CheckpointException("no failures", {}), "(CheckpointException: CheckpointException ranks:dict_keys([]))"),
    ]:

        def fail(keys, checkpoint_id, raised=raised):
            raise raised

        monkeypatch.setattr(loader, "_load_state_dict_from_keys", fail)
        with pytest.raises(ck.CheckpointError) as e:
            ck.load_sharded(tmp_path, {"model"})
        assert str(e.value) == f"{tmp_path / ck.SHARDED_DIR} is corrupted or incomplete {named}"
