"""HF checkpoint weights: read them from a directory and rename keys between HF and nexus.

The renaming is a table of regular expressions, one row per tensor kind, used in both directions,
so import and export cannot drift apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ..checkpoint import CheckpointError

# (HF key, nexus key) with {i} standing for the layer index; HF keys live under "model." except lm_head.
KEY_TABLE = [
    ("model.embed_tokens.weight", "embed.weight"),
    ("model.layers.{i}.input_layernorm.weight", "layers.{i}.attn_norm.weight"),
    ("model.layers.{i}.self_attn.q_proj.weight", "layers.{i}.attn.q_proj.weight"),
    ("model.layers.{i}.self_attn.k_proj.weight", "layers.{i}.attn.k_proj.weight"),
    ("model.layers.{i}.self_attn.v_proj.weight", "layers.{i}.attn.v_proj.weight"),
    ("model.layers.{i}.self_attn.q_proj.bias", "layers.{i}.attn.q_proj.bias"),
    ("model.layers.{i}.self_attn.k_proj.bias", "layers.{i}.attn.k_proj.bias"),
    ("model.layers.{i}.self_attn.v_proj.bias", "layers.{i}.attn.v_proj.bias"),
    ("model.layers.{i}.self_attn.o_proj.weight", "layers.{i}.attn.o_proj.weight"),
    ("model.layers.{i}.self_attn.q_norm.weight", "layers.{i}.attn.q_norm.weight"),
    ("model.layers.{i}.self_attn.k_norm.weight", "layers.{i}.attn.k_norm.weight"),
    ("model.layers.{i}.post_attention_layernorm.weight", "layers.{i}.mlp_norm.weight"),
    ("model.layers.{i}.mlp.gate_proj.weight", "layers.{i}.mlp.gate_proj.weight"),
    ("model.layers.{i}.mlp.up_proj.weight", "layers.{i}.mlp.up_proj.weight"),
    ("model.layers.{i}.mlp.down_proj.weight", "layers.{i}.mlp.down_proj.weight"),
    ("model.norm.weight", "norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
]
# RoPE frequency buffers that older Llama checkpoints saved; recomputed from rope_theta, so dropped.
IGNORED = re.compile(r"rotary_emb\.inv_freq$")


def _compile(pattern: str) -> re.Pattern:
    return re.compile("^" + re.escape(pattern).replace(r"\{i\}", r"(?P<i>\d+)") + "$")


_HF_TO_NEXUS = [(_compile(h), n) for h, n in KEY_TABLE]
_NEXUS_TO_HF = [(_compile(n), h) for h, n in KEY_TABLE]


def _rename(key: str, table) -> str | None:
    for rx, target in table:
        m = rx.match(key)
        if m:
            return target.replace("{i}", m.group("i")) if "{i}" in target else target
    return None


def hf_key_to_nexus(key: str) -> str | None:
    if not key.startswith(("model.", "lm_head.")):
        key = "model." + key  # weights saved from the bare LlamaModel have no "model." prefix
    return _rename(key, _HF_TO_NEXUS)


def nexus_key_to_hf(key: str) -> str | None:
    return _rename(key, _NEXUS_TO_HF)


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        # weights_only=True: a .bin is a pickle, and loading must never run arbitrary code.
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # safetensors/pickle raise several exception types for damaged files
        raise CheckpointError(
            f"HF weights file {str(path)!r} is corrupted or truncated "
            f"({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''})"
        ) from None


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of a HF checkpoint directory (single or sharded, safetensors or .bin), as fp32."""
    for single, index in (
        ("model.safetensors", "model.safetensors.index.json"),
        ("pytorch_model.bin", "pytorch_model.bin.index.json"),
    ):
        if (directory / single).is_file():
            files = [directory / single]
            break
        if (directory / index).is_file():
            try:
                shards = sorted(set(json.loads((directory / index).read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, AttributeError):
                raise CheckpointError(
                    f"{str(directory / index)!r} is corrupted (valid: a HF weight index with weight_map)"
                ) from None
            files = [directory / s for s in shards]
            missing = [str(f.name) for f in files if not f.is_file()]
            if missing:
                raise CheckpointError(f"--hf={str(directory)!r} is missing shard {missing[0]} listed in {index}")
            break
    else:
        raise CheckpointError(
            f"--hf={str(directory)!r} has no model.safetensors or pytorch_model.bin "
            "(valid: a directory written by save_pretrained)"
        )
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(_load_file(f))
    return {k: v.float() for k, v in sd.items()}
