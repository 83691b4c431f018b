"""import_hf / export_hf: move the baseline between nexus and HF `transformers` with equal logits.

The mapping is exact because our baseline computes what HF Llama/Qwen compute: RMSNorm in fp32,
rotate-half RoPE, SwiGLU, GQA, optional QK-norm and q/k/v biases. Tests hold it to 1e-5 in fp32.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint import CheckpointError, atomic_dir_write, load_state_dict_checked
from ..config import ConfigError, ModelConfig, RunConfig
from ..data.hf_tokenizer import write_hf_tokenizer
from ..data.tokenizer_files import tokenizer_from_hf_dir
from ..outdir import HF_EXPORT
from .config_map import (
    check_exportable,
    hf_architecture_for,
    hf_config_from_model,
    model_config_from_hf,
    require_transformers,
)
from .weights import IGNORED, hf_key_to_nexus, nexus_key_to_hf, read_hf_weights


def read_hf_config(directory: Path):
    transformers = require_transformers()
    if not directory.is_dir():
        raise CheckpointError(f"--hf={str(directory)!r} (valid: an existing HF model directory)")
    if not (directory / "config.json").is_file():
        raise CheckpointError(
            f"--hf={str(directory)!r} has no config.json (valid: a directory written by save_pretrained)"
        )
    try:
        return transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True)
    except Exception as e:  # transformers raises ValueError/OSError/KeyError for unknown or broken configs
        raise CheckpointError(
            f"{str(directory / 'config.json')!r} is not a usable HF config "
            f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
        ) from None


def hf_state_to_nexus(hf_sd: dict, cfg: ModelConfig, where: str) -> dict:
    sd = {}
    for key, value in hf_sd.items():
        if IGNORED.search(key):
            continue
        if key.endswith("self_attn.o_proj.bias"):
            # Llama/Qwen3 with attention_bias carry an output bias that our attention lacks; only zeros map exactly.
            if value.abs().max() > 0:
                raise ConfigError(
                    f"{where}: {key} is non-zero (valid: attention_bias checkpoints whose o_proj "
                    "bias is zero; nexus attention has no output bias)"
                )
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
    model.generation_config = read_json_object(directory / GENERATION_CONFIG)
    model.hf_special_ids = {name: getattr(hf_cfg, f"{name}_token_id", None) for name in SPECIAL_NAMES}
    return model, cfg


GENERATION_CONFIG = "generation_config.json"  # HF's file; a nexus checkpoint keeps it as hf_generation_config.json
STORED_GENERATION_CONFIG = "hf_generation_config.json"
# An imported model's own bos/eos/pad ids from its config.json, kept for export: without a tokenizer
# they are the only ones the model has (the byte tokenizer a checkpoint falls back to is not its own).
STORED_SPECIAL_IDS = "hf_special_ids.json"
SPECIAL_NAMES = ("bos", "eos", "pad")


def read_json_object(path: Path) -> dict | None:
    """A JSON file holding an object (generation_config.json, hf_special_ids.json) as a dict; None
    when absent or unreadable."""
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


def export_special_ids(mcfg: ModelConfig, tokenizer, imported: dict | None) -> dict:
    """{"bos"|"eos"|"pad": id, list of ids or None} for config.json: an imported model's own ids, a
    missing one filled from the tokenizer. Every id must be a row of the embedding, or `transformers`
    cannot load the export (pad_token_id becomes nn.Embedding's padding_idx)."""
    ids = {name: (imported or {}).get(name) for name in SPECIAL_NAMES}
    for name in SPECIAL_NAMES:
        if ids[name] is None and tokenizer is not None:
            ids[name] = getattr(tokenizer, f"{name}_id", None)
    for name, value in ids.items():
        for tid in value if isinstance(value, list) else [value]:
            if tid is not None and not (isinstance(tid, int) and 0 <= tid < mcfg.vocab_size):
                source = (
                    "the imported config.json"
                    if (imported or {}).get(name) is not None
                    else f"the checkpoint's {getattr(tokenizer, 'kind', type(tokenizer).__name__)} tokenizer"
                )
                raise ConfigError(
                    f"{name}_token_id={value!r} from {source} is outside the model's vocabulary "
                    f"(valid: an id in 0..{mcfg.vocab_size - 1} = model.vocab_size - 1, or none; "
                    "a tokenizer with more ids than the model has cannot be exported with it)"
                )
    return ids


def export_hf(
    model,
    cfg,
    out_dir,
    tokenizer=None,
    generation_config: dict | None = None,
    special_ids: dict | None = None,
    verify_tolerance: float | None = None,
) -> dict:
    """Write a baseline model as a HF checkpoint directory `transformers` loads with the same logits.

    cfg: RunConfig or ModelConfig. generation_config: an imported model's generation_config.json,
    written back unchanged; without one, a generation_config.json with the bos/eos/pad ids.
    special_ids: an imported model's own {"bos", "eos", "pad"} ids (default `model.hf_special_ids`),
    written to config.json in preference to the tokenizer's. verify_tolerance: reload the written
    directory with `transformers` before it takes the name `out_dir`, and raise RuntimeError (leaving
    nothing at out_dir) when it fails to load or its logits differ from ours by more.
    Returns {"architecture", "out", "files", "tokenizer"} (+ "max_logit_diff" when verified)."""
    from safetensors.torch import save_file

    mcfg = cfg.model if isinstance(cfg, RunConfig) else cfg
    check_exportable(mcfg)
    arch = hf_architecture_for(mcfg)
    sd = nexus_state_to_hf(model, mcfg, arch)
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if special_ids is None:
        special_ids = getattr(model, "hf_special_ids", None)
    special = export_special_ids(mcfg, tokenizer, special_ids)  # bad ids refused before anything is written
    info = {"architecture": arch, "tokenizer": "none"}
    if generation_config is None:
        generation_config = getattr(model, "generation_config", None)

    def write(d: Path):
        import json

        if tokenizer is not None and write_hf_tokenizer(tokenizer, d, mcfg.max_seq_len):
            info["tokenizer"] = "tokenizer.json"
        hf_cfg = hf_config_from_model(mcfg, arch, special)
        hf_cfg.dtype = "float32"
        hf_cfg.save_pretrained(str(d))  # transformers may add its own generation_config.json; ours replaces it
        gen = (
            dict(generation_config)
            if generation_config
            else {f"{k}_token_id": v for k, v in special.items() if v is not None}
        )
        if gen:
            (d / GENERATION_CONFIG).write_text(json.dumps(gen, indent=2))
        save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
        info["files"] = sorted(p.name for p in d.iterdir())
        if verify_tolerance is not None:  # still under the temporary name: a failed check leaves nothing behind
            info["max_logit_diff"] = verified_logit_difference(model, d, verify_tolerance)

    info["out"] = str(atomic_dir_write(Path(out_dir), write, HF_EXPORT))
    return info


def verified_logit_difference(model, hf_dir: Path, tolerance: float) -> float:
    """max |logit difference| of the HF directory we just wrote; RuntimeError when `transformers`
    cannot load it or the difference exceeds `tolerance`: the input was checked, so either is our fault."""
    from .verify import first_line, max_logit_difference, within_tolerance

    try:
        diff = max_logit_difference(model, hf_dir)
    except Exception as e:  # transformers raises many types (AssertionError, ValueError, OSError) for a bad directory
        raise RuntimeError(f"the HF export does not load in transformers ({first_line(e)}); nothing was written") from e
    return within_tolerance(diff, tolerance, "the HF export's logits differ from nexus's")
