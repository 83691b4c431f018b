"""`nexus export`: write a checkpoint in another format (HF transformers, or packed ternary weights)."""

from __future__ import annotations

import json
from pathlib import Path

from .import_ import VERIFY_TOLERANCE

FORMATS = ("hf", "ternary", "consolidated")
PACKINGS = ("2bit", "base3")  # kept equal to export.ternary.PACKINGS (tested); listed here so --help needs no torch


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint (--format hf: transformers directory; ternary: packed 2-bit or base-3)",
        description="hf: the baseline Transformer++ as Llama/Qwen2/Qwen3 for transformers. "
        "ternary: NEXUS v4.1 recurrent models with packed ternary weights. "
        "consolidated: an FSDP2 (sharded) checkpoint as one single-process checkpoint "
        "(model.safetensors + full trainer_state.pt).",
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="nexus checkpoint directory")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format")
    p.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help="output directory (hf) or file (ternary); optional with --push-to-hub (a temporary directory)",
    )
    p.add_argument(
        "--push-to-hub",
        default=None,
        metavar="REPO",
        help="hf: upload the export to this Hub model repo (checked to be reachable before any work)",
    )
    p.add_argument(
        "--packing",
        choices=PACKINGS,
        default=None,
        help="ternary: 2bit (4 weights per byte, default) or base3 (5 per byte, 1.6 bits per weight)",
    )
    p.add_argument(
        "--verify", action="store_true", help="hf: reload with transformers and print the max logit difference"
    )
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier nexus output of the same kind at --out")
    p.set_defaults(func=run)


def export_ternary_guarded(checkpoint: str, out: str, packing: str = "2bit") -> dict:
    from ..config import ConfigError

    try:
        from ..export.ternary import export_ternary
    except ImportError as e:
        if e.name not in ("nexus.export.ternary", None):
            raise  # the module exists but one of its own imports failed: show the real error
        raise ConfigError(
            "--format=ternary is not available in this build (valid: hf; the ternary exporter "
            "nexus.export.ternary is missing)"
        ) from None
    return export_ternary(checkpoint, out, packing=packing)


def consolidate(checkpoint: str, out: str) -> dict:
    """Sharded (FSDP2) checkpoint -> the single-process format: model.safetensors and a trainer_state.pt
    holding the full optimizer state; `nexus train --resume OUT` continues it in one process."""
    from ..checkpoint import CheckpointError, is_sharded, load_checkpoint, load_trainer_state, save_checkpoint

    if not is_sharded(checkpoint):
        raise CheckpointError(
            f"--checkpoint={checkpoint!r} is not a sharded (FSDP2) checkpoint "
            "(valid: a checkpoint with a sharded/ directory; others are already consolidated)"
        )
    if Path(out).resolve() == Path(checkpoint).resolve():
        raise CheckpointError(f"--out={out!r} equals --checkpoint (valid: a different directory)")
    model, cfg, tok = load_checkpoint(checkpoint)
    state = load_trainer_state(checkpoint)
    path = save_checkpoint(out, model, cfg, tok, state)
    return {
        "out": str(path),
        "params": sum(p.numel() for p in model.parameters()),
        "step": None if state is None else int(state["step"]),
    }


def export_hf_checkpoint(checkpoint: str, out: str, verify: bool) -> dict:
    from ..checkpoint import load_checkpoint, read_config
    from ..hf import export_hf
    from ..hf.config_map import check_exportable

    check_exportable(read_config(checkpoint).model)  # refuse before reading any weights
    from ..data.tokenizer_files import has_stored_tokenizer
    from ..hf.convert import STORED_GENERATION_CONFIG, STORED_SPECIAL_IDS, read_json_object

    model, cfg, tok = load_checkpoint(checkpoint)
    model.eval()
    gen = read_json_object(Path(checkpoint) / STORED_GENERATION_CONFIG)  # kept from `nexus import`
    special = read_json_object(Path(checkpoint) / STORED_SPECIAL_IDS)  # likewise
    if special is not None and not has_stored_tokenizer(checkpoint):
        tok = None  # a HF import without a tokenizer: the byte tokenizer load_checkpoint falls back to is not its own
    # --verify runs before the directory takes its name: a failed check leaves no output behind
    return export_hf(
        model,
        cfg,
        out,
        tok,
        generation_config=gen,
        special_ids=special,
        verify_tolerance=VERIFY_TOLERANCE if verify else None,
    )


def run(args, extra) -> int:
    from ..config import ConfigError

    if args.packing is not None and args.format != "ternary":
        raise ConfigError(f"--packing={args.packing} applies only to --format ternary (got --format {args.format})")
    if args.push_to_hub is not None:
        if args.format != "hf":
            raise ConfigError(f"--push-to-hub applies only to --format hf (got --format {args.format})")
        from ..hf.hub import check_hub_reachable

        check_hub_reachable(args.push_to_hub)  # offline: fail now, before converting anything
        if args.out is None:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="nexus-export-") as tmp:
                args.out = str(Path(tmp) / "export")
                return _run(args)
    if args.out is None:
        raise ConfigError("--out is required (valid: an output path, or --push-to-hub REPO with --format hf)")
    return _run(args)


def _run(args) -> int:
    from ..atomic import guard_output
    from ..outdir import CHECKPOINT, HF_EXPORT, TERNARY

    kind = {"hf": HF_EXPORT, "ternary": TERNARY, "consolidated": CHECKPOINT}[args.format]
    with guard_output(
        args.out, kind, overwrite=args.overwrite, sources=[args.checkpoint], file=args.format == "ternary"
    ):
        return _write(args)


def _write(args) -> int:
    if args.format == "consolidated":
        res = consolidate(args.checkpoint, args.out)
        print(
            json.dumps(res)
            if args.json
            else f"consolidated {args.checkpoint} -> {res['out']} "
            f"({res['params'] / 1e6:.2f}M params, step {res['step']})"
        )
        return 0
    if args.format == "ternary":
        res = export_ternary_guarded(args.checkpoint, args.out, args.packing or "2bit")
        print(json.dumps(res) if args.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
        return 0
    res = export_hf_checkpoint(args.checkpoint, args.out, args.verify)  # a failed --verify raised, writing nothing
    if args.push_to_hub:
        from ..hf.hub import push_folder

        res["pushed"] = push_folder(Path(res["out"]), args.push_to_hub)
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"exported {res['architecture']} -> {res['out']} ({', '.join(res['files'])}; tokenizer: {res['tokenizer']})"
        )
        if "max_logit_diff" in res:
            print(f"  max |logit difference| vs transformers: {res['max_logit_diff']:.3g}")
        if "pushed" in res:
            print(f"  pushed to {res['pushed']}")
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("export", __name__)
