"""`nexus train`: train a preset / config, or resume a checkpoint."""
from __future__ import annotations

import json

from .common import add_config_args, build_config


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model (no arguments: the tiny baseline on the embedded corpus)",
                       description="Train a preset or config. Dotted overrides: --model.n_layers 4 --train.lr 1e-3. "
                                   "`nexus config` lists every field with its default and what it is for "
                                   "(`nexus config --preset NAME` shows a preset's values).")
    add_config_args(p)
    p.add_argument("--resume", default=None, metavar="DIR", help="continue from a checkpoint directory (its model/data config wins)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--data", default=None, metavar="SOURCE",
                   help="training data (= --data.source): embedded, a file, hf:<name> or synthetic:mqar|khop|induction")
    p.add_argument("--grow-at", type=int, default=None, metavar="STEP",
                   help="grow the model at this step (= --train.grow_at); the spec comes from --growth")
    p.add_argument("--growth", default=None, metavar="SPEC",
                   help="growth spec as a YAML mapping (= --train.growth), e.g. "
                        "'{family: width, hidden: 192, init: [copy, copy], rewarmup: [1.3, 250]}'")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..train.trainer import Trainer
    from ..checkpoint import read_config
    from ..config import parse_overrides

    extra = list(extra)
    if args.data is not None:
        extra += ["--data.source", args.data]
    if args.grow_at is not None:
        extra += ["--train.grow_at", str(args.grow_at)]
    if args.growth is not None:
        extra += ["--train.growth", args.growth]
    if args.resume:
        cfg = read_config(args.resume)
        parse_overrides(cfg, extra)
        cfg.validate()
    else:
        cfg = build_config(args, extra)
    if cfg.train.grow_at:
        from ..growth import check_growth_spec

        check_growth_spec(cfg.train.growth)  # fail now, not after grow_at steps of training
    trainer = Trainer(cfg, resume=args.resume, quiet=args.quiet)
    try:
        result = trainer.fit()
    finally:
        from ..train.distributed import shutdown

        shutdown()
    if args.quiet and trainer.is_main:
        print(json.dumps({k: v for k, v in result.items() if k != "sample"}))
    return 0
