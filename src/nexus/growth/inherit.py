"""Build the grown model and inherit the old one's values: the one routine every growth family uses
(SPARKLING width, Nexus-Rank M/A, TokenFormer tokens, higher-order retrofit).

By default the new model is built on the meta device and materialized empty (no wasted random init of
a 100M-parameter model): every parameter is then either copied whole (same shape) or gets the old
tensor in its leading corner, and `fill_new(name, new_param, old_param)` writes the new entries. With
`init_seed` the new model gets its own initialization under that seed instead, and parameters the old
model does not have keep it (a retrofit's new inner attention).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn as nn

from ..config import ModelConfig
from .param_map import ParamMap


def leading_slices(old_shape) -> tuple:
    return tuple(slice(0, s) for s in old_shape)


def region_blocks(old_shape, new_shape) -> list[tuple[tuple[str, ...], tuple]]:
    """Split the new entries of a tensor grown at the end of some dims into rectangular blocks.

    Returns [(("old"|"new", ...) per dim, slices)], all-old excluded. For a matrix grown in both dims:
    (old,new), (new,old), (new,new) -- e.g. W_A's A1, A2, A3 blocks.
    """
    per_dim = []
    for o, n in zip(old_shape, new_shape):
        opts = [("old", slice(0, o))]
        if n > o:
            opts.append(("new", slice(o, n)))
        per_dim.append(opts)
    out = []
    for combo in itertools.product(*per_dim):
        tags = tuple(t for t, _ in combo)
        if all(t == "old" for t in tags):
            continue
        out.append((tags, tuple(s for _, s in combo)))
    return out


def build_like(old_model: nn.Module, cfg: ModelConfig) -> nn.Module:
    """The model for `cfg` on old_model's device/dtype, parameters uninitialized, buffers copied by name."""
    from ..models import build_model

    ref = next(old_model.parameters())
    with torch.device("meta"):
        new = build_model(cfg)
    new = new.to_empty(device=ref.device)
    new = new.to(dtype=ref.dtype) if ref.is_floating_point() else new
    old_buffers = dict(old_model.named_buffers())
    for name, buf in new.named_buffers():
        src = old_buffers.get(name)
        if src is None or src.shape != buf.shape:
            raise RuntimeError(f"growth cannot derive buffer {name!r}; the grower must rebuild it")
        buf.copy_(src)
    return new


def build_initialized(old_model: nn.Module, cfg: ModelConfig, seed: int) -> nn.Module:
    """The model for `cfg` with its own initialization drawn under `seed` (the global RNG untouched), on
    old_model's device and dtype."""
    from ..models import build_model

    ref = next(old_model.parameters())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        new = build_model(cfg)
    return new.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)


def inherit(
    old_model: nn.Module, new_cfg: ModelConfig, fill_new=None, init_seed: int | None = None
) -> tuple[nn.Module, dict[str, ParamMap], dict]:
    """-> (new model, param_maps, old_shapes of grown params).

    A parameter of the same shape is copied whole. A grown one gets the old tensor in its leading corner
    and `fill_new(name, p_new, p_old)` sets every entry outside it (it may also rewrite the old corner,
    e.g. SPARKLING's fan-in factor); fill_new returns a ParamMap when the leading-corner map does not
    say enough (copy sources, fan-in factors), else None. A parameter the old model lacks keeps the
    new model's own initialization (only with `init_seed`). Every old parameter must find its place."""
    # a with-block, not @torch.no_grad(): mutmut does not mutate decorated functions
    with torch.no_grad():
        new_model = (
            build_like(old_model, new_cfg) if init_seed is None else build_initialized(old_model, new_cfg, init_seed)
        )
        old_params = dict(old_model.named_parameters())
        new_names = {name for name, _ in new_model.named_parameters()}
        dropped = sorted(set(old_params) - new_names)
        if dropped:
            raise RuntimeError(f"growth has no place for the old parameter {dropped[0]!r} in the grown model")
        maps: dict[str, ParamMap] = {}
        old_shapes: dict[str, list[int]] = {}
        for name, p in new_model.named_parameters():
            old = old_params.get(name)
            if old is None:
                if init_seed is None:
                    raise RuntimeError(f"growth produced a parameter {name!r} with no source; the grower must fill it")
                maps[name] = ParamMap(old_name=None)  # brand new: keeps the model's own initialization
                continue
            if old.shape == p.shape:
                p.copy_(old)
                maps[name] = ParamMap(old_name=name)
                continue
            if old.ndim != p.ndim or any(o > n for o, n in zip(old.shape, p.shape)):
                raise RuntimeError(f"{name}: cannot embed shape {tuple(old.shape)} in {tuple(p.shape)}")
            if fill_new is None:
                raise RuntimeError(f"growth changed the shape of {name!r} but its grower fills no new entries")
            sl = leading_slices(old.shape)
            p[sl] = old  # fill_new must write every entry outside this corner (to_empty left garbage there)
            custom = fill_new(name, p, old)
            maps[name] = custom if custom is not None else ParamMap(old_name=name, old_slices=sl)
            old_shapes[name] = list(old.shape)
        return new_model, maps, old_shapes


def matched_std(old: torch.Tensor, max_samples: int = 1 << 16) -> float:
    """Scale for random new entries: the std of the trained entries of the same matrix (estimated from
    an evenly strided subsample: a full pass over a 100M-parameter model costs seconds for no gain)."""
    flat = old.detach().reshape(-1)
    if flat.numel() > max_samples:
        flat = flat[:: flat.numel() // max_samples]
    s = float(flat.float().std()) if flat.numel() > 1 else 0.0
    return s if s > 0 else 0.02


def fill_normal(view: torch.Tensor, std: float, gen: torch.Generator) -> None:
    """N(0, std^2) into a (possibly strided) block, drawn from a CPU generator in the block's row-major
    order, so the values depend on neither the device nor the block's strides (torch's in-place
    `normal_` on a strided view draws in another order). A contiguous CPU block is filled in place; any
    other block is drawn into a CPU temporary of its shape and copied."""
    if view.device.type == "cpu" and view.is_contiguous():
        view.normal_(0.0, std, generator=gen)
    else:
        view.copy_(torch.empty(view.shape, dtype=view.dtype).normal_(0.0, std, generator=gen))
