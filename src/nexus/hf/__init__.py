"""HF `transformers` parity: import Llama/Qwen2/Qwen3 checkpoints into TransformerLM and export back.

model, cfg = import_hf("path/to/hf_dir")      # logits equal HF's within 1e-5 in fp32
export_hf(model, cfg, "path/to/out_dir")      # AutoModelForCausalLM loads it with the same logits
"""

from .config_map import HF_ARCHITECTURES
from .convert import export_hf, import_hf

__all__ = ["import_hf", "export_hf", "HF_ARCHITECTURES"]
