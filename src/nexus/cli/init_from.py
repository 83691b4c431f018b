"""`nexus train --init-from SOURCE`: a new run that starts from a model's weights only (continued
pretraining on new data, SFT of a pretrained or grown model). The optimizer and the LR schedule start
fresh; data and training settings come from --preset / --config when given, else from SOURCE's own
config (a HF model: the default preset's), then the overrides. \
The model's shape comes from SOURCE: a nexus checkpoint (grown ones included) or a HF model
directory (imported as `nexus import` does). The tokenizer is SOURCE's unless one is given; a
tokenizer whose vocabulary differs from the model's needs --resize-vocab (checked by the trainer
before anything is written)."""

from __future__ import annotations

import copy
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..config_overrides import parse_overrides
from .common import base_config, override_keys

TOKENIZER_KEYS = ("data.tokenizer", "data.bpe_vocab_size")  # given: a new tokenizer; absent: SOURCE's
BYTE_KINDS = ("byte", "byte_chat")  # byte tokenizers: data.chat picks the plain or the chat one


def plan_init_from(args, extra: list[str], source: str, amend=None):
    """-> (validated RunConfig, model with SOURCE's weights, tokenizer to train with or None, notes).
    amend: a last change to the merged config, before its one validation (the growth flags)."""
    from ..train.resume import changed_fields, param_shapes

    src = Path(source)
    src_cfg, load = _read_source(src)
    cfg, settings_note = _training_settings(args, src, src_cfg)
    cfg.model = copy.deepcopy(src_cfg.model)
    new_tokenizer = bool(override_keys(extra) & set(TOKENIZER_KEYS))
    if not new_tokenizer:
        cfg.data.tokenizer, cfg.data.bpe_vocab_size = src_cfg.data.tokenizer, src_cfg.data.bpe_vocab_size
    parse_overrides(cfg, extra)
    model_changes = changed_fields(_model_dict(src_cfg), _model_dict(cfg), "model.")
    if model_changes and param_shapes(src_cfg.model) != param_shapes(cfg.model):
        shown = ", ".join(f"{p}={b!r} (source: {a!r})" for p, a, b in model_changes)
        raise ConfigError(
            f"--init-from={source!r}: {shown} changes the model's shape (valid: drop it; grow the "
            f"weights first with `nexus grow --checkpoint {source} --out DIR ...`)"
        )
    if amend is not None:
        amend(cfg)
    cfg.validate()
    model, tok = load(cfg)
    notes = [
        f"--init-from={source!r}: its weights only; a fresh optimizer and LR schedule"
        + (
            f" (grown at steps {[r.get('step') for r in src_cfg.growth_history]}; its re-warmup is not carried)"
            if src_cfg.growth_history
            else ""
        )
    ]
    notes += [f"--init-from: {p} {a!r} -> {b!r}" for p, a, b in model_changes]
    notes.append(settings_note)
    cfg.growth_history = []  # the growth records describe the source run's optimizer and schedule, not this run's
    if new_tokenizer or getattr(tok, "kind", "byte") in BYTE_KINDS:
        tok = None  # built from data.tokenizer / data.chat by the trainer's data module
    n_tok = known_vocab(cfg.data, tok)
    if n_tok is not None:  # else a BPE trained on the corpus: the trainer checks once it exists
        from ..models.vocab import needs_resize

        needs_resize(model.cfg.vocab_size, n_tok, cfg.data, tok is not None, args.resize_vocab)
    return cfg, model, tok, notes


def _training_settings(args, src: Path, src_cfg: RunConfig) -> tuple[RunConfig, str]:
    """(the config the new run's data and training settings start from, a note saying whose they are).
    --preset / --config: theirs. Neither, from a nexus checkpoint: the checkpoint's own (its data, batch,
    lr and steps; before, the default preset's were taken, so a baseline-micro checkpoint trained with
    baseline-tiny's batch and was labelled baseline-tiny). A HF model carries no training settings: the
    default preset's. The run is labelled by the model it starts from."""
    label = src_cfg.preset or src.name
    if args.preset or args.config:
        cfg = base_config(args)
        note = (
            f"--init-from: data and training settings from {'--preset ' + args.preset if args.preset else ''}"
            f"{' and ' if args.preset and args.config else ''}{'--config ' + args.config if args.config else ''}"
        )
    elif (src / "meta.json").is_file():
        cfg = copy.deepcopy(src_cfg)
        cfg.train.drop_hook("growth")  # the weights have grown already; growing them again is not the run asked for
        cfg.train.schedule_steps = 0  # a fresh schedule over this run's steps
        cfg.train.out_dir = f"runs/{label}-init"  # never the source's own run directory
        note = (
            f"--init-from: data and training settings (batch {cfg.train.batch_size} x {cfg.data.seq_len} tokens, "
            f"lr {cfg.train.lr:g}, {cfg.train.steps} steps) from the checkpoint's config; --preset / --config / "
            "overrides choose others"
        )
    else:
        cfg = base_config(args)
        note = (
            f"--init-from: a HF model carries no training settings: data and training from the default preset "
            f"{args.default_preset} (--preset / --config / overrides choose others)"
        )
    cfg.preset = label
    return cfg, note


def known_vocab(data_cfg, tok) -> int | None:
    """The vocabulary of the tokenizer the run will use, when known before reading any data."""
    if tok is not None:
        return tok.vocab_size
    if data_cfg.source.startswith("synthetic:") or data_cfg.tokenizer == "bpe":
        return None
    if data_cfg.tokenizer == "byte":
        from ..data.chat import ChatByteTokenizer
        from ..data.tokenizer import ByteTokenizer

        return (ChatByteTokenizer() if data_cfg.chat else ByteTokenizer()).vocab_size
    from ..data.tokenizer_files import load_tokenizer

    return load_tokenizer(data_cfg.tokenizer).vocab_size


def _model_dict(cfg: RunConfig) -> dict:
    return cfg.to_dict()["model"]


def _read_source(src: Path):
    """-> (SOURCE's RunConfig, load(cfg) -> (model with SOURCE's weights built for cfg.model, tokenizer))."""
    flag = f"--init-from={str(src)!r}"
    if (src / "meta.json").is_file():
        from ..checkpoint import load_checkpoint, read_config

        def load_nexus(cfg):
            model, _, tok = load_checkpoint(src, flag="--init-from", model_cfg=cfg.model, stored_config=False)
            return model, tok

        return read_config(src, flag="--init-from"), load_nexus
    if (src / "config.json").is_file():
        from ..hf import import_hf

        model, src_cfg = import_hf(src)

        def load_hf(cfg):
            if cfg.model == src_cfg.model:
                return model, model.tokenizer
            from ..checkpoint import load_state_dict_checked
            from ..models import build_model

            rebuilt = build_model(cfg.model)
            load_state_dict_checked(rebuilt, model.state_dict(), str(src))
            return rebuilt, model.tokenizer

        return src_cfg, load_hf
    raise ConfigError(f"{flag} (valid: a nexus checkpoint directory, or a HF model directory with config.json)")
