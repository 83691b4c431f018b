"""Hidden-state analyses (ExoFormer paper, section 3.2-3.3, Figures 2 and 6):

* cross-layer cosine: mean over tokens of cos(h_i(t), h_j(t)) for every pair of layers
  (index 0 = the input embeddings, i = residual stream after layer i);
* token-to-token similarity: mean cosine between distinct tokens of the same sequence, per layer
  (over-smoothing shows up as a rise towards 1);
* effective rank (Roy & Vetterli, 2007): exp of the entropy of the normalized singular values of
  the (tokens x d_model) hidden-state matrix, per layer;
* anchor removal: validation loss and the numbers above with the anchor term zeroed in every
  mixed layer, next to the intact model (the paper's "catastrophic failure" probe).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..figures import pyplot, save_figure
from . import format_value, register_analysis
from .exo_findings import refinement_stage
from .hooks import anchor_removed


@torch.no_grad()
def collect_hidden_states(model, batches) -> list[list[torch.Tensor]]:
    """Per batch, the residual stream after the embedding and after every layer: (B, T, d) each."""
    model.eval()
    out = []
    for x, _ in batches:
        res = model(x, return_hidden=True)
        out.append([h.float() for h in res.hidden_states])
    return out


def cross_layer_cosine(states: list[list[torch.Tensor]]) -> list[list[float]]:
    n = len(states[0])
    sums = torch.zeros(n, n)
    count = 0
    for per_layer in states:
        unit = torch.stack([F.normalize(h.reshape(-1, h.shape[-1]), dim=-1) for h in per_layer])  # (n, N, d)
        sums += torch.einsum("ind,jnd->ij", unit, unit)
        count += unit.shape[1]
    return (sums / max(count, 1)).tolist()


def token_similarity(states: list[list[torch.Tensor]]) -> list[float]:
    """Per layer: mean cosine similarity over pairs of distinct positions within a sequence."""
    n = len(states[0])
    sums, pairs = torch.zeros(n), 0
    for per_layer in states:
        B, T, _ = per_layer[0].shape
        off_diag = ~torch.eye(T, dtype=torch.bool)
        for li, h in enumerate(per_layer):
            u = F.normalize(h, dim=-1)
            sim = u @ u.transpose(1, 2)  # (B, T, T)
            sums[li] += sim[:, off_diag].sum()
        pairs += B * T * (T - 1)
    return (sums / max(pairs, 1)).tolist()


def effective_rank(matrix: torch.Tensor) -> float:
    """Roy & Vetterli's effective rank of a 2-D matrix: exp(H(sigma / sum sigma))."""
    s = torch.linalg.svdvals(matrix.double())
    p = s / s.sum().clamp_min(1e-300)
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def effective_ranks(states: list[list[torch.Tensor]]) -> list[float]:
    n = len(states[0])
    return [effective_rank(torch.cat([b[li].reshape(-1, b[li].shape[-1]) for b in states])) for li in range(n)]


def representation_statistics(model, batches) -> dict:
    states = collect_hidden_states(model, batches)
    return {
        "layers": list(range(len(states[0]))),
        "cross_layer_cosine": cross_layer_cosine(states),
        "token_similarity": token_similarity(states),
        "effective_rank": effective_ranks(states),
    }


@torch.no_grad()
def validation_loss(model, batches) -> float:
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        out = model(x, labels=y)
        tot += float(out.ce_loss) * out.n_tokens
        n += out.n_tokens
    return tot / max(n, 1)


def anchor_removal(model, batches) -> dict:
    """Loss, token similarity and effective rank with and without the anchor term."""
    if getattr(model, "anchor", None) is None:
        return {"available": False, "reason": "the model has no anchor (model.mixing.anchor is none)"}
    intact = representation_statistics(model, batches)
    intact_loss = validation_loss(model, batches)
    with anchor_removed(model):
        removed = representation_statistics(model, batches)
        removed_loss = validation_loss(model, batches)
    return {
        "available": True,
        "loss_before": intact_loss,
        "loss_after": removed_loss,
        "token_similarity_before": intact["token_similarity"],
        "token_similarity_after": removed["token_similarity"],
        "effective_rank_before": intact["effective_rank"],
        "effective_rank_after": removed["effective_rank"],
    }


# ----------------------------------------------------------------------------- plots
def plot_representations(stats: dict, removal: dict | None, out_dir: Path) -> list[str]:
    plt = pyplot()
    written = []
    fig, ax = plt.subplots(figsize=(4.8, 4))
    im = ax.imshow(stats["cross_layer_cosine"], vmin=-1, vmax=1, cmap="magma")
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("layer (0 = embeddings)")
    ax.set_title("cross-layer cosine similarity")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    written.append(save_figure(fig, out_dir / "cross_layer_cosine.png"))
    for key, label in (("token_similarity", "mean token-token cosine"), ("effective_rank", "effective rank")):
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot(stats["layers"], stats[key], marker="o", label="model")
        if removal and removal.get("available"):
            ax.plot(stats["layers"], removal[f"{key}_after"], marker="x", linestyle="--", label="anchor removed")
            ax.legend()
        ax.set_xticks(stats["layers"])
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(save_figure(fig, out_dir / f"{key}.png"))
    return written


# ----------------------------------------------------------------------------- nexus analyze kind
def summarize_representations(result: dict) -> str:
    from tabulate import tabulate

    table = [
        (l, format_value(result["token_similarity"][i]), format_value(result["effective_rank"][i]))
        for i, l in enumerate(result["layers"])
    ]
    rows = [
        tabulate(
            table,
            headers=("layer", "token_sim", "eff_rank"),
            tablefmt="plain",
            colalign=("right",) * 3,
            disable_numparse=True,
        )
    ]
    ref = result.get("refinement_stage", {})
    if ref.get("share") is not None:
        rows.append(
            f"refinement stage: token-similarity minimum after layer {ref['onset_layer']}, "
            f"{ref['refinement_layers']}/{ref['n_layers']} layers ({ref['share']:.2f})"
        )
    else:
        rows.append("refinement stage: no interior local minimum of token similarity")
    rem = result.get("anchor_removal", {})
    if rem.get("available"):
        rows.append(
            f"anchor removal: val loss {rem['loss_before']:.4f} -> {rem['loss_after']:.4f}, final-layer token "
            f"similarity {rem['token_similarity_before'][-1]:.3f} -> {rem['token_similarity_after'][-1]:.3f}"
        )
    return "\n".join(rows)


@register_analysis(
    "representations",
    "cross-layer cosine, token-token similarity, effective rank, refinement-stage share, anchor removal",
    summarize_representations,
)
def representations_kind(src, out_dir: Path, args) -> dict:
    model, batches = src.model(), src.batches()
    stats = representation_statistics(model, batches)
    stats["refinement_stage"] = refinement_stage(stats["token_similarity"])
    stats["anchor_removal"] = anchor_removal(model, batches)
    stats["plots"] = plot_representations(stats, stats["anchor_removal"], out_dir)
    return stats
