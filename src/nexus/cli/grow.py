"""`nexus grow`: grow a checkpoint (Nexus-Rank M/A, TokenFormer tokens, SPARKLING width, retrofit).

Each growth family module in nexus.growth may define `add_cli_args(parser)` and
`spec_from_args(args) -> dict | None`; exactly one family must claim the command line.
"""
from __future__ import annotations

import importlib
import json
import pkgutil


def _family_modules():
    from .. import growth

    mods = []
    for info in pkgutil.iter_modules(growth.__path__):
        mod = importlib.import_module(f"nexus.growth.{info.name}")
        if hasattr(mod, "spec_from_args"):
            mods.append(mod)
    return mods


HEAVY_OPTIONS = True  # the family options import nexus.growth (and torch): added only when `grow` runs


def add_parser(sub, detailed: bool = True) -> None:
    p = sub.add_parser("grow", help="grow a checkpoint and verify the growth",
                       description="Grow a checkpoint into --out (the source stays untouched). Prints the verification.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="source checkpoint")
    p.add_argument("--out", required=True, metavar="DIR", help="where the grown checkpoint is written")
    p.add_argument("--optimizer-state", default="asymmetric", metavar="POLICY",
                   help="asymmetric (old keep, new zero) | copy | drop | scaled (asymmetric, and the old moments "
                        "of rescaled fan-in tensors scaled like their weights: m by alpha, v by alpha^2)")
    p.add_argument("--no-verify", action="store_true", help="skip the probe-batch verification")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier nexus output of the same kind at --out")
    for mod in (_family_modules() if detailed else []):
        mod.add_cli_args(p)
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..config import ConfigError
    from ..growth import OPTIMIZER_STATE_POLICIES, grow_checkpoint
    from ..outdir import CHECKPOINT, check_output

    if args.optimizer_state not in OPTIMIZER_STATE_POLICIES:
        raise ConfigError(f"--optimizer-state={args.optimizer_state!r} (valid: {'|'.join(OPTIMIZER_STATE_POLICIES)})")
    specs = [s for s in (m.spec_from_args(args) for m in _family_modules()) if s]
    if not specs:
        raise ConfigError("nothing to grow: give a growth option (see `nexus grow --help`)")
    if len(specs) > 1:
        raise ConfigError(f"several growth families requested ({', '.join(s['family'] for s in specs)}); grow one at a time")
    spec = specs[0]
    check_output(args.out, CHECKPOINT, overwrite=args.overwrite, sources=[args.checkpoint])
    spec.setdefault("optimizer_state", args.optimizer_state)
    report = grow_checkpoint(args.checkpoint, args.out, spec, probe_verify=not args.no_verify)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        from ..growth.report import format_report

        print(format_report(spec, report, args.out))
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("grow", __name__)
