"""`nexus train`: train a preset / config, resume a run, or start a new run from a model's weights.

The front door of training: `nexus train` and `nexus-train-env` (cli/env_train.py, a translator onto
this command) both go through `plan_run` and `execute`. The run's config is merged and validated here
once (a resume through `train.resume.resume_config`, --init-from through `cli/init_from.py`), the
output directory is checked before anything is written, and the trainer gets the finished config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..config_overrides import parse_overrides
from ..outdir import MARKER, TRAIN_RUN, check_output
from .common import FIELDS_EPILOG, ConfigFieldsHelpFormatter, add_config_args, base_config

HEAVY_OPTIONS = True  # the growth-family options import nexus.growth (and torch): added only when `train` runs


def add_parser(sub, detailed: bool = True) -> None:
    from ..data.readers import valid_sources

    p = sub.add_parser(
        "train",
        help="train a model (no arguments: the tiny baseline on the embedded corpus)",
        description="Train a preset or config. Dotted overrides: --model.n_layers 4 --train.lr 1e-3. "
        "`nexus config` lists every field with its default and what it is for "
        "(`nexus config --preset NAME` shows a preset's values).",
        formatter_class=ConfigFieldsHelpFormatter,
        epilog=FIELDS_EPILOG + "baseline-tiny",
    )
    add_config_args(p)
    p.add_argument(
        "--resume",
        default=None,
        metavar="DIR|auto",
        help="continue from a checkpoint directory with its optimizer state, writing into its run "
        "directory (or --out); auto: the newest checkpoint in the output directory, or a new run. "
        "Overrides of data, steps, LR and schedule, cadence and batch are honoured; a model change "
        "(but model.max_seq_len, model.z_loss) or a new tokenizer is refused (nexus grow, or --init-from)",
    )
    p.add_argument(
        "--init-from",
        default=None,
        metavar="CKPT|HF_DIR",
        help="start a new run from the weights of a nexus checkpoint (grown ones too) or a HF model "
        "directory: fresh optimizer and LR schedule, data and training from --preset/--config (else "
        "CKPT's own), the model's shape and tokenizer from CKPT (continued pretraining, SFT)",
    )
    p.add_argument(
        "--resize-vocab",
        action="store_true",
        help="with --init-from: resize the embedding (and head) to the tokenizer's vocabulary when it "
        "differs from the model's (new rows drawn like a fresh init; without it a mismatch is refused)",
    )
    p.add_argument(
        "--push-to-hub",
        default=None,
        metavar="REPO",
        help="upload the final checkpoint to this HF Hub model repo (checked before training starts)",
    )
    p.add_argument("--out", default=None, metavar="DIR", help="run directory (= --train.out_dir)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier nexus training run in the output directory (its files only)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--data", default=None, metavar="SOURCE", help=f"training data (= --data.source): {valid_sources()}")
    p.add_argument(
        "--grow-at",
        type=int,
        default=None,
        metavar="STEP",
        help="grow the model at this step (the growth hook's `at` in train.hooks); the spec comes from "
        "--growth, the family flags or the config",
    )
    p.add_argument(
        "--growth",
        default=None,
        metavar="SPEC",
        help="growth spec as a YAML mapping (the growth hook's `spec` in train.hooks), e.g. "
        "'{family: width, hidden: 192, init: [copy, copy], rewarmup: [1.3, 250]}', or give the "
        "family's flags below (--width.hidden 192 --rewarmup 1.3,250)",
    )
    if detailed:
        from .grow import add_growth_flags

        add_growth_flags(p)
    p.set_defaults(func=run)


def run(args, extra) -> int:
    extra, growth = flag_overrides(args, extra)
    plan = plan_run(args, extra, growth=growth)
    try:
        result, trainer = execute(plan, quiet=args.quiet, push_to_hub=args.push_to_hub)
    finally:
        plan.release()
    if args.quiet and trainer.is_main:
        print(json.dumps({k: v for k, v in result.items() if k != "sample"}))
    return 0


def flag_overrides(args, extra: list[str]) -> tuple[list[str], dict | None]:
    """(the dotted overrides with the convenience flags --out and --data written out as the fields they
    stand for, the growth hook's options that --grow-at, --growth or a growth family's flags give)."""
    extra = list(extra)
    if args.out is not None:
        extra += ["--train.out_dir", args.out]
    if args.data is not None:
        extra += ["--data.source", args.data]
    return extra, _growth_from_flags(args)


@dataclass
class Plan:
    """A training run ready to start: its finished config and where its weights come from."""

    cfg: RunConfig
    resume: str | None = None  # checkpoint continued with its optimizer state
    init_model: object = None  # --init-from: the model whose weights a new run starts from
    init_tokenizer: object = None  # that model's tokenizer (None: built from cfg.data)
    resize_vocab: bool = False  # --resize-vocab: fit the embedding to the tokenizer
    replace: bool = False  # --overwrite of an earlier run (or --resume auto of one killed before its first checkpoint)
    notes: list[str] = field(default_factory=list)  # what planning changed, printed when the run starts
    lock: object = None  # the output directory's one-writer lock (rank 0), held until the run ends
    hooks: list | None = None  # the hooks cfg configures (train.hooks), built and checked once; None: by the trainer

    def release(self) -> None:
        """Record the files the run wrote and let go of the output directory."""
        if self.lock is None:
            return
        from ..train.run_dir import record_run_files

        if Path(self.cfg.train.out_dir).is_dir():
            record_run_files(self.cfg.train.out_dir)
        self.lock.release()
        self.lock = None


def execute(plan: Plan, *, quiet: bool = False, hooks=(), trainer_class=None, push_to_hub: str | None = None):
    """Build the trainer for `plan`, train, and push the final checkpoint -> (result, trainer). Every
    rank calls this; only the main process writes."""
    from ..train.distributed import shutdown
    from ..train.trainer import Trainer

    if push_to_hub:
        from ..hf.hub import check_hub_reachable

        check_hub_reachable(push_to_hub)  # offline or a bad repo id: fail now, not after training
    trainer = (trainer_class or Trainer)(
        plan.cfg,
        resume=plan.resume,
        quiet=quiet,
        init_model=plan.init_model,
        init_tokenizer=plan.init_tokenizer,
        resize_vocab=plan.resize_vocab,
        notes=plan.notes,
        hooks=hooks,
        configured=plan.hooks,
    )
    if plan.replace and trainer.is_main:  # only now: a run that fails to start must not cost the old one
        from ..train.run_dir import clear_run

        clear_run(plan.cfg.train.out_dir)
    try:
        result = trainer.fit()
    finally:
        trainer.release_parallel_wrapper()
        shutdown()
    if push_to_hub and trainer.is_main:
        from ..hf.hub import push_folder

        result["pushed"] = push_folder(Path(result["checkpoint"]), push_to_hub, what="checkpoint")
        trainer.say(f"pushed to {result['pushed']}")
    return result, trainer


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


def plan_run(args, extra: list[str], say=None, growth: dict | None = None) -> Plan:
    """The run the arguments ask for, with the output directory checked and locked: a new run needs a
    new or empty directory (or --overwrite of an earlier run); a resumed run writes into the run its
    checkpoint belongs to, into --out, or into the checkpoint's own directory, never into the run
    directory recorded in the checkpoint's config. `--resume auto` continues the newest checkpoint in
    the output directory, or starts the run over when it holds a run killed before its first one.
    say: where the --resume auto decision is printed; growth: the growth hook's options from the flags."""
    from ..train import run_dir as R

    resume, init_from = args.resume, args.init_from
    if resume and resume != "auto" and (args.preset or args.config or init_from):
        other = "--preset" if args.preset else "--config" if args.config else "--init-from"
        raise ConfigError(
            f"--resume={resume!r} with {other} (valid: one of them; a resumed run takes its model and "
            "data from the checkpoint, --init-from starts a new run from weights)"
        )
    if args.resize_vocab and not init_from:
        raise ConfigError(
            "--resize-vocab without --init-from (valid: add --init-from CKPT; a resumed run keeps its tokenizer)"
        )
    if resume == "auto":
        return _plan_auto(args, extra, say or _say, growth)
    plan = _plan_start(args, extra, resume, growth=growth)
    out = Path(plan.cfg.train.out_dir)
    own = resume is not None and R.resume_run_dir(resume).resolve() == out.resolve()

    def check():
        if own:  # continuing the checkpoint's own run (or, for a grown checkpoint, its own directory)
            R.check_in_place(out, log_to=plan.cfg.train.log_to)
        else:  # every torchrun rank refuses alike; a new run inside (or around) its source checkpoint is refused
            source = resume or init_from
            check_output(out, TRAIN_RUN, overwrite=args.overwrite, sources=[source] if source else ())

    plan.lock = _locked(out, check)
    plan.replace = bool(args.overwrite and not own and out.is_dir() and any(out.iterdir()))
    return plan


