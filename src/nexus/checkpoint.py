"""Checkpoint directories: model.safetensors, config.json, trainer_state.pt, tokenizer, meta.json.

Written into a temporary sibling directory and renamed into place, so a crash never leaves a half
checkpoint under the final name. Loading verifies checksums and shapes and never unpickles
arbitrary objects (safetensors for weights, torch.load(weights_only=True) for trainer state).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .atomic import atomic_dir_write, recover_interrupted
from .config import ConfigError, RunConfig
from .config_migration import saved_run_config
from .outdir import CHECKPOINT, read_manifest
from .outdir.manifest import sha256_of

FORMAT_VERSION = 1


class CheckpointError(ConfigError):
    """A checkpoint directory that cannot be used (missing, truncated, corrupted, mismatched)."""


class NonFiniteWeightsError(RuntimeError):
    """A model holding NaN/inf weights was about to be saved; a checkpoint must stay a usable restart point."""


def nonfinite_tensors(state_dict: dict) -> list[str]:
    """Names of floating-point tensors holding NaN or inf."""
    return [
        k
        for k, v in state_dict.items()
        if torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]


_sha256 = sha256_of  # the one block-wise file digest nexus records (meta.json and the ownership manifest)


GIT_TIMEOUT_S = 5  # a save waits at most this long for the code's commit (meta.json's git_sha), then records ""


def _git_sha() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


SHARDED_DIR = "sharded"  # FSDP2 checkpoints: torch.distributed.checkpoint files instead of model.safetensors


def save_checkpoint(
    path,
    model,
    cfg: RunConfig,
    tokenizer=None,
    trainer_state: dict | None = None,
    extra_files: dict[str, str] | None = None,
    check=None,
) -> Path:
    """extra_files: {name: text} written beside the weights and covered by the checksums (e.g. an
    imported model's generation_config, kept for export). check: called with the complete checkpoint
    directory while it still has its temporary name (e.g. `nexus import --verify`); if it raises,
    `path` is left as it was."""
    sd = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    bad = nonfinite_tensors(sd)
    if bad:
        raise NonFiniteWeightsError(f"not saving {path}: {len(bad)} weight tensors hold NaN/inf (first {bad[0]})")

    def write(d: Path):
        for name, text in (extra_files or {}).items():
            (d / name).write_text(text)
        save_file(sd, str(d / "model.safetensors"))
        write_checkpoint_files(d, cfg, tokenizer, trainer_state)
        if check is not None:
            check(d)

    return atomic_dir_write(Path(path), write, CHECKPOINT, hashes=checksums_in_meta, enter=enters_run(path))


RUN_CHECKPOINT_NAME = re.compile(r"^(checkpoint|step_\d+)$")


def enters_run(ckpt) -> bool:
    """Whether a training checkpoint (checkpoint/, step_N/) saved at `ckpt` becomes one of its folder's
    recorded entries: the folder has a nexus manifest (a run directory, or a grown checkpoint resumed
    in place). The save enters it in the same recoverable step as its rename (nexus.atomic)."""
    ckpt = Path(ckpt)
    return bool(RUN_CHECKPOINT_NAME.match(ckpt.name)) and read_manifest(ckpt.parent) is not None


def checksums_in_meta(d: Path) -> dict[str, str]:
    """{file: sha256} a checkpoint's meta.json already holds (reused by its ownership manifest)."""
    return _json_object(d / "meta.json").get("sha256", {})


def write_checkpoint_files(d: Path, cfg: RunConfig, tokenizer=None, trainer_state: dict | None = None) -> None:
    """Everything beside the weights (config, tokenizer, trainer state), then meta.json with the
    checksum of every file, the sharded weights' files included."""
    (d / "config.json").write_text(cfg.to_json())
    if tokenizer is not None:
        tokenizer.save(d)
    if trainer_state is not None:
        torch.save(trainer_state, d / "trainer_state.pt")
    files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
    meta = {
        "format_version": FORMAT_VERSION,
        "torch": torch.__version__,
        "git_sha": _git_sha(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "sha256": {f: _sha256(d / f) for f in files},
        "weights": SHARDED_DIR if (d / SHARDED_DIR).is_dir() else "model.safetensors",
    }
    try:
        from importlib.metadata import version

        meta["nexus"] = version("nexus")
    except Exception:  # not installed as a distribution (running from a source tree)
        meta["nexus"] = "source"
    (d / "meta.json").write_text(json.dumps(meta, indent=2))


def is_sharded(path) -> bool:
    return (Path(path) / SHARDED_DIR).is_dir()


def load_sharded(path, keys: set[str] | None = None) -> dict:
    """A sharded (FSDP2) checkpoint read whole into this process: {"model": {name: tensor}, "optim":
    {...}} with full tensors, at any world size (1 included). torch.distributed.checkpoint does the
    resharding; `_load_state_dict_from_keys` is its loader for state dicts it has no template for."""
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    where = Path(path) / SHARDED_DIR
    try:
        import warnings

        with warnings.catch_warnings():  # "no process group: loading in a single process" is what we want
            warnings.simplefilter("ignore", UserWarning)
            return _load_state_dict_from_keys(keys, checkpoint_id=str(where))
    # DCP raises OSError / pickle errors for damaged files, or wraps them per rank in a CheckpointException,
    # which derives from BaseException (an `except Exception` let it out as a traceback)
    except (Exception, CheckpointException) as e:
        cause = next(iter(e.failures.values()))[0] if isinstance(e, CheckpointException) and e.failures else e
        raise CheckpointError(
            f"{where} is corrupted or incomplete ({type(cause).__name__}: "
            f"{str(cause).splitlines()[0][:120] if str(cause) else ''})"
        ) from None


def checkpoint_dir(path, flag: str = "--checkpoint") -> Path:
    """`path` as an existing checkpoint directory (a save killed between its two renames put back first)."""
    path = Path(path)
    if not path.is_dir():
        recover_interrupted(path)
    if not path.is_dir():
        raise CheckpointError(f"{flag}={str(path)!r} (valid: an existing checkpoint directory)")
    return path


def read_config(path, flag: str = "--checkpoint") -> RunConfig:
    path = checkpoint_dir(path, flag)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"{flag}={str(path)!r} has no config.json (valid: a directory written by nexus)")
    d = _json_object(cfg_file)
    try:
        return saved_run_config(d)
    except ConfigError as e:  # a field of the wrong type: say which file holds it
        raise CheckpointError(f"{cfg_file}: {e}") from None
    except (AttributeError, TypeError, KeyError) as e:  # a section of the wrong JSON type
        raise CheckpointError(
            f"{cfg_file} does not hold a nexus config ({type(e).__name__}: {str(e)[:100]}) "
            "(valid: the config.json nexus writes)"
        ) from None


def _json_object(f: Path) -> dict:
    """A checkpoint's JSON file that must hold an object: one CheckpointError line otherwise."""
    try:
        d = json.loads(f.read_text())
    except UnicodeDecodeError:
        raise CheckpointError(f"{f} is corrupted (not text)") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f} is corrupted (not JSON: {e.msg} at line {e.lineno})") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{f} holds a JSON {type(d).__name__}, not an object (valid: the {f.name} nexus writes)")
    return d


