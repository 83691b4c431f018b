"""Packed ternary export: BitLinear weights as 2-bit (or base-3) codes plus one fp32 scale per tensor.

File = one safetensors file (a well-kept, mmap-able container that never unpickles):
  <name>.ternary_codes  uint8, the packed codes of a BitLinear weight (2 bits or 1.6 bits each)
  <name>.ternary_scale  float32 (1,), gamma = mean|W| of that weight
  every other tensor    float32 as in the model (embeddings, norms, conv): full precision, so the
                        packed model's logits are bitwise those of the unpacked model
metadata: format/version, packing, the run config, the tokenizer, each packed tensor's shape and a
sha256 over all tensor bytes (safetensors checks the header, not the payload).

The reported file size is the size of this file on disk: embeddings and scales included.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import CheckpointError
from ..models.bitlinear import PACKED_KERNELS, BitLinear, PackedTernaryLinear, ternary_codes, ternary_scale

FORMAT = "nexus-ternary"
VERSION = "1"
PACKINGS = ("2bit", "base3")
_CODES, _SCALE = ".ternary_codes", ".ternary_scale"


# ----------------------------------------------------------------------------- packing
def pack_codes(codes: np.ndarray, packing: str) -> np.ndarray:
    """Flat int codes in {-1, 0, 1} -> uint8 bytes. 2bit: 4 codes per byte; base3: 5 per byte (3^5 = 243)."""
    u = (codes.reshape(-1).astype(np.int16) + 1).astype(np.uint8)  # {0, 1, 2}
    per = 4 if packing == "2bit" else 5
    pad = (-len(u)) % per
    u = np.concatenate([u, np.ones(pad, dtype=np.uint8)]).reshape(-1, per).astype(np.uint16)
    weights = (np.array([1, 4, 16, 64]) if packing == "2bit" else 3 ** np.arange(5)).astype(np.uint16)
    return (u * weights).sum(axis=1).astype(np.uint8)


def unpack_codes(packed: np.ndarray, n: int, packing: str, where: str) -> np.ndarray:
    """Inverse of pack_codes; bytes that no packing can produce mean the file is corrupted."""
    b = packed.astype(np.int16)
    if packing == "2bit":
        digits = np.stack([(b >> s) & 3 for s in (0, 2, 4, 6)], axis=1)
        bad = bool((digits == 3).any())
    else:
        bad = bool((b > 242).any())
        digits = np.stack([(b // 3**i) % 3 for i in range(5)], axis=1)
    flat = digits.reshape(-1)
    if bad or flat.size < n:
        raise CheckpointError(f"{where} is corrupted (invalid packed ternary codes)")
    return (flat[:n] - 1).astype(np.int8)


# ----------------------------------------------------------------------------- tokenizer in metadata
def _tokenizer_meta(tok) -> dict:
    if tok is None:
        return {"kind": "none"}
    if getattr(tok, "kind", "") == "bpe":
        return {"kind": "bpe", "json": tok.tok.to_str()}
    return {"kind": tok.kind}


def _tokenizer_from_meta(meta: dict, where: str):
    from ..data.tokenizer import BPETokenizer, ByteTokenizer

    kind = meta.get("kind")
    if kind == "bpe":
        from tokenizers import Tokenizer

        return BPETokenizer(Tokenizer.from_str(meta["json"]))
    if kind == "byte_chat":
        from ..data.chat import ChatByteTokenizer

        return ChatByteTokenizer()
    if kind in ("byte", "none"):
        return ByteTokenizer()
    raise CheckpointError(f"{where} has an unknown tokenizer kind {kind!r} (valid: byte, byte_chat, bpe)")


def _digest(tensors: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(name.encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# ----------------------------------------------------------------------------- export
def ternary_tensors(model, packing: str = "2bit") -> tuple[dict, dict, dict]:
    """-> (tensors, packed shapes, stats) for any model holding BitLinear layers."""
    if packing not in PACKINGS:
        from ..config import ConfigError

        raise ConfigError(f"--packing={packing!r} (valid: {'|'.join(PACKINGS)})")
    ternary = {name: m for name, m in model.named_modules() if isinstance(m, BitLinear)}
    if not ternary:
        from ..config import ConfigError

        raise ConfigError(
            "--format ternary needs a model with BitLinear layers (valid: a "
            "model.arch.kind=recurrent checkpoint with model.arch.ternary=true)"
        )
    tensors, shapes = {}, {}
    n_ternary = packed_bytes = 0
    skip = {f"{name}.weight" for name in ternary}
    for name, m in ternary.items():
        gamma = ternary_scale(m.weight)
        codes = ternary_codes(m.weight, gamma).numpy()
        key = f"{name}.weight"
        packed = pack_codes(codes, packing)
        tensors[key + _CODES] = torch.from_numpy(packed)
        tensors[key + _SCALE] = gamma.reshape(1).float()
        shapes[key] = list(m.weight.shape)
        n_ternary += codes.size
        packed_bytes += packed.size
    n_other = 0
    for key, v in model.state_dict().items():
        if key in skip:
            continue
        tensors[key] = v.detach().float().contiguous().cpu()
        n_other += v.numel()
    stats = {
        "ternary_params": n_ternary,
        "other_params": n_other,
        "ternary_tensors": len(ternary),
        "packed_ternary_bytes": packed_bytes,
        "bits_per_ternary_weight": 8.0 * packed_bytes / max(n_ternary, 1),
        "bits_per_ternary_weight_with_scales": 8.0 * (packed_bytes + 4 * len(ternary)) / max(n_ternary, 1),
    }
    return tensors, shapes, stats


def save_ternary(model, cfg, tokenizer, out_path, packing: str = "2bit") -> dict:
    """Write the packed file atomically (recorded temporary name, fsync, rename) and return its size
    report. A kill mid-write leaves only the recorded temporary, which the next writer removes."""
    from safetensors.torch import save_file

    from ..atomic import output_lock, write_file_atomic

    tensors, shapes, stats = ternary_tensors(model, packing)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "packing": packing,
        "config": cfg.to_json(),
        "tokenizer": json.dumps(_tokenizer_meta(tokenizer)),
        "shapes": json.dumps(shapes),
        "sha256": _digest(tensors),
    }
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    lk = output_lock(out)
    try:
        write_file_atomic(out, lambda tmp: save_file(tensors, str(tmp), metadata=meta), lk)
    finally:
        if lk is not None:
            lk.release()
    size = out.stat().st_size
    return {
        "path": str(out),
        "format": "ternary",
        "packing": packing,
        "file_bytes": size,
        "file_mb": size / 1e6,
        **stats,
    }


def export_ternary(checkpoint_dir, out_path, packing: str = "2bit") -> dict:
    """`nexus export --format ternary`: checkpoint directory -> packed ternary file; returns the report
    (path, file_bytes, file_mb, ternary_params, other_params, bits_per_ternary_weight, ...)."""
    from ..checkpoint import load_checkpoint

    model, cfg, tok = load_checkpoint(checkpoint_dir)
    return save_ternary(model, cfg, tok, out_path, packing)


# ----------------------------------------------------------------------------- load
def _say_stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr, flush=True)


def load_ternary(path, kernel: str = "auto", overrides: dict | None = None, device="cpu", say=_say_stderr):
    """Packed file -> (model in eval mode with PackedTernaryLinear layers on `device`, RunConfig, tokenizer).

    kernel "auto" (default) times every kernel this CPU can run on the model's own matrices at batch
    1, dense included, and takes the fastest (models/ternary_kernel_choice.py); `say` (default: print
    to stderr; None: silent) gets one line with the choice, the times and the CPU, also kept as
    `model.kernel_choice`. "fp32-2bit" / "fp32-int8" decode with numba loops that accumulate in fp32
    (outputs match dense to fp32 rounding); "int4" / "int8" with torch's weight-only CPU matmuls
    (bf16-precision activations); "dense" materializes fp32 weights whose logits equal the unpacked
    model's bitwise (models/bitlinear.py PackedTernaryLinear). The non-dense kernels exist for CPUs
    only: on any other device "auto" is dense, and the others are refused.
    `overrides` sets model fields that may change at load time, as for load_checkpoint (e.g.
    {'arch.t_inner': 12})."""
    from safetensors import SafetensorError, safe_open

    from ..checkpoint import load_state_dict_checked
    from ..config import ConfigError
    from ..config_migration import saved_run_config
    from ..config_overrides import apply_override
    from ..models import build_model

    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise CheckpointError(
            f"ternary file {where!r} does not exist (valid: a file written by nexus export --format ternary)"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            f"ternary file {where!r} is corrupted or truncated ({str(e).splitlines()[0][:100]})"
        ) from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"ternary file {where!r} is not a nexus ternary export (format={meta.get('format')!r})")
    if meta.get("sha256") != _digest(tensors):
        raise CheckpointError(f"ternary file {where!r} is corrupted (sha256 of its tensors does not match its header)")
    try:
        cfg = saved_run_config(json.loads(meta["config"])).validate()
        shapes = json.loads(meta["shapes"])
        packing = meta["packing"]
        tok_meta = json.loads(meta["tokenizer"])
    except (KeyError, json.JSONDecodeError, ConfigError) as e:
        raise CheckpointError(f"ternary file {where!r} has a damaged header ({type(e).__name__})") from None
    for k, v in (overrides or {}).items():
        apply_override(cfg, f"model.{k}", v)
    cfg.validate()
    if packing not in PACKINGS:
        raise CheckpointError(f"ternary file {where!r} has packing={packing!r} (valid: {'|'.join(PACKINGS)})")
    if kernel not in PACKED_KERNELS:
        raise ConfigError(f"kernel={kernel!r} (valid: {'|'.join(PACKED_KERNELS)})")
    device = torch.device(device)
    if device.type != "cpu":
        if kernel != "auto" and kernel != "dense":
            raise ConfigError(
                f"kernel={kernel!r} runs on CPU only, not on device={str(device)!r} (valid there: auto|dense)"
            )
        kernel = "dense"  # the low-bit kernels (torch's and ours) exist for CPU only
    model = build_model(cfg.model)
    found = []  # (name, module, codes, gamma, bias) of every BitLinear, in model order
    for name, m in list(model.named_modules()):
        if not isinstance(m, BitLinear):
            continue
        key = f"{name}.weight"
        if key not in shapes or key + _CODES not in tensors:
            raise CheckpointError(f"ternary file {where!r} lacks packed weights for {key} (config mismatch)")
        shape = shapes[key]
        if list(m.weight.shape) != shape:
            raise CheckpointError(
                f"ternary file {where!r}: {key} has shape {shape} but its config implies {list(m.weight.shape)}"
            )
        n = int(np.prod(shape))
        codes = torch.from_numpy(unpack_codes(tensors.pop(key + _CODES).numpy(), n, packing, where)).reshape(shape)
        gamma = tensors.pop(key + _SCALE).reshape(())
        bias = tensors.pop(f"{name}.bias") if m.bias is not None else None
        found.append((name, m, codes, gamma, bias))
    choice = None
    if kernel == "auto" and found:
        from ..models.ternary_kernel_choice import choose_kernel

        choice = choose_kernel([(codes, gamma) for _, _, codes, gamma, _ in found], PackedTernaryLinear)
        kernel = choice.kernel
        if say is not None:
            say(choice.why())
    fallback = []
    for name, m, codes, gamma, bias in found:
        packed = PackedTernaryLinear(codes, gamma, bias, m.act_quant, m.input_norm, m.norm_eps, kernel)
        if packed.kernel != kernel:
            fallback.append(f"{name} ({packed.out_features}x{packed.in_features}: {packed.kernel})")
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, packed)
    if fallback and say is not None:
        say(
            f"ternary kernel {kernel}: {len(fallback)} matrices use another kernel, their shape is not one torch's "
            f"kernel takes (int4: out_features a multiple of 16 and in_features of 32; int8: in_features a multiple "
            f"of 16): {', '.join(fallback[:4])}{' ...' if len(fallback) > 4 else ''}"
        )
    model.kernel_choice = choice
    load_state_dict_checked(model, tensors, where)
    model.to(device).eval()
    tok = _tokenizer_from_meta(tok_meta, where)
    model.tokenizer = tok
    return model, cfg, tok