def _plan_start(args, extra: list[str], resume, out=None, growth: dict | None = None, merged=None) -> Plan:
    """The config of a resumed run (train/resume.py), of a run from --init-from weights (init_from.py) or
    of a new run, each merged with the hook entries `nexus train` adds (add_hooks) and validated once, and
    its configured hooks built once (a bad entry, e.g. a growth spec that does not apply, fails now, not at
    its step). merged: a new run's config already merged from the arguments (--resume auto's), not merged again."""
    plan = Plan(cfg=None, resume=str(resume) if resume else None, resize_vocab=args.resize_vocab)

    def add_hooks(cfg: RunConfig) -> None:
        """The hook entries `nexus train` asks for: the growth flags' and the run's own loss curve."""
        if growth is not None:
            entry = cfg.train.set_hook("growth", **growth)
            if "spec" in growth and not entry.get("at"):
                what = (
                    f"--growth={args.growth!r}"
                    if args.growth is not None
                    else f"growth flags for family {growth['spec'].get('family')!r}"
                )
                raise ConfigError(
                    f"{what} without --grow-at (valid: add --grow-at STEP, the step at which the model grows)"
                )
        if cfg.train.hook("loss_curve") is None:  # the run draws its own curve: asked for in the config it writes
            cfg.train.set_hook("loss_curve")

    if resume:
        from ..train.resume import resume_config

        plan.cfg, plan.notes = resume_config(resume, extra, out_dir=out or _explicit_out(extra), amend=add_hooks)
    elif args.init_from:
        from .init_from import plan_init_from

        plan.cfg, plan.init_model, plan.init_tokenizer, plan.notes = plan_init_from(
            args, extra, args.init_from, amend=add_hooks
        )
    else:
        plan.cfg = merged if merged is not None else parse_overrides(base_config(args), extra)
        add_hooks(plan.cfg)
        plan.cfg.validate()
    from ..train.hooks import configured_hooks

    plan.hooks = configured_hooks(plan.cfg)
    return plan