def verify_checksums(path: Path, flag: str = "--checkpoint") -> None:
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise CheckpointError(f"{flag}={str(path)!r} has no meta.json (valid: a complete nexus checkpoint)")
    meta = _json_object(meta_file)
    sums = meta.get("sha256", {})
    if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
        raise CheckpointError(
            f"{meta_file}: sha256 is a JSON {type(sums).__name__} (valid: an object of file name -> "
            "hex digest, as nexus writes it)"
        )
    for name, digest in sums.items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"checkpoint {str(path)!r} is missing {name} (truncated copy?)")
        if _sha256(f) != digest:
            raise CheckpointError(f"checkpoint file {str(f)!r} is corrupted (sha256 mismatch with meta.json)")


def load_state_dict_checked(model, sd: dict, where: str) -> None:
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    extra = [k for k in sd if k not in own]
    bad = [k for k in own if k in sd and tuple(own[k].shape) != tuple(sd[k].shape)]
    cast = [k for k in own if k in sd and own[k].is_floating_point() and not sd[k].is_floating_point()]
    if cast:  # load_state_dict would silently cast integer weights to floats
        raise CheckpointError(
            f"checkpoint {where!r}: {cast[0]} has dtype {str(sd[cast[0]].dtype).removeprefix('torch.')} "
            "(valid: floating-point weights, as nexus saves them)"
        )
    if missing or extra or bad:
        detail = (
            f"missing {missing[:3]}"
            if missing
            else f"unexpected {extra[:3]}"
            if extra
            else f"{bad[0]} has shape {tuple(sd[bad[0]].shape)} but config.json implies {tuple(own[bad[0]].shape)}"
        )
        raise CheckpointError(f"checkpoint {where!r} does not match its config.json ({detail})")
    model.load_state_dict(sd, strict=True)


