"""Growing a checkpoint directory: load, grow, verify, then write the grown checkpoint atomically to a
new directory; the source stays untouched."""
from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from .generic_grow import grow


def grow_checkpoint(src: str | Path, out: str | Path, spec: dict, probe_verify: bool = True) -> dict:
    """Load a checkpoint, grow it, verify, and write the grown checkpoint atomically to `out`."""
    from ..checkpoint import load_checkpoint, load_trainer_state, save_checkpoint

    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ConfigError(f"--out={str(out)!r} equals --checkpoint (valid: a different directory; the source stays untouched)")
    model, cfg, tok = load_checkpoint(src)
    tstate = load_trainer_state(src) or {}
    step = int(tstate.get("step", 0))
    new_model, new_cfg, new_opt, result = grow(model, cfg, spec, tstate.get("optimizer"), step)
    report = dict(result.report)
    if probe_verify:
        from .verification import verify

        report["verify"] = verify(model, new_model, result.param_maps, vocab_size=new_cfg.model.vocab_size,
                                  train_cfg=new_cfg.train)
    # The post-growth monitor in a grown-in-training checkpoint describes the model before *that* growth:
    # carried over, it would only be refused again at every resume of this one.
    hooks = {k: v for k, v in (tstate.get("hooks") or {}).items() if k != "growth"}
    new_tstate = {k: v for k, v in tstate.items() if k != "hooks"} | ({"hooks": hooks} if hooks else {})
    new_tstate["optimizer"] = new_opt.state_dict()
    new_tstate["step"] = step
    save_checkpoint(out, new_model, new_cfg, tok, new_tstate if tstate else None)
    return report
