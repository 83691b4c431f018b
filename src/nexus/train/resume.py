"""The one config a resumed run trains with, and what a resume may change.

A checkpoint fixes the model (its shape, and every model field but the few declared safe in
RESUMABLE_MODEL_FIELDS: its weights compute one function) and the tokenizer: its weights and its
optimizer state are laid out for them. \
Everything else given on resume is honoured and recorded in the run's config.yaml (data
source and sequence length, steps and the schedule horizon, learning rates, logging, evaluation and
save cadence, the batch), each change printed as a note. The global batch is kept across world sizes
by adjusting gradient accumulation, or the resume is refused with the values that keep it. A change
the checkpoint cannot take is refused with one line that names the command that can: `nexus grow`
for a new shape, `nexus train --init-from` for a new tokenizer or optimizer.

`nexus train --resume`, `nexus-train-env` and the experiments all resume through `resume_config`.
"""

from __future__ import annotations

import copy
import os

from ..config import ConfigError, RunConfig
from ..config_overrides import parse_overrides

# Fields that decide the tokenizer a checkpoint stores (its embedding rows are laid out for it).
TOKENIZER_FIELDS = ("data.tokenizer", "data.bpe_vocab_size", "data.chat")
# The stored optimizer state belongs to this optimizer.
OPTIMIZER_FIELDS = ("train.optimizer.kind",)
# Fields whose change is a different run location or bookkeeping, not a note-worthy change.
UNNOTED_FIELDS = ("train.out_dir",)
# The model fields a resume may change: the checkpoint's weights compute the same function with either
# value. Every other model field must equal the checkpoint's, even when the tensor sizes would allow it
# (more heads of the same total width is another function of the same weights).
RESUMABLE_MODEL_FIELDS = {
    "model.max_seq_len": "RoPE tables and the generation limit; positions the run trained on are unchanged",
    "model.z_loss": "a term of the training loss, not of the model's output (like an lr change)",
}
# Data fields a source kind never reads: on resume (and only there are they compared) a change of one
# would be recorded as honoured while having no effect, so it is refused. A prepared directory fixed its
# split, text field, document cap, document unit and token files when `nexus data prepare` wrote it; a
# .bin file has no documents; a synthetic task reads no corpus.
_CORPUS_FIELDS = (
    "data.split_seed",
    "data.text_field",
    "data.max_documents",
    "data.num_proc",
    "data.cache_dir",
    "data.document_per_file",
)
UNREAD_DATA_FIELDS = {
    "prepared": ("data.val_fraction", "data.dtype", *_CORPUS_FIELDS),
    "bin": _CORPUS_FIELDS,
    "synthetic": ("data.val_fraction", "data.dtype", *_CORPUS_FIELDS),
}


def launched_world_size() -> int:
    """The world size torchrun (or a scheduler) gives this process, read before joining the group."""
    return max(int(os.environ.get("WORLD_SIZE") or 1), 1)  # unset or empty: one process


def resume_config(
    ckpt, overrides=(), *, out_dir=None, world: int | None = None, flag: str = "--resume", amend=None
) -> tuple[RunConfig, list[str]]:
    """(the validated config a run resumed from `ckpt` trains with, a note per change it makes).

    overrides: dotted `--section.field VALUE` arguments, applied on top of the checkpoint's config.
    out_dir: where the resumed run writes (default: the checkpoint's run directory, else the
    checkpoint's own). world: the world size it will run at (default: the launcher's). amend: a last
    change to the merged config, before its one validation (`nexus train`'s growth flags)."""
    from ..checkpoint import load_trainer_state, read_config
    from .run_dir import carry_schedule_and_lr, record_replan, resume_run_dir

    stored = read_config(ckpt, flag=flag)
    cfg = parse_overrides(copy.deepcopy(stored), list(overrides))
    changes = changed_fields(stored.to_dict(), cfg.to_dict())
    where = f"{flag}={str(ckpt)!r}"
    refuse_unresumable(stored, cfg, changes, where, ckpt)
    shown = [f"{path} {old!r} -> {new!r}" for path, old, new in changes if path not in UNNOTED_FIELDS]
    notes = [f"resumed with {', '.join(shown)}"] if shown else []
    st = load_trainer_state(ckpt, with_optimizer=False) or {}
    notes += carry_schedule_and_lr(stored.train, cfg.train, grown=bool(stored.growth_history), step=st.get("step"))
    record_replan(stored.train, cfg.train, cfg.growth_history, st.get("step"))
    notes += nothing_to_train(stored, cfg, st.get("step"), where)
    notes += keep_global_batch(
        stored.train, cfg.train, st.get("world"), launched_world_size() if world is None else world, where
    )
    cfg.train.out_dir = str(out_dir or resume_run_dir(ckpt))
    if amend is not None:
        amend(cfg)
    return cfg.validate(), notes


def nothing_to_train(stored: RunConfig, cfg: RunConfig, step: int | None, where: str) -> list[str]:
    """A checkpoint already at train.steps: refused when it is a checkpoint just grown (`nexus grow` without
    --train.steps: resuming it would train 0 steps and exit 0), else a note (a finished run evaluated and
    saved again)."""
    if step is None or step < cfg.train.steps:
        return []
    fix = f"--train.steps N with N > {step}"
    if stored.growth_history and stored.growth_history[-1].get("step") == step:
        raise ConfigError(
            f"{where}: the checkpoint was grown at step {step} and train.steps is {cfg.train.steps}: "
            f"nothing left to train (valid: {fix}; its LR schedule is then re-planned over N steps)"
        )
    return [
        f"the checkpoint is at step {step} and train.steps is {cfg.train.steps}: no step is trained, only the "
        f"final evaluation and checkpoint (give {fix} to train further)"
    ]


