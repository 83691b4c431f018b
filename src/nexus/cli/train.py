"""`nexus train`: train a preset / config, or resume a checkpoint."""
from __future__ import annotations

import json

from .common import add_config_args, build_config


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model (no arguments: the tiny baseline on the embedded corpus)",
                       description="Train a preset or config. Dotted overrides: --model.n_layers 4 --train.lr 1e-3")
    add_config_args(p)
    p.add_argument("--resume", default=None, metavar="DIR", help="continue from a checkpoint directory (its model/data config wins)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..train.trainer import Trainer
    from ..checkpoint import read_config
    from ..config import parse_overrides

    if args.resume:
        cfg = read_config(args.resume)
        parse_overrides(cfg, extra)
        cfg.validate()
    else:
        cfg = build_config(args, extra)
    trainer = Trainer(cfg, resume=args.resume, quiet=args.quiet)
    try:
        result = trainer.fit()
    finally:
        from ..train.distributed import shutdown

        shutdown()
    if args.quiet and trainer.is_main:
        print(json.dumps({k: v for k, v in result.items() if k != "sample"}))
    return 0
