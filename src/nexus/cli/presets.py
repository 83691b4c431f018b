"""`nexus presets`: list presets with parameter counts (and fp16 / ternary sizes)."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("presets", help="list presets with parameter counts")
    p.add_argument("--filter", default="", help="only names containing this text")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..analysis.param_formula import sizes  # arithmetic only: no torch import, no model built
    from ..presets import PRESETS, describe, get_preset, names

    rows = []
    for name in names():
        if args.filter and args.filter not in name:
            continue
        cfg = get_preset(name)
        info = sizes(cfg.model)
        origin = f" [plugin {PRESETS.origins[name]}]" if name in PRESETS.origins else ""
        rows.append((name, info["total"], info.get("fp16_mb"), info.get("ternary_mb"), describe(name) + origin))
    w = max((len(r[0]) for r in rows), default=10)
    print(f"{'preset':<{w}}  {'params':>9}  {'fp16':>9}  {'ternary':>9}  description")
    for name, n, fp16, ter, desc in rows:
        ter_s = f"{ter:8.1f}M" if ter is not None else "        -"
        print(f"{name:<{w}}  {n / 1e6:8.2f}M  {fp16:8.1f}M  {ter_s}  {desc}")
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("presets", __name__)
