"""`nexus analyze KIND`: analyses of a checkpoint (or of a preset's freshly initialized model).

    nexus analyze attention --checkpoint runs/exo-e-tiny/checkpoint
    nexus analyze params --preset exo-dynamic-e-450m

Each kind writes `<kind>.json` (the numbers) and PNG plots into --out (default
runs/analysis/<name>/<kind>), through a temporary directory renamed into place.

The analyses live in nexus.analysis and register themselves (`register_analysis`); this module only
parses arguments, picks the output directory and writes the result.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..analysis import ANALYSES, format_value
from ..outdir import ANALYSIS
from . import register_command
from .common import add_config_file_arg, positive_int

HEAVY_OPTIONS = True  # listing the kinds imports every analysis module (and torch): only when `analyze` runs


def add_parser(sub, detailed: bool = True) -> None:
    """detailed: list the registered kinds (imports every analysis module, hence torch)."""
    import argparse

    kinds = "\n".join(f"  {k:<16} {a.help}" for k, a in ANALYSES.items()) if detailed else "  see nexus analyze --help"
    p = sub.add_parser(
        "analyze",
        help="analyses of a checkpoint or preset (attention, mixing, representations, ...)",
        description=f"Analyses; each writes <kind>.json and PNG plots.\n\nkinds:\n{kinds}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "kind", metavar="KIND", help=f"one of: {', '.join(ANALYSES.names())}" if detailed else "analysis kind"
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR", help="checkpoint directory to analyse")
    src.add_argument(
        "--preset",
        metavar="NAME|FILE.yaml",
        help="analyse a preset's freshly initialized model (a name or a YAML file; overrides allowed)",
    )
    add_config_file_arg(p)
    p.add_argument("--out", metavar="DIR", default=None, help="output directory (default runs/analysis/<name>/<kind>)")
    p.add_argument(
        "--checkpoints",
        nargs="+",
        action="append",
        metavar="DIR",
        default=None,
        help="growth: checkpoints of one grown run in training order (the first at the growth); "
        "repeat the flag once per run to pool PCA and scaling fit across runs",
    )
    p.add_argument(
        "--noc-reading",
        choices=["whole", "corner"],
        default="whole",
        help="growth: NOC/U_P compare the base matrix with the whole grown matrix (default, Table 4's "
        "magnitudes) or the pretrained corner with the new entries",
    )
    p.add_argument(
        "--pca",
        choices=["standardized", "covariance"],
        default="standardized",
        help="growth: PCA of the correlation matrix (default, reproduces Table 5) or of the covariance",
    )
    p.add_argument(
        "--batches", type=positive_int("--batches"), default=4, help="validation batches fed through the model"
    )
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=4, help="sequences per batch")
    p.add_argument(
        "--seq-len", type=positive_int("--seq-len"), default=None, help="tokens per sequence (default: data.seq_len)"
    )
    p.add_argument(
        "--counting",
        choices=["analytic", "calflops"],
        default="analytic",
        help="flops: analytic (matmuls and attention products) or calflops (also norms, activations, "
        "softmax and elementwise ops, as CalFlops counts them; Nexusformer Table 8)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier nexus output of the same kind at --out")
    p.set_defaults(func=run, accepts_overrides=True)


def run(args, extra) -> int:
    from ..analysis.source import AnalysisSource
    from ..atomic import atomic_dir_write, guard_output

    analysis = ANALYSES.get(args.kind)
    src = AnalysisSource(args, extra)
    out = Path(args.out) if args.out else Path("runs") / "analysis" / src.name / args.kind
    runs = args.checkpoints or []  # --checkpoints may be given once per growth run: a list of lists
    sources = [args.checkpoint, *(d for run_dirs in runs for d in run_dirs)]
    result: dict = {}

    def write(tmp: Path) -> None:
        result.update(analysis.run(src, tmp, args))
        (tmp / f"{args.kind}.json").write_text(json.dumps(result, indent=2))

    with guard_output(out, ANALYSIS, overwrite=args.overwrite, sources=sources):
        atomic_dir_write(out, write, ANALYSIS)
    files = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))  # what the analysis wrote, as written
    if args.json:
        print(json.dumps({"kind": args.kind, "out": str(out), "files": files, **result}))
    else:
        print((analysis.summary or summarize)(result))
        print(f"wrote {len(files)} file{'s' if len(files) != 1 else ''} to {out}: {', '.join(files)}")
    return 0


def summarize(result: dict) -> str:
    """The scalar numbers of a result, one per line (kinds without a summary of their own)."""
    return "\n".join(f"{k}: {format_value(v)}" for k, v in result.items() if not isinstance(v, (dict, list)))


register_command("analyze", __name__)
