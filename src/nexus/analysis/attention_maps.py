"""Averaged attention heatmaps (the Nexus paper's figure 2): outer, inner-Q and inner-K attention.

`write_attention_maps(model, input_ids, out_dir)` runs one forward pass with forward hooks on the
attention hook points, averages the causal attention probabilities over batch, heads and layers, and writes
one PNG per map (outer.png, inner_q.png, inner_k.png, inner_v.png when values are refined) plus
attention_maps.png with all panels side by side and attention_maps.npz with the arrays.

Every attention layer's `hook_qk` (the q, k its outer attention uses) is recorded as "outer";
higher-order layers also call `hook_inner["inner_<target>"]` with the inner level directly below
the outer attention, which is the paper's inner-Q/inner-K map at order 2.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..figures import pyplot, save_figure
from ..models.attention import Attention
from ..models.higher_order import HigherOrderAttention
from ..models.reference.higher_order_ref import causal_probs
from .hooks import forward_hooks

TITLES = {
    "outer": "outer attention",
    "inner_q": "inner attention (Q)",
    "inner_k": "inner attention (K)",
    "inner_v": "inner attention (V)",
}


class AttentionMapRecorder:
    """Running mean of attention probability matrices per map name."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, q: torch.Tensor, k: torch.Tensor) -> None:
        probs = causal_probs(q.detach().float(), k.detach().float()).mean(dim=(0, 1))  # (T, T)
        self.sums[name] = self.sums.get(name, 0) + probs.cpu()
        self.counts[name] = self.counts.get(name, 0) + 1

    def maps(self) -> dict[str, np.ndarray]:
        return {n: (self.sums[n] / self.counts[n]).numpy() for n in self.sums}


@torch.no_grad()
def record_attention_maps(model, input_ids: torch.Tensor) -> dict[str, np.ndarray]:
    """name -> (T, T) attention averaged over batch, heads and layers, from one forward pass."""
    recorder = AttentionMapRecorder()

    def record(name: str):
        return lambda module, inputs, output: recorder.add(name, *inputs)

    pairs: list[tuple[torch.nn.Module, Callable]] = []  # (module, forward hook), as forward_hooks takes them
    for m in model.modules():
        if isinstance(m, Attention):
            pairs.append((m.hook_qk, record("outer")))
        if isinstance(m, HigherOrderAttention):
            pairs += [(hook, record(name)) for name, hook in m.hook_inner.items()]
    was_training = model.training
    model.eval()
    try:
        with forward_hooks(pairs):
            model(input_ids)
    finally:
        model.train(was_training)
    return recorder.maps()


def write_attention_maps(model, input_ids: torch.Tensor, out_dir) -> dict:
    """Write the averaged heatmaps of `model` on `input_ids` into `out_dir`; returns file names
    relative to out_dir (callers may write into a temporary directory and rename it):
    {"maps": {name: "<name>.png"}, "figure": "attention_maps.png", "arrays": "attention_maps.npz",
    "shape": [T, T]}."""
    plt = pyplot()
    maps = record_attention_maps(model, input_ids)
    if not maps:
        return {"maps": {}, "figure": None, "arrays": None, "shape": None}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    order = [n for n in ("outer", "inner_q", "inner_k", "inner_v") if n in maps]
    files = {}
    for name in order:
        fig, ax = plt.subplots(figsize=(4, 4))
        _draw(ax, maps[name], TITLES[name])
        files[name] = save_figure(fig, out / f"{name}.png", bbox_inches="tight")
    fig, axes = plt.subplots(1, len(order), figsize=(4 * len(order), 4), squeeze=False)
    for ax, name in zip(axes[0], order):
        _draw(ax, maps[name], TITLES[name])
    save_figure(fig, out / "attention_maps.png", bbox_inches="tight")
    tmp = out / ".attention_maps.tmp.npz"
    np.savez(tmp, **maps)
    os.replace(tmp, out / "attention_maps.npz")
    return {
        "maps": files,
        "figure": "attention_maps.png",
        "arrays": "attention_maps.npz",
        "shape": list(maps[order[0]].shape),
    }


def _draw(ax, m: np.ndarray, title: str) -> None:
    ax.imshow(m, cmap="viridis", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
