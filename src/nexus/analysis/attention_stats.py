"""Attention-pathway statistics of a trained model (ExoFormer paper, Figures 2-5):

  * per-layer attention entropy (nats, mean over queries, heads, batch) and per head;
  * attention-sink share: attention mass on the first token, averaged over queries t >= 1
    (query 0 can only attend to itself);
  * mean gate activation sigmoid(g_hat) per layer (gated attention), and the first layer's whole
    distribution (Fig. 5b, summarized by exo_findings.gate_selectivity);
  * the learned mixing coefficients lambda1 / lambda2 per component, layer and channel/head.

The attention probabilities are recomputed from the (mixed, normed, rotated) q and k each layer
passes to `attend` (read at its `hook_qk` hook point), so the fast SDPA path stays untouched; the
gate logits are read at `hook_gate`. Hooks are installed per call and removed afterwards. \
Plots are written with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch

from ..figures import pyplot, save_figure
from ..models.mixing import COMPONENTS, mixers
from . import format_value, register_analysis
from .exo_findings import (
    gate_selectivity,
    lambda_ratio_by_layer,
    near_zero_anchor_share,
    plot_gate_selectivity,
    plot_lambda_ratio_by_layer,
)
from .hooks import forward_hooks


@contextlib.contextmanager
def recording_attention(model):
    """Yield a dict that collects, per layer index, summed entropy / sink mass / gate activation."""
    rec: dict[int, dict] = {}
    pairs = []
    for i, layer in enumerate(getattr(model, "layers", [])):
        attn = getattr(layer, "attn", None)
        if attn is None or not hasattr(attn, "hook_qk"):
            continue

        def on_qk(module, inputs, output, i=i):
            _record_probs(rec.setdefault(i, _empty()), *inputs)

        def on_gate(module, inputs, output, i=i):
            r = rec.setdefault(i, _empty())
            act = torch.sigmoid(inputs[0].float())
            r["gate_sum"] += float(act.sum())
            r["gate_n"] += act.numel()
            if i == 0:  # the first layer's full distribution (Fig. 5b)
                r["gate_values"].append(act.flatten().cpu())

        pairs += [(attn.hook_qk, on_qk), (attn.hook_gate, on_gate)]
    with forward_hooks(pairs):
        yield rec


def _empty() -> dict:
    return {
        "entropy_head": None,
        "sink_sum": 0.0,
        "sink_n": 0,
        "queries": 0,
        "gate_sum": 0.0,
        "gate_n": 0,
        "gate_values": [],
    }


def attention_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal softmax(q k^T / sqrt(d)) for q (B,H,T,d), k (B,KV,T,d) -> (B,H,T,T)."""
    H, KV, T = q.shape[1], k.shape[1], q.shape[2]
    if KV != H:
        k = k.repeat_interleave(H // KV, dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, k.shape[2], dtype=torch.bool, device=q.device).tril(k.shape[2] - T)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def _record_probs(r: dict, q: torch.Tensor, k: torch.Tensor) -> None:
    p = attention_probs(q, k)
    ent = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)  # (B,H,T)
    per_head = ent.sum(dim=(0, 2))
    r["entropy_head"] = per_head if r["entropy_head"] is None else r["entropy_head"] + per_head
    r["queries"] += ent.shape[0] * ent.shape[2]
    if p.shape[-2] > 1:
        r["sink_sum"] += float(p[:, :, 1:, 0].sum())
        r["sink_n"] += p[:, :, 1:, 0].numel()


@torch.no_grad()
def attention_statistics(model, batches) -> dict:
    """Run `batches` ((x, y) pairs) and return per-layer entropy, sink share and gate activation."""
    model.eval()
    with recording_attention(model) as rec:
        for x, _ in batches:
            model(x)
    layers = sorted(rec)
    ent_head = [(rec[i]["entropy_head"] / max(rec[i]["queries"], 1)).tolist() for i in layers]
    return {
        "layers": layers,
        "entropy": [sum(h) / len(h) for h in ent_head],
        "entropy_per_head": ent_head,
        "sink_share": [rec[i]["sink_sum"] / max(rec[i]["sink_n"], 1) for i in layers],
        "gate_activation": [rec[i]["gate_sum"] / rec[i]["gate_n"] if rec[i]["gate_n"] else None for i in layers],
        "first_layer_gate": (
            gate_selectivity(torch.cat(rec[0]["gate_values"])) if 0 in rec and rec[0]["gate_values"] else None
        ),
    }


def mixing_coefficients(model) -> dict:
    """{component: {"layers": [...], "anchor": [[...]], "current": [[...]], "ratio": [[...]]}} with
    one row per mixed layer and one column per channel (elementwise), head (headwise) or 1 (scalar)."""
    out: dict = {}
    for c in COMPONENTS:
        rows = [(i, mx) for i, mx in mixers(model) if c in mx.components]
        if not rows:
            continue
        a = [mx.anchor_coef[c].detach().float().flatten() for _, mx in rows]
        b = [mx.current_coef[c].detach().float().flatten() for _, mx in rows]
        out[c] = {
            "layers": [i for i, _ in rows],
            "anchor": [t.tolist() for t in a],
            "current": [t.tolist() for t in b],
            "ratio": [(x / y.where(y.abs() > 1e-12, torch.full_like(y, 1e-12))).tolist() for x, y in zip(a, b)],
        }
    return out


