"""Compare our logits with HF `transformers` on a fixed batch: the check `--verify` runs after import/export."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from .config_map import require_transformers


def verify_batch(mcfg, seq_len: int = 32, batch: int = 2, seed: int = 0) -> torch.Tensor:
    """The fixed random token ids both sides are run on."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, mcfg.vocab_size, (batch, min(seq_len, mcfg.max_seq_len)), generator=g)


def hf_logits(hf_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    """fp32 logits of the HF checkpoint in `hf_dir` (eager attention); the HF model is freed on return."""
    transformers = require_transformers()
    with no_progress_bars(transformers):  # its `Loading weights: 100%` bar is not nexus's output
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(hf_dir), dtype=torch.float32, attn_implementation="eager", local_files_only=True
        ).eval()
    with torch.no_grad():
        return hf(ids).logits.float()


@contextlib.contextmanager
def no_progress_bars(transformers):
    """transformers' progress bars off inside the block, as they were after it."""
    hf_logging = transformers.utils.logging
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def nexus_logit_difference(model, ids: torch.Tensor, reference: torch.Tensor) -> float:
    """max |logits of `model` on ids - reference|."""
    with torch.no_grad():
        return float((model(ids).logits.float() - reference).abs().max())


def max_logit_difference(model, hf_dir: Path, seq_len: int = 32, batch: int = 2, seed: int = 0) -> float:
    """Max |logits_nexus - logits_hf| in fp32 eager attention on random token ids."""
    ids = verify_batch(model.cfg, seq_len, batch, seed)
    return nexus_logit_difference(model, ids, hf_logits(hf_dir, ids))


def within_tolerance(diff: float, tolerance: float, mismatch: str) -> float:
    """`diff` when it is at most `tolerance`; RuntimeError otherwise (NaN included). Called on output
    nexus just wrote from checked input, so a difference is a nexus fault, not the user's.
    mismatch: what differs from what, e.g. "the HF export's logits differ from nexus's"."""
    if not diff <= tolerance:
        raise RuntimeError(f"{mismatch} by {diff:.3g} (> {tolerance}); nothing was written")
    return diff


def first_line(e: BaseException) -> str:
    """ "Type: first line of the message" (cut to 160 characters), for one-line errors that wrap a library's."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else 'no details'}"


def import_reference(hf_dir: Path, mcfg) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, HF logits on them) for verifying an import, computed before anything is written.
    --hf is the user's directory: if `transformers` cannot load it, that is bad input (ConfigError)."""
    from ..config import ConfigError

    require_transformers()  # its own clear error when transformers is missing
    ids = verify_batch(mcfg)
    try:
        return ids, hf_logits(hf_dir, ids)
    except Exception as e:  # transformers raises many types (ValueError, OSError, KeyError) for a directory it refuses
        raise ConfigError(
            f"--hf={str(hf_dir)!r} does not load in transformers ({first_line(e)}), so --verify cannot "
            "compare with it (valid: a directory AutoModelForCausalLM.from_pretrained loads; or drop "
            "--verify); nothing was written"
        ) from None


def verified_checkpoint_difference(
    ckpt_dir: Path, ids: torch.Tensor, reference: torch.Tensor, tolerance: float
) -> float:
    """max |logit difference| between the nexus checkpoint just written at ckpt_dir (still under its
    temporary name) and the HF reference; RuntimeError when it does not load or differs by more than
    `tolerance`. The checkpoint is read back rather than the model in memory checked, so what is
    verified is what the user gets (config and tokenizer files included)."""
    from ..checkpoint import load_checkpoint

    try:
        model = load_checkpoint(ckpt_dir)[0].eval()
    except Exception as e:  # nexus wrote it a moment ago from checked input: any refusal is ours
        raise RuntimeError(f"the imported checkpoint does not load back ({first_line(e)}); nothing was written") from e
    return within_tolerance(
        nexus_logit_difference(model, ids, reference),
        tolerance,
        "the imported checkpoint's logits differ from the HF model's",
    )
