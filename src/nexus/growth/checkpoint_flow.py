"""Growing a checkpoint directory: load, grow, verify, then write the grown checkpoint atomically to a
new directory; the source stays untouched."""

from __future__ import annotations

import copy
from pathlib import Path

from ..config import ConfigError, RunConfig
from .generic_grow import grow


def grow_checkpoint(
    src: str | Path, out: str | Path, spec: dict, probe_verify: bool = True, train_overrides: list[str] = ()
) -> dict:
    """Load a checkpoint, grow it, verify, and write the grown checkpoint atomically to `out`.
    `train_overrides` (dotted `--train.*` arguments, e.g. --train.steps 600) are recorded in the grown
    checkpoint's config: the continued run's length and so its LR schedule after the growth."""
    from ..checkpoint import load_checkpoint, load_trainer_state, save_checkpoint
    from ..config_overrides import parse_overrides

    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ConfigError(
            f"--out={str(out)!r} equals --checkpoint (valid: a different directory; the source stays untouched)"
        )
    model, cfg, tok = load_checkpoint(src)
    tstate = load_trainer_state(src) or {}
    step = int(tstate.get("step", 0))
    notes = []
    if train_overrides:
        from ..train.run_dir import carry_schedule_and_lr

        before = copy.deepcopy(cfg.train)
        parse_overrides(cfg, list(train_overrides))
        cfg.validate()
        notes = carry_schedule_and_lr(before, cfg.train, grown=True, step=step)  # what the overrides changed: reported
    new_model, new_cfg, new_opt, result = grow(model, cfg, spec, tstate.get("optimizer"), step)
    if train_overrides:
        from ..train.run_dir import record_replan

        record_replan(before, new_cfg.train, new_cfg.growth_history, step)  # the lr bridges to the new horizon
    report = dict(result.report)
    if notes:
        report["notes"] = "; ".join(notes)
    if probe_verify:
        from .verification import verify

        report["verify"] = verify(
            model, new_model, result.param_maps, vocab_size=new_cfg.model.vocab_size, train_cfg=new_cfg.train
        )
    # The post-growth monitor of an earlier growth describes the model before *that* growth: it is replaced
    # by this growth's, built as GrowthHook builds it in training, so the continued run logs the
    # symmetry lock and RMS ratio as a run grown in training does.
    from .hook import GrowthHook

    hooks = {k: v for k, v in (tstate.get("hooks") or {}).items() if k != GrowthHook.state_key}
    if tstate:
        from ..data.loader import DataModule
        from .diagnostics import monitor_after_growth

        data = DataModule(cfg.data, seed=cfg.train.seed, tokenizer=tok, quiet=True)
        monitor, rms_report = monitor_after_growth(
            model,
            new_model,
            cfg.model.max_seq_len,
            new_cfg.model,
            result.param_maps,
            next(iter(data.val_batches(1, cfg.train.batch_size))),
        )
        report.update(rms_report)
        hooks[GrowthHook.state_key] = GrowthHook.saved_state(monitor, len(new_cfg.growth_history))
    report["continued run"] = continued_run_plan(new_cfg, step, out)
    new_tstate = {k: v for k, v in tstate.items() if k != "hooks"} | ({"hooks": hooks} if hooks else {})
    new_tstate["optimizer"] = new_opt.state_dict()
    new_tstate["step"] = step
    save_checkpoint(out, new_model, new_cfg, tok, new_tstate if tstate else None)
    return report


def continued_run_plan(cfg: RunConfig, step: int, out) -> str:
    """What `nexus train --resume OUT` will do with the LR after this growth, in one line."""
    from .rewarmup import lr_plan

    if cfg.train.steps <= step:
        return (
            f"the run ended at step {step}: continue with `nexus train --resume {out} --train.steps N` (N > {step}); "
            "its LR schedule is then re-planned over N steps, the new entries re-warmed as recorded (or give "
            "--train.steps N here)"
        )
    plan, at_floor = lr_plan(cfg.train, step, cfg.growth_history[-1])
    floor = (
        " WARNING: every remaining step is at the LR floor (train.min_lr_ratio); set --train.schedule_steps"
        if at_floor
        else ""
    )
    return f"`nexus train --resume {out}` trains steps {step}->{cfg.train.steps}; {plan}{floor}"