# ----------------------------------------------------------------------------- plots
def plot_attention_statistics(stats: dict, out_dir: Path) -> list[str]:
    plt = pyplot()
    written = []
    series = [
        ("entropy", "attention entropy (nats)"),
        ("sink_share", "attention mass on first token"),
        ("gate_activation", "mean gate activation"),
    ]
    for key, label in series:
        vals = stats[key]
        if all(v is None for v in vals):
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot(stats["layers"], [float("nan") if v is None else v for v in vals], marker="o")
        ax.set_xticks(stats["layers"])
        ax.set_xlabel("layer")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(save_figure(fig, out_dir / f"{key}.png"))
    return written


def plot_mixing_coefficients(coefs: dict, out_dir: Path) -> list[str]:
    """One heatmap per component and quantity: layers on y, channels/heads on x (paper Figure 3)."""
    plt = pyplot()
    written = []
    for c, d in coefs.items():
        for key in ("ratio", "anchor", "current"):
            mat = torch.tensor(d[key])
            fig, ax = plt.subplots(figsize=(6, 0.35 * len(d["layers"]) + 1.5))
            im = ax.imshow(mat.numpy(), aspect="auto", interpolation="nearest", cmap="viridis")
            ax.set_yticks(range(len(d["layers"])), [str(i) for i in d["layers"]])
            ax.set_xlabel("channel / head")
            ax.set_ylabel("layer")
            title = {"ratio": "lambda1 / lambda2", "anchor": "lambda1 (anchor)", "current": "lambda2 (current)"}[key]
            ax.set_title(f"{c.upper()}: {title}")
            fig.colorbar(im, ax=ax)
            fig.tight_layout()
            written.append(save_figure(fig, out_dir / f"lambda_{key}_{c}.png"))
    return written


# ----------------------------------------------------------------------------- nexus analyze kinds
def summarize_attention(result: dict) -> str:
    from tabulate import tabulate

    table = [
        (l, *(format_value(result[k][i]) for k in ("entropy", "sink_share", "gate_activation")))
        for i, l in enumerate(result["layers"])
    ]
    rows = [
        tabulate(
            table,
            headers=("layer", "entropy", "sink_share", "gate_act"),
            tablefmt="plain",
            colalign=("right",) * 4,
            disable_numparse=True,
        )
    ]
    sel = result.get("first_layer_gate")
    if sel:
        rows.append(
            f"first-layer gate: mean {sel['mean']:.4f}, share < 0.1 {sel['share_below_0.1']:.3f}, "
            f"share > 0.9 {sel['share_above_0.9']:.3f}"
        )
    return "\n".join(rows)


@register_analysis(
    "attention",
    "per-layer attention entropy, first-token sink share, gate activation, first-layer "
    "gate selectivity (Fig. 5b) (+ higher-order maps)",
    summarize_attention,
)
def attention_kind(src, out_dir: Path, args) -> dict:
    model, batches = src.model(), src.batches()
    stats = attention_statistics(model, batches)
    stats["plots"] = plot_attention_statistics(stats, out_dir)
    if stats["first_layer_gate"] is not None:
        stats["first_layer_gate_mean"] = stats["first_layer_gate"]["mean"]
        stats["plots"] += plot_gate_selectivity(stats["first_layer_gate"], out_dir, stats["layers"][0])
    if model.cfg.attention.kind == "higher_order":  # the Nexus paper's outer/inner maps
        from .attention_maps import write_attention_maps

        stats["attention_maps"] = write_attention_maps(model, batches[0][0], out_dir)
    return stats


def summarize_mixing(result: dict) -> str:
    if not result["components"]:
        return "no anchor mixing in this model (model.mixing.anchor is none)"
    from tabulate import tabulate

    table = [
        (c, l, d["mean_lambda1"][i], d["mean_lambda2"][i], d["mean_ratio"][i])
        for c, d in result["ratio_by_layer"].items()
        for i, l in enumerate(d["layers"])
    ]
    rows = [
        tabulate(
            table,
            headers=("component", "layer", "mean(lambda1)", "mean(lambda2)", "mean(lambda1/lambda2)"),
            tablefmt="plain",
            floatfmt=".4f",
            colalign=("right",) * 5,
        )
    ]
    nz = result["near_zero_lambda1"]
    rows.append(
        f"near-zero lambda1 (|lambda1| < {nz['threshold']}): {nz['all']:.4f} of all; "
        + ", ".join(f"{c} {v:.4f}" for c, v in nz["per_component"].items())
    )
    return "\n".join(rows)


@register_analysis(
    "mixing",
    "lambda1/lambda2 heatmaps per component, layer and channel/head; mean ratio per layer "
    "(Fig. 4); share of |lambda1| < 0.001 (App. C.1)",
    summarize_mixing,
)
def mixing_kind(src, out_dir: Path, args) -> dict:
    coefs = mixing_coefficients(src.model())
    by_layer = lambda_ratio_by_layer(coefs)
    return {
        "anchor": src.cfg.model.mixing.anchor,
        "granularity": src.cfg.model.mixing.granularity,
        "components": coefs,
        "ratio_by_layer": by_layer,
        "near_zero_lambda1": near_zero_anchor_share(coefs) if coefs else None,
        "plots": plot_mixing_coefficients(coefs, out_dir) + plot_lambda_ratio_by_layer(by_layer, out_dir),
    }
