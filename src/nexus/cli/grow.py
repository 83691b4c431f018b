"""`nexus grow`: grow a checkpoint (Nexus-Rank M/A, TokenFormer tokens, SPARKLING width, retrofit).

The family options are generated from the growth families' spec dataclasses (`nexus.growth.spec`):
one flag per field, its one-line reason as the help; exactly one family must claim the command line.
"""

from __future__ import annotations

import json

HEAVY_OPTIONS = True  # the family options import nexus.growth (and torch): added only when `grow` runs


def add_growth_flags(p) -> None:
    """Every growth family's flags (shared by `nexus grow` and `nexus train`)."""
    from ..growth import families
    from ..growth.spec import add_spec_flags

    families()  # registers every family's spec
    add_spec_flags(p)


def add_parser(sub, detailed: bool = True) -> None:
    p = sub.add_parser(
        "grow",
        help="grow a checkpoint and verify the growth",
        description="Grow a checkpoint into --out (the source stays untouched). Prints the verification.",
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="source checkpoint")
    p.add_argument("--out", required=True, metavar="DIR", help="where the grown checkpoint is written")
    p.add_argument("--no-verify", action="store_true", help="skip the probe-batch verification")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier nexus output of the same kind at --out")
    if detailed:
        add_growth_flags(p)
    # --train.* overrides (e.g. --train.steps 600) are recorded in the grown checkpoint: how long the continued
    # run trains, and so the LR schedule after the growth
    p.set_defaults(func=run, accepts_overrides=True)


def run(args, extra) -> int:
    from ..atomic import guard_output
    from ..config import ConfigError
    from ..growth import grow_checkpoint, parse_growth_spec
    from ..growth.spec import spec_from_flags
    from ..outdir import CHECKPOINT

    spec = spec_from_flags(args)
    if spec is None:
        raise ConfigError("nothing to grow: give a growth option (see `nexus grow --help`)")
    bad = next((a for a in extra if a.startswith("--") and not a.startswith("--train.")), None)
    if bad is not None:
        raise ConfigError(
            f"{bad} on nexus grow (valid: --train.* fields for the continued run, e.g. --train.steps "
            "600; the model's shape comes from the growth options)"
        )
    parse_growth_spec(spec, "growth")  # fail on bad flags before touching the checkpoint
    with guard_output(args.out, CHECKPOINT, overwrite=args.overwrite, sources=[args.checkpoint]):
        report = grow_checkpoint(
            args.checkpoint, args.out, spec, probe_verify=not args.no_verify, train_overrides=extra
        )
    if args.json:
        print(json.dumps(report, default=str))
    else:
        from ..growth.report import format_report

        print(format_report(spec, report, args.out))
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("grow", __name__)