def changed_fields(old: dict, new: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """[(dotted path, old value, new value)] of every leaf that differs between two config dicts."""
    out = []
    for k in new:
        a, b = old.get(k), new[k]
        path = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict) and k != "growth" and k != "synthetic":
            out += changed_fields(a, b, path + ".")
        elif a != b:
            out.append((path, a, b))
    return out


def refuse_unresumable(stored: RunConfig, cfg: RunConfig, changes, where: str, ckpt) -> None:
    """ConfigError (one line) for a change the checkpoint cannot take, naming the command that can."""
    init_from = f"`nexus train --init-from {ckpt}`"
    tok = [c for c in changes if c[0] in TOKENIZER_FIELDS]
    if tok:
        raise ConfigError(
            f"{where}: {_shown(tok)} changes the tokenizer the checkpoint was trained with (valid: "
            f"resume without it, or start a new run from its weights with {init_from} and the new "
            "tokenizer, adding --resize-vocab if its vocabulary differs)"
        )
    opt = [c for c in changes if c[0] in OPTIMIZER_FIELDS]
    if opt:
        raise ConfigError(
            f"{where}: {_shown(opt)} cannot take the checkpoint's optimizer state (valid: resume "
            f"without it, or start from its weights with a fresh optimizer: {init_from})"
        )
    model = [c for c in changes if c[0].startswith("model.") and c[0] not in RESUMABLE_MODEL_FIELDS]
    if model and param_shapes(stored.model) != param_shapes(cfg.model):
        raise ConfigError(
            f"{where}: {_shown(model)} changes the model's shape (valid: resume without it; grow the "
            f"checkpoint with `nexus grow --checkpoint {ckpt} --out DIR ...`, or start from its weights "
            f"with {init_from})"
        )
    if model:
        raise ConfigError(
            f"{where}: {_shown(model)} changes the function the checkpoint's weights compute (valid: "
            f"resume without it; the model fields a resume may change: "
            f"{', '.join(RESUMABLE_MODEL_FIELDS)}; or start a new run from its weights with {init_from})"
        )
    refuse_unread_data(cfg, changes, where)


def refuse_unread_data(cfg: RunConfig, changes, where: str) -> None:
    """ConfigError for a changed data field the run's source does not read (it would have no effect)."""
    data = [c for c in changes if c[0].startswith("data.")]
    if not data:
        return
    from ..data.sources import resolve_source

    kind = resolve_source(cfg.data.source).kind
    unread = [c for c in data if c[0] in UNREAD_DATA_FIELDS.get(kind, ())]
    if unread:
        redo = " (prepare the data again with the new setting: `nexus data prepare`)" if kind == "prepared" else ""
        raise ConfigError(
            f"{where}: {_shown(unread)} has no effect on data.source={cfg.data.source!r}, a {kind} "
            f"source, which does not read it (valid: resume without it{redo})"
        )


def _shown(changes) -> str:
    return ", ".join(f"{path}={new!r} (checkpoint: {old!r})" for path, old, new in changes)


def param_shapes(model_cfg) -> dict[str, tuple]:
    """{name: shape} of the model a config builds, on the meta device (no memory, no init)."""
    import torch

    from ..models import build_model

    with torch.device("meta"):
        model = build_model(model_cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def keep_global_batch(old, new, old_world: int | None, world: int, where: str) -> list[str]:
    """Keep the global batch (batch_size x grad_accum x world) a run was trained with when it resumes
    at another world size, through grad_accum. An explicit batch_size / grad_accum on resume chooses
    the new global batch itself (noted). Returns notes; refuses when no grad_accum keeps it."""
    explicit = (new.batch_size, new.grad_accum) != (old.batch_size, old.grad_accum)
    if old_world is None:  # written before checkpoints recorded it
        if world > 1 and not explicit:
            return [
                f"the checkpoint does not record its world size: the global batch is now {new.batch_size} x "
                f"{new.grad_accum} x {world} = {new.batch_size * new.grad_accum * world} sequences"
            ]
        old_world = world
    before = old.batch_size * old.grad_accum * old_world
    if explicit:
        after = new.batch_size * new.grad_accum * world
        return (
            []
            if after == before
            else [
                f"global batch {before} -> {after} sequences per step (train.batch_size {new.batch_size} x "
                f"train.grad_accum {new.grad_accum} x world {world}), as given on resume"
            ]
        )
    if world == old_world:
        return []
    per_step = new.batch_size * world
    if before % per_step == 0:
        new.grad_accum = before // per_step
        return [
            f"world size {old_world} -> {world}: train.grad_accum {old.grad_accum} -> {new.grad_accum} keeps the "
            f"global batch of {before} sequences ({new.batch_size} x {new.grad_accum} x {world})"
        ]
    fits = [(b, before // (b * world)) for b in range(new.batch_size, 0, -1) if before % (b * world) == 0]
    valid = (
        f"--train.batch_size {fits[0][0]} --train.grad_accum {fits[0][1]} keeps it"
        if fits
        else f"a world size dividing {before} keeps it"
    )
    raise ConfigError(
        f"{where}: world size {old_world} -> {world} cannot keep the global batch of {before} sequences "
        f"(train.batch_size {old.batch_size} x train.grad_accum {old.grad_accum} x world {old_world}) "
        f"with train.batch_size {new.batch_size} (valid: {valid}; or set --train.batch_size and "
        "--train.grad_accum to choose a new global batch)"
    )