def load_checkpoint(
    path,
    overrides: dict | None = None,
    map_location: str = "cpu",
    allow_nonfinite: bool = False,
    flag: str = "--checkpoint",
    model_cfg=None,
    stored_config: bool = True,
):
    """-> (model, RunConfig, tokenizer). `overrides` sets model fields that may change at load time
    (e.g. {'arch.t_inner': 12} for test-time depth scaling). `model_cfg` (a validated ModelConfig)
    builds the model instead of the stored one, for a run that changed fields its weights do not depend
    on; the returned RunConfig stays the stored one, or is None with stored_config=False: a caller that
    holds the run's config already (a resumed trainer) has config.json not read again. Weights holding
    NaN/inf are refused unless `allow_nonfinite` (to inspect a diverged model)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"checkpoint path must be a str or os.PathLike (a checkpoint directory), not "
            f"{type(path).__name__}: {path!r}"
        )
    from .config_overrides import apply_override
    from .data.tokenizer_files import load_tokenizer_from_dir
    from .models import build_model

    cfg = read_config(path, flag) if model_cfg is None or stored_config else None
    path = checkpoint_dir(path, flag)
    verify_checksums(path, flag)
    for k, v in (overrides or {}).items() if cfg is not None else ():
        apply_override(cfg, f"model.{k}", v)
    if model_cfg is None:  # a given model_cfg comes from a config its caller validated
        cfg.validate()
    weights = path / "model.safetensors"
    if is_sharded(path) and not weights.is_file():
        sd = load_sharded(path, {"model"})["model"]
    else:
        try:
            sd = load_file(str(weights), device=map_location)
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{weights} is corrupted or truncated ({str(e).splitlines()[0][:120]})") from None
    bad = [] if allow_nonfinite else nonfinite_tensors(sd)
    if bad:
        raise CheckpointError(
            f"checkpoint {str(path)!r} holds NaN/inf in {len(bad)} weight tensors (first {bad[0]}) "
            "(valid: a finite checkpoint; nexus.load(..., allow_nonfinite=True) to inspect it)"
        )
    model = build_model(cfg.model if model_cfg is None else model_cfg)
    load_state_dict_checked(model, sd, str(path))
    return model, cfg, load_tokenizer_from_dir(path)


def load_trainer_state(path, with_optimizer: bool = True) -> dict | None:
    """trainer_state.pt (weights_only). A sharded checkpoint keeps its optimizer state in the shards:
    it is read (whole) only when `with_optimizer` (a step lookup does not pay for it)."""
    f = Path(path) / "trainer_state.pt"
    if not f.is_file():
        return None
    try:
        st = torch.load(f, weights_only=True, map_location="cpu")
    except Exception as e:  # torch raises several types for truncated/corrupt pickles
        raise CheckpointError(f"{f} is corrupted ({type(e).__name__})") from None
    if (
        with_optimizer and is_sharded(path) and "optimizer" not in st
    ):  # FSDP2: the optimizer state lives in the sharded files
        st["optimizer"] = load_sharded(path, {"optim"})["optim"]
    return st


def load(path, allow_nonfinite: bool = False, **overrides):
    """Checkpoint directory -> model in eval mode (the public `nexus.load`). Keyword overrides set model
    fields (e.g. t_inner for test-time depth); `allow_nonfinite` loads a diverged (NaN/inf) model."""
    model, cfg, tok = load_checkpoint(path, overrides or None, allow_nonfinite=allow_nonfinite)
    model.eval()
    model.tokenizer = tok
    return model
