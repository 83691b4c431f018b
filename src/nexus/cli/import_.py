"""`nexus import`: read a HF Llama/Qwen2/Qwen3 checkpoint (a local directory or a hub model id) into a nexus
checkpoint directory."""

from __future__ import annotations

import json
from typing import Any, cast

# Logits of an exact import differ only by fp32 rounding; anything above this is a wrong mapping.
VERIFY_TOLERANCE = 1e-4


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import",
        help="import a HF Llama/Qwen2/Qwen3 checkpoint (directory or hub id) as a nexus checkpoint",
        description="Convert a HF checkpoint (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM), "
        "from a local directory or the Hugging Face Hub, into a nexus checkpoint with the "
        "same logits.",
    )
    p.add_argument(
        "--hf",
        required=True,
        metavar="DIR|OWNER/NAME",
        help="HF model directory (config.json + weights), or a hub model id (downloaded with "
        "huggingface_hub, or read from its cache offline)",
    )
    p.add_argument("--out", required=True, metavar="CKPT", help="nexus checkpoint directory to write")
    p.add_argument("--verify", action="store_true", help="also run the HF model and print the max logit difference")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier nexus output of the same kind at --out")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..atomic import guard_output
    from ..outdir import CHECKPOINT

    with guard_output(args.out, CHECKPOINT, overwrite=args.overwrite, sources=[args.hf]):
        return _write(args)


def _write(args) -> int:
    from ..checkpoint import save_checkpoint
    from ..hf import import_hf
    from ..hf.convert import STORED_GENERATION_CONFIG, STORED_SPECIAL_IDS
    from ..hf.hub import fetch_hf_model
    from ..models import count_parameters

    args.hf = fetch_hf_model(args.hf)  # a hub id -> its local snapshot directory
    model, cfg = import_hf(args.hf)
    tok = model.tokenizer
    cfg.train.out_dir = args.out
    gen = model.generation_config
    extra = {STORED_SPECIAL_IDS: json.dumps(model.hf_special_ids)}  # the model's own ids, for export
    if gen:
        extra[STORED_GENERATION_CONFIG] = json.dumps(gen, indent=2)
    res: dict[str, Any] = {
        "architecture": cfg.preset.removeprefix("hf:"),
        "params": count_parameters(model),
        "tokenizer": getattr(tok, "kind", "byte"),
        "notes": model.import_notes,
    }
    check = None
    if args.verify:
        from ..hf.verify import import_reference, verified_checkpoint_difference

        ids, reference = import_reference(args.hf, cfg.model)  # a --hf transformers refuses: exit 2, nothing written

        def check(d):  # the checkpoint as written, before it takes --out's name: a mismatch leaves --out as it was
            res["max_logit_diff"] = verified_checkpoint_difference(d, ids, reference, VERIFY_TOLERANCE)

    res = {"checkpoint": str(save_checkpoint(args.out, model, cfg, tok, extra_files=extra, check=check)), **res}
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"imported {res['architecture']} ({res['params'] / 1e6:.2f}M params, tokenizer {res['tokenizer']}) "
            f"-> {res['checkpoint']}"
        )
        # a list import_hf attaches to the module (mypy types Module attributes as Tensor | Module)
        for note in cast(list, model.import_notes)[1:]:
            print(f"  note: {note}")
        if args.verify:
            print(f"  max |logit difference| vs transformers: {res['max_logit_diff']:.3g}")
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("import", __name__)
