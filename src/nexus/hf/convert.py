"""import_hf / export_hf: move the baseline between nexus and HF `transformers` with equal logits.

The mapping is exact because our baseline computes what HF Llama/Qwen compute: RMSNorm in fp32,
rotate-half RoPE, SwiGLU, GQA, optional QK-norm and q/k/v biases. Tests hold it to 1e-5 in fp32.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint import CheckpointError, atomic_dir_write, load_state_dict_checked
from ..outdir import HF_EXPORT
from ..config import ConfigError, ModelConfig, RunConfig
from .config_map import (check_exportable, hf_architecture_for, hf_config_from_model, model_config_from_hf,
                         require_transformers)
from ..data.hf_tokenizer import tokenizer_from_hf_dir, write_hf_tokenizer
from .weights import IGNORED, hf_key_to_nexus, nexus_key_to_hf, read_hf_weights


def read_hf_config(directory: Path):
    transformers = require_transformers()
    if not directory.is_dir():
        raise CheckpointError(f"--hf={str(directory)!r} (valid: an existing HF model directory)")
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"--hf={str(directory)!r} has no config.json (valid: a directory written by save_pretrained)")
    try:
        return transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True)
    except Exception as e:  # transformers raises ValueError/OSError/KeyError for unknown or broken configs
        raise CheckpointError(f"{str(directory / 'config.json')!r} is not a usable HF config "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from None


def hf_state_to_nexus(hf_sd: dict, cfg: ModelConfig, where: str) -> dict:
    sd = {}
    for key, value in hf_sd.items():
        if IGNORED.search(key):
            continue
        if key.endswith("self_attn.o_proj.bias"):
            # Llama/Qwen3 with attention_bias carry an output bias that our attention lacks; only zeros map exactly.
            if value.abs().max() > 0:
                raise ConfigError(f"{where}: {key} is non-zero (valid: attention_bias checkpoints whose o_proj "
                                  "bias is zero; nexus attention has no output bias)")
            continue
        name = hf_key_to_nexus(key)
        if name is None:
            raise CheckpointError(f"{where}: unexpected HF tensor {key!r} (valid: Llama/Qwen2/Qwen3 decoder weights)")
        sd[name] = value
    if cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)  # tied checkpoints may still store the (identical) head
    return sd


def import_hf(directory) -> tuple[torch.nn.Module, RunConfig]:
    """Local HF Llama/Qwen2/Qwen3 checkpoint directory -> (TransformerLM in eval mode, RunConfig).

    The tokenizer (if any) is attached as `model.tokenizer`, and the import notes as `model.import_notes`."""
    from ..models import build_model

    directory = Path(directory)
    hf_cfg = read_hf_config(directory)
    mcfg, arch = model_config_from_hf(hf_cfg)
    cfg = RunConfig(model=mcfg)
    cfg.preset = f"hf:{arch}"
    cfg.data.seq_len = min(cfg.data.seq_len, mcfg.max_seq_len)
    tokenizer, note = tokenizer_from_hf_dir(directory, hf_cfg)
    if tokenizer is not None:
        cfg.data.tokenizer = str(directory / "tokenizer.json")  # where the vocabulary came from
    cfg.validate()
    sd = hf_state_to_nexus(read_hf_weights(directory), mcfg, str(directory))
    model = build_model(mcfg)
    load_state_dict_checked(model, sd, str(directory))  # every tensor replaced; shapes and names checked
    model.eval()
    if tokenizer is None and mcfg.vocab_size < 259:
        note += f" (warning: byte ids reach 258 but the model has only {mcfg.vocab_size} tokens)"
    model.tokenizer = tokenizer
    model.import_notes = [f"architecture {arch}", note]
    model.generation_config = read_generation_config(directory / GENERATION_CONFIG)
    return model, cfg


GENERATION_CONFIG = "generation_config.json"  # HF's file; a nexus checkpoint keeps it as hf_generation_config.json
STORED_GENERATION_CONFIG = "hf_generation_config.json"


def read_generation_config(path: Path) -> dict | None:
    """A generation_config.json as a dict (None when absent or unreadable)."""
    import json

    path = Path(path)
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return d if isinstance(d, dict) else None


def nexus_state_to_hf(model, cfg: ModelConfig, arch: str) -> dict:
    sd = {}
    for key, value in model.state_dict().items():
        hf_key = nexus_key_to_hf(key)
        if hf_key is None:
            raise ConfigError(f"model tensor {key!r} has no HF counterpart (valid: the baseline Transformer++)")
        sd[hf_key] = value.detach().to("cpu", torch.float32).contiguous().clone()
    if arch == "Qwen3ForCausalLM" and cfg.attention_bias:
        for i in range(cfg.n_layers):  # Qwen3's attention_bias also biases o_proj; zeros keep logits equal
            sd[f"model.layers.{i}.self_attn.o_proj.bias"] = torch.zeros(cfg.d_model)
    if cfg.logit_scale != 1.0:
        # HF heads have no logit multiplier (width growth sets one for a tied head): fold it into an
        # untied lm_head, so logits stay equal and the input embeddings stay unscaled.
        head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
        sd["lm_head.weight"] = head * cfg.logit_scale
    return sd


def export_hf(model, cfg, out_dir, tokenizer=None, generation_config: dict | None = None) -> dict:
    """Write a baseline model as a HF checkpoint directory `transformers` loads with the same logits.

    cfg: RunConfig or ModelConfig. generation_config: an imported model's generation_config.json,
    written back unchanged; without one, a generation_config.json with the tokenizer's bos/eos/pad ids.
    Returns {"architecture", "out", "files", "tokenizer"}."""
    from safetensors.torch import save_file

    mcfg = cfg.model if isinstance(cfg, RunConfig) else cfg
    check_exportable(mcfg)
    arch = hf_architecture_for(mcfg)
    sd = nexus_state_to_hf(model, mcfg, arch)
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    info = {"architecture": arch, "tokenizer": "none (byte-level ids 0-255 + 3 specials)"}
    if generation_config is None:
        generation_config = getattr(model, "generation_config", None)

    def write(d: Path):
        import json

        special = write_hf_tokenizer(tokenizer, d, mcfg.max_seq_len) if tokenizer is not None else {}
        if special:
            info["tokenizer"] = "tokenizer.json"
        hf_cfg = hf_config_from_model(mcfg, arch, special)
        hf_cfg.dtype = "float32"
        hf_cfg.save_pretrained(str(d))  # transformers may add its own generation_config.json; ours replaces it
        gen = dict(generation_config) if generation_config else {
            f"{k}_token_id": v for k, v in special.items() if v is not None}
        if gen:
            (d / GENERATION_CONFIG).write_text(json.dumps(gen, indent=2))
        save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
        info["files"] = sorted(p.name for p in d.iterdir())

    info["out"] = str(atomic_dir_write(Path(out_dir), write, marker_kind=HF_EXPORT))
    return info
