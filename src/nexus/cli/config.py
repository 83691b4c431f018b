"""`nexus config`: every config field with its default (or a preset's value) and one-line reason."""

from __future__ import annotations

from .common import add_config_file_arg


def add_parser(sub) -> None:
    p = sub.add_parser(
        "config",
        help="list every config field with its default and what it is for",
        description="Every field you can set with --section.field VALUE or in a --config YAML, "
        "with its default (or the value in --preset) and a one-line reason.",
    )
    p.add_argument(
        "--preset",
        default=None,
        metavar="NAME|FILE.yaml",
        help="show this preset's values instead of the defaults (a name or a YAML file of your own)",
    )
    add_config_file_arg(p)
    p.add_argument(
        "--section", default="", metavar="PREFIX", help="only fields starting with this, e.g. train or model.mlp"
    )
    p.add_argument("--yaml", action="store_true", help="print the resolved config as YAML instead")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..config import ConfigError, RunConfig
    from ..config_help import format_fields
    from ..config_migration import load_config_file
    from ..config_overrides import merge_config_file

    if args.config and not args.preset:
        cfg = load_config_file(args.config)
    else:
        cfg = RunConfig()
        if args.preset:
            from ..presets import get_preset

            cfg = get_preset(args.preset)
        merge_config_file(cfg, args.config)
    if args.yaml:
        import yaml

        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    text = format_fields(cfg, args.section)
    if not text:
        raise ConfigError(f"--section={args.section!r} matches no field (valid: model, data, train, model.mlp, ...)")
    print(text)
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("config", __name__)
