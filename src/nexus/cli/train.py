"""`nexus train`: train a preset / config, or resume a checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError
from ..outdir import MARKER, TRAIN_RUN, check_output
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
                   help="grow the model at this step (the growth hook's `at` in train.hooks); the spec comes from "
                        "--growth, the family flags or the config")
    p.add_argument("--growth", default=None, metavar="SPEC",
                   help="growth spec as a YAML mapping (the growth hook's `spec` in train.hooks), e.g. "
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
    cfg, resume, replace, lock = plan_run(args, extra, growth=_growth_from_flags(args))
    try:
        result = _train(cfg, resume, replace, args.quiet, Trainer)
    finally:
        if lock is not None:
            from ..train.run_dir import record_run_files

            if Path(cfg.train.out_dir).is_dir():
                record_run_files(cfg.train.out_dir)
            lock.release()
    if args.quiet and result is not None:
        print(json.dumps({k: v for k, v in result.items() if k != "sample"}))
    return 0


def _train(cfg, resume, replace: bool, quiet: bool, Trainer) -> dict | None:
    """Build the trainer, then (only now: a run that fails to start must not cost the old one) clear the
    run it replaces, and train. Returns the result on the main process, None elsewhere."""
    from ..experiments.run_plot import LossCurveHook

    trainer = Trainer(cfg, resume=resume, quiet=quiet, hooks=[LossCurveHook()])  # the run draws its own curve
    if replace and trainer.is_main:
        from ..train.run_dir import clear_run

        clear_run(cfg.train.out_dir)
    try:
        result = trainer.fit()
    finally:
        from ..train.distributed import shutdown

        trainer.release_parallel_wrapper()
        shutdown()
    return result if trainer.is_main else None


def _growth_from_flags(args) -> dict | None:
    """--grow-at / --growth / the family flags as the growth hook's options (None: none given)."""
    import yaml

    from ..growth.spec import spec_from_flags

    spec = spec_from_flags(args)
    if spec is not None and args.growth is not None:
        raise ConfigError(f"--growth={args.growth!r} and {spec['family']} growth flags both given (valid: one of them)")
    if args.growth is not None:
        try:
            spec = yaml.safe_load(args.growth)
        except yaml.YAMLError as e:
            raise ConfigError(f"--growth={args.growth!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    options = ({"at": args.grow_at} if args.grow_at is not None else {}) | ({"spec": spec} if spec is not None else {})
    return options or None


def plan_run(args, extra: list[str], growth: dict | None = None):
    """-> (RunConfig, checkpoint to resume or None, whether the run in the output directory is to be
    replaced, the output's lock or None), with the growth flags (`growth`: the growth hook's options)
    written into the config, its hooks built once (a bad entry fails here, before anything is written),
    and the output directory checked and locked: a new run needs a new or empty directory (or
    --overwrite of an earlier run); a resumed run writes into the run its checkpoint belongs to, into
    --out, or into the checkpoint's own directory, never into the run directory recorded in the
    checkpoint's config. `--resume auto` continues the newest checkpoint in
    the output directory, or starts the run over when it holds a run killed before its first one."""
    from ..train import run_dir as R

    resume = args.resume
    if resume and resume != "auto" and (args.preset or args.config):
        raise ConfigError(f"--resume={resume!r} with --{'preset' if args.preset else 'config'} (valid: one of them; "
                          "a resumed run takes its model and data from the checkpoint)")
    if resume == "auto":
        return _plan_auto(args, extra, growth)
    cfg = _resumed_config(resume, extra, _explicit_out(extra)) if resume else build_config(args, extra)
    _check_hooks(cfg, args, growth)
    out = Path(cfg.train.out_dir)
    own = resume is not None and R.resume_run_dir(resume).resolve() == out.resolve()

    def check():
        if own:  # continuing the checkpoint's own run (or, for a grown checkpoint, its own directory)
            R.check_in_place(out)
        else:  # every torchrun rank refuses alike; a new run inside (or around) the checkpoint it resumes is refused
            check_output(out, TRAIN_RUN, overwrite=args.overwrite, sources=[resume] if resume else ())

    lock = _locked(out, check)
    replace = bool(args.overwrite and not own and out.is_dir() and any(out.iterdir()))
    return cfg, (str(resume) if resume else None), replace, lock


def _plan_auto(args, extra: list[str], growth: dict | None):
    from ..train import run_dir as R

    cfg = build_config(args, extra)
    _check_hooks(cfg, args, growth)
    out = Path(cfg.train.out_dir)
    # ownership first: nothing in a folder nexus cannot prove is a run of its own is touched, not even
    # the recovery of interrupted saves (which happens when the lock is taken)
    lock = _locked(out, lambda: check_output(out, TRAIN_RUN, resume=True))
    try:
        resume = R.latest_checkpoint(out)
        if resume is None:
            restart = out.is_dir() and any(p.name != MARKER for p in out.iterdir())
            _say(f"--resume auto: no checkpoint in {out}; " + ("starting the run over (the files the killed run "
                 "wrote are replaced; nothing else is touched)" if restart else "starting a new run"))
            if restart:
                R.check_in_place(out)
            return cfg, None, restart, lock
        _say(f"--resume auto: resuming from {resume}")
        cfg = _resumed_config(resume, extra, out)
        _check_hooks(cfg, args, growth)
        R.check_in_place(out)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return cfg, str(resume), False, lock


def _resumed_config(resume, extra: list[str], out):
    from ..checkpoint import read_config
    from ..config import parse_overrides
    from ..train import run_dir as R

    cfg = read_config(resume, flag="--resume")
    parse_overrides(cfg, extra)
    cfg.train.out_dir = str(out or R.resume_run_dir(resume))
    cfg.validate()
    return cfg


def _check_hooks(cfg, args, growth: dict | None) -> None:
    """Write the growth flags into the config's growth hook entry (updating the one a preset may hold),
    then build the configured hooks once: a bad entry (e.g. a growth spec that does not apply) fails now,
    not at its step."""
    from ..train.hooks import configured_hooks

    if growth is not None:
        entry = cfg.train.set_hook("growth", **growth)
        if "spec" in growth and not entry.get("at"):
            what = (f"--growth={args.growth!r}" if args.growth is not None else
                    f"growth flags for family {growth['spec'].get('family')!r}")
            raise ConfigError(f"{what} without --grow-at (valid: add --grow-at STEP, the step at which the model grows)")
        cfg.validate()
    configured_hooks(cfg)


def _locked(out: Path, check):
    """check(), take the output's one-writer lock (rank 0), then check() again under it: the folder may
    have changed while this process was starting. A dead run's lock is taken over with a note."""
    from ..train import run_dir as R

    check()
    lock = R.run_lock(out)
    try:
        for note in getattr(lock, "notes", []):
            _say(f"note: {note}")
        check()
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return lock


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
