"""Compare our logits with HF `transformers` on a fixed batch: the check `--verify` runs after import/export."""
from __future__ import annotations

from pathlib import Path

import torch

from .config_map import require_transformers


def max_logit_difference(model, hf_dir: Path, seq_len: int = 32, batch: int = 2, seed: int = 0) -> float:
    """Max |logits_nexus - logits_hf| in fp32 eager attention on random token ids."""
    transformers = require_transformers()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32,
                                                           attn_implementation="eager", local_files_only=True).eval()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.cfg.vocab_size, (batch, min(seq_len, model.cfg.max_seq_len)), generator=g)
    with torch.no_grad():
        ours = model(ids).logits.float()
        theirs = hf(ids).logits.float()
    return float((ours - theirs).abs().max())