def _plan_auto(args, extra: list[str], say, growth: dict | None) -> Plan:
    from ..train import run_dir as R

    # merged once, for where the run writes; validated once, by whichever plan follows (a new run reuses it)
    merged = parse_overrides(base_config(args), extra)
    out = Path(merged.train.out_dir)
    # ownership first: nothing in a folder nexus cannot prove is a run of its own is touched, not even
    # the recovery of interrupted saves (which happens when the lock is taken)
    lock = _locked(out, lambda: check_output(out, TRAIN_RUN, resume=True))
    try:
        resume = R.latest_checkpoint(out)
        if resume is None:
            restart = out.is_dir() and any(p.name != MARKER for p in out.iterdir())
            if restart:
                R.check_in_place(out)
            plan = _plan_start(args, extra, None, growth=growth, merged=merged)
            plan.replace = restart
            # said once the plan stands: a config refused above must not be preceded by "starting a new run"
            say(
                f"--resume auto: no checkpoint in {out}; "
                + (
                    "starting the run over (the files the killed run wrote are replaced; nothing else is touched)"
                    if restart
                    else "starting a new run"
                )
            )
        else:
            plan = _plan_start(args, extra, resume, out, growth)
            R.check_in_place(out, log_to=plan.cfg.train.log_to)  # before saying so: a refusal is one line
            say(f"--resume auto: resuming from {resume}")
            given = [
                f
                for f, v in (("--preset", args.preset), ("--config", args.config), ("--init-from", args.init_from))
                if v
            ]
            if given:
                plan.notes.insert(
                    0, f"{'/'.join(given)} not used: the run continues from {resume} (its model, tokenizer and weights)"
                )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    plan.lock = lock
    return plan


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
