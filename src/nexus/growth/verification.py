"""Growth verification, generic over every family: did the function survive, and can the new part learn?

1. max |logits_after - logits_before| on a probe batch (random tokens from a fixed seed).
2. On a copy of the grown model, two probe optimizer steps (AdamW or Muon, as the run would train):
   the gradient norm of every *new block* after each step. A new block is a rectangular region of
   new entries of a grown parameter (see growth.inherit.region_blocks; e.g. W_A's three new blocks)
   or a whole new parameter. A block whose gradient is exactly zero in both probes is reported dead:
   with GELU(0) = 0 an all-zero growth stays exactly zero under any optimizer, so "exactly zero"
   is the honest test (a live block has a gradient many orders of magnitude above rounding).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from .param_map import ParamMap


def new_blocks(model: nn.Module, param_maps: dict[str, ParamMap]) -> dict[str, tuple[str, tuple | None]]:
    """block name -> (parameter name, slices or None for the whole tensor)."""
    from .inherit import region_blocks

    params = dict(model.named_parameters())
    out: dict[str, tuple[str, tuple | None]] = {}
    for name, pm in param_maps.items():
        if name not in params:
            continue
        p = params[name]
        if pm.old_name is None:
            out[name] = (name, None)
        elif pm.old_slices is not None:
            old_shape = [s.stop - (s.start or 0) for s in pm.old_slices]
            for tags, sl in region_blocks(old_shape, p.shape):
                out[f"{name}[{','.join(tags)}]"] = (name, sl)
    return out


def probe_batch(vocab_size: int, batch_size: int, seq_len: int, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=g)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def max_abs_dlogits(model_before: nn.Module, model_after: nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():  # a block, not a decorator: mutmut does not mutate decorated functions
        a = model_before(x).logits
        b = model_after(x).logits
        return float((a.double() - b.double()).abs().max())


def verify(
    model_before: nn.Module,
    model_after: nn.Module,
    param_maps: dict[str, ParamMap],
    vocab_size: int,
    train_cfg=None,
    optimizer: str | None = None,
    n_steps: int = 2,
    batch_size: int = 2,
    seq_len: int = 32,
    seed: int = 0,
) -> dict:
    """-> {"max_abs_dlogits", "new_block_grad_norms": {block: [norm after probe 1, probe 2, ...]},
    "dead_blocks": [...], "optimizer": name}. Neither model is modified."""
    from ..config import TrainConfig
    from ..optim.param_groups import build_optimizer

    tcfg = copy.deepcopy(train_cfg) if train_cfg is not None else TrainConfig()
    if optimizer is not None:
        tcfg.optimizer = optimizer
    ref = next(model_after.parameters())
    max_len = getattr(getattr(model_after, "cfg", None), "max_seq_len", seq_len)
    x, y = probe_batch(vocab_size, batch_size, min(seq_len, max_len), seed, ref.device)
    was_training = (model_before.training, model_after.training)
    model_before.eval(), model_after.eval()
    try:
        dlogits = max_abs_dlogits(model_before, model_after, x)
    finally:
        model_before.train(was_training[0]), model_after.train(was_training[1])

    probe = copy.deepcopy(model_after).train()
    params = dict(probe.named_parameters())
    blocks = new_blocks(probe, param_maps)
    opt = build_optimizer(probe, tcfg)
    norms: dict[str, list[float]] = {b: [] for b in blocks}
    for _ in range(n_steps):
        opt.zero_grad(set_to_none=False)
        out = probe(x, labels=y)
        loss = out.loss
        loss.backward()
        for b, (pname, sl) in blocks.items():
            g = params[pname].grad
            if g is None:
                norms[b].append(0.0)
            else:
                norms[b].append(float((g if sl is None else g[sl]).double().norm()))
        opt.step()
    dead = [b for b, ns in norms.items() if all(n == 0.0 for n in ns)]
    return {
        "max_abs_dlogits": dlogits,
        "new_block_grad_norms": norms,
        "dead_blocks": dead,
        "optimizer": tcfg.optimizer.kind,
        "probe_steps": n_steps,
    }
