"""`nexus presets`: list presets with parameter counts (and fp16 / ternary sizes)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("presets", help="list presets with parameter counts")
    p.add_argument("--filter", default="", help="only names containing this text")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from tabulate import tabulate

    from ..analysis.param_formula import sizes  # arithmetic only: no torch import, no model built
    from ..presets import PRESETS, describe, get_preset, names

    rows = []
    for name in names():
        if args.filter and args.filter not in name:
            continue
        cfg = get_preset(name)
        info = sizes(cfg.model)
        origin = f" [plugin {PRESETS.origins[name]}]" if name in PRESETS.origins else ""
        ter = info.get("ternary_mb")
        rows.append(
            (
                name,
                f"{info['total'] / 1e6:.2f}M",
                f"{info.get('fp16_mb'):.1f}M",
                "-" if ter is None else f"{ter:.1f}M",
                describe(name) + origin,
            )
        )
    print(
        tabulate(
            rows,
            headers=("preset", "params", "fp16", "ternary", "description"),
            tablefmt="plain",
            colalign=("left", "right", "right", "right", "left"),
            disable_numparse=True,
        )
    )
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("presets", __name__)
