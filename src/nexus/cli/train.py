"""`nexus train`: train a preset / config, or resume a checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError
from .common import add_config_args, build_config


HEAVY_OPTIONS = True  # the growth-family options import nexus.growth (and torch): added only when `train` runs


def add_parser(sub, detailed: bool = True) -> None:
    p = sub.add_parser("train", help="train a model (no arguments: the tiny baseline on the embedded corpus)",
                       description="Train a preset or config. Dotted overrides: --model.n_layers 4 --train.lr 1e-3. "
                                   "`nexus config` lists every field with its default and what it is for "
                                   "(`nexus config --preset NAME` shows a preset's values).")
    add_config_args(p)
    p.add_argument("--resume", default=None, metavar="DIR|auto",
                   help="continue from a checkpoint directory (its model/data config wins), writing into its run "
                        "directory (or --out); auto: the newest checkpoint in the output directory, or a new run")
    p.add_argument("--out", default=None, metavar="DIR", help="run directory (= --train.out_dir)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier nexus training run in the output directory (its files only)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--data", default=None, metavar="SOURCE",
                   help="training data (= --data.source): embedded, stdlib, a file, folder, glob or comma list of .txt/.jsonl/"
                        ".parquet, a prepared directory (nexus data prepare), a .bin token file, hf:<name>[:<config>] "
                        "or synthetic:mqar|khop|induction")
    p.add_argument("--grow-at", type=int, default=None, metavar="STEP",
                   help="grow the model at this step (= --train.grow_at); the spec comes from --growth")
    p.add_argument("--growth", default=None, metavar="SPEC",
                   help="growth spec as a YAML mapping (= --train.growth), e.g. "
                        "'{family: width, hidden: 192, init: [copy, copy], rewarmup: [1.3, 250]}', or give the "
                        "family's flags below (--width.hidden 192 --rewarmup 1.3,250)")
    if detailed:
        from .grow import add_growth_flags

        add_growth_flags(p)
    p.set_defaults(func=run)


def run(args, extra) -> int:
    from ..train.trainer import Trainer

    extra = list(extra)
    if args.out is not None:
        extra += ["--train.out_dir", args.out]
    if args.data is not None:
        extra += ["--data.source", args.data]
    if args.grow_at is not None:
        extra += ["--train.grow_at", str(args.grow_at)]
    flag_spec = _growth_from_flags(args)
    if args.growth is not None:
        extra += ["--train.growth", args.growth]
    elif flag_spec is not None:
        extra += ["--train.growth", json.dumps(flag_spec)]
    cfg, resume, replace = plan_run(args, extra)
    if flag_spec is not None and not cfg.train.grow_at:
        raise ConfigError(f"growth flags for family {flag_spec['family']!r} without --grow-at (valid: add --grow-at "
                          "STEP, the step at which the model grows)")
    trainer = Trainer(cfg, resume=resume, quiet=args.quiet)
    if replace and trainer.is_main:  # only now: a run that fails to start must not cost the old one
        from ..train.run_dir import clear_run

        clear_run(cfg.train.out_dir)
    try:
        result = trainer.fit()
    finally:
        from ..train.distributed import shutdown

        trainer.release_parallel_wrapper()
        shutdown()
    if args.quiet and trainer.is_main:
        print(json.dumps({k: v for k, v in result.items() if k != "sample"}))
    return 0


def _growth_from_flags(args) -> dict | None:
    from ..growth.spec import spec_from_flags

    spec = spec_from_flags(args)
    if spec is not None and args.growth is not None:
        raise ConfigError(f"--growth={args.growth!r} and {spec['family']} growth flags both given (valid: one of them)")
    return spec


def plan_run(args, extra: list[str]):
    """-> (RunConfig, checkpoint to resume or None, whether an earlier run in the output directory is to
    be replaced), with the output directory checked: a new run needs a
    new or empty directory (or --overwrite of an earlier run); a resumed run writes into the run its
    checkpoint belongs to, into --out, or into the checkpoint's own directory, never into the run
    directory recorded in the checkpoint's config."""
    from ..checkpoint import read_config
    from ..config import parse_overrides
    from ..outdir import TRAIN_RUN, check_output, check_usable
    from ..train import run_dir as R

    explicit_out = _explicit_out(extra)
    resume = args.resume
    if resume and resume != "auto" and (args.preset or args.config):
        raise ConfigError(f"--resume={resume!r} with --{'preset' if args.preset else 'config'} (valid: one of them; "
                          "a resumed run takes its model and data from the checkpoint)")
    if resume == "auto":
        cfg = build_config(args, extra)
        resume = R.latest_checkpoint(cfg.train.out_dir)
        explicit_out = cfg.train.out_dir
        if resume is None:
            _say(f"--resume auto: no checkpoint in {cfg.train.out_dir}; starting a new run")
        else:
            _say(f"--resume auto: resuming from {resume}")
    if resume:
        cfg = read_config(resume, flag="--resume")
        parse_overrides(cfg, extra)
        cfg.train.out_dir = str(explicit_out or R.resume_run_dir(resume))
        cfg.validate()
    else:
        cfg = build_config(args, extra)
    if cfg.train.grow_at and not any(r.get("step") == cfg.train.grow_at for r in cfg.growth_history):
        from ..growth import check_growth_applies

        check_growth_applies(cfg)  # fail now, not after grow_at steps of training
    out = Path(cfg.train.out_dir)
    own = resume is not None and R.resume_run_dir(resume).resolve() == out.resolve()
    if own:  # continuing the checkpoint's own run (or, for a grown checkpoint, its own directory)
        check_usable(out, "--out")
    else:
        # every torchrun rank refuses alike; a new run inside (or around) the checkpoint it resumes is refused
        check_output(out, TRAIN_RUN, overwrite=args.overwrite, sources=[resume] if resume else ())
    replace = bool(args.overwrite and not own and out.is_dir() and any(out.iterdir()))
    return cfg, (str(resume) if resume else None), replace


def _explicit_out(extra: list[str]) -> str | None:
    out = None
    for i, a in enumerate(extra):
        if a == "--train.out_dir" and i + 1 < len(extra):
            out = extra[i + 1]
        elif a.startswith("--train.out_dir="):
            out = a.split("=", 1)[1]
    return out


def _say(msg: str) -> None:
    import sys

    print(f"nexus train: {msg}", file=sys.stderr)


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("train", __name__)
