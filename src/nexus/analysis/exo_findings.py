"""The ExoFormer paper's summary numbers, computed from what the other analyses collect:

  * Fig. 4: mean lambda1 / lambda2 per layer and component (elementwise models: the mean over
    channels of the per-channel ratio; headwise over heads; scalar the one ratio), plus the mean
    lambda1 and lambda2 themselves;
  * App. C.1: share of near-zero anchor coefficients, |lambda1| < 0.001, per component and pooled;
  * Fig. 5b / App. E: first-layer gate selectivity: the distribution of the first layer's gate
    activations sigmoid(g_hat) (mean, shares below 0.1 and above 0.9, histogram). The paper reads a
    low first-layer mean (~0.2 for gated attention, 0.4-0.5 for NuResFormer) as selective gating;
  * Sec. 3.3: share of layers in the refinement stage. The token-similarity curve over layers has a
    local minimum that marks the onset of stage 3; layers after it are the refinement stage, so the
    share is (L - n_min) / L with n_min the layer after which the minimum is reached.

The paper defines neither the averaging of Fig. 4 nor which local minimum counts when there are
several; the choices above are ours and are stated in docs/exoformer.md.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..figures import pyplot, save_figure

NEAR_ZERO = 1e-3  # App. C.1: "near-zero coefficients (below 0.001)"
GATE_CLOSED, GATE_OPEN = 0.1, 0.9  # first-layer gate shares reported beside the mean
GATE_BINS = 20  # histogram of first-layer gate activations over [0, 1]


# ----------------------------------------------------------------------------- Fig. 4 and App. C.1
def lambda_ratio_by_layer(coefs: dict) -> dict:
    """{component: {"layers", "mean_ratio", "mean_lambda1", "mean_lambda2"}} from
    attention_stats.mixing_coefficients(model)."""
    out = {}
    for c, d in coefs.items():
        out[c] = {
            "layers": list(d["layers"]),
            "mean_ratio": [sum(r) / len(r) for r in d["ratio"]],
            "mean_lambda1": [sum(a) / len(a) for a in d["anchor"]],
            "mean_lambda2": [sum(b) / len(b) for b in d["current"]],
        }
    return out


def near_zero_anchor_share(coefs: dict, threshold: float = NEAR_ZERO) -> dict:
    """Share of anchor coefficients with |lambda1| < threshold, per component and over all of them."""
    per, small, total = {}, 0, 0
    for c, d in coefs.items():
        vals = torch.tensor([v for row in d["anchor"] for v in row])
        n_small = int((vals.abs() < threshold).sum())
        per[c] = n_small / vals.numel()
        small, total = small + n_small, total + vals.numel()
    return {"threshold": threshold, "per_component": per, "all": small / total if total else None}


def plot_lambda_ratio_by_layer(by_layer: dict, out_dir: Path) -> list[str]:
    """Fig. 4: one line per component, mean lambda1/lambda2 against layer, with the ratio-1 line."""
    if not by_layer:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for c, d in by_layer.items():
        ax.plot(d["layers"], d["mean_ratio"], marker="o", label=c.upper())
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean lambda1 / lambda2")
    ax.set_title("anchor reliance per layer (Fig. 4)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return [save_figure(fig, Path(out_dir) / "lambda_ratio_by_layer.png")]


# ----------------------------------------------------------------------------- Fig. 5b
def gate_selectivity(gates: torch.Tensor) -> dict:
    """Summary of gate activations sigmoid(g_hat) (any shape): mean, shares below GATE_CLOSED and
    above GATE_OPEN, and a GATE_BINS-bin histogram over [0, 1] (fractions)."""
    g = gates.detach().float().flatten()
    hist = torch.histc(g, bins=GATE_BINS, min=0.0, max=1.0) / g.numel()
    return {
        "mean": float(g.mean()),
        "std": float(g.std()) if g.numel() > 1 else 0.0,
        "share_below_0.1": float((g < GATE_CLOSED).float().mean()),
        "share_above_0.9": float((g > GATE_OPEN).float().mean()),
        "histogram": hist.tolist(),
        "bins": [i / GATE_BINS for i in range(GATE_BINS + 1)],
    }


def plot_gate_selectivity(sel: dict, out_dir: Path, layer: int) -> list[str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    edges = sel["bins"]
    ax.bar(edges[:-1], sel["histogram"], width=edges[1] - edges[0], align="edge")
    ax.axvline(sel["mean"], color="red", linestyle="--", label=f"mean {sel['mean']:.3f}")
    ax.set_xlabel(f"gate activation sigmoid(g), layer {layer}")
    ax.set_ylabel("fraction")
    ax.set_title("first-layer gate selectivity (Fig. 5b)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [save_figure(fig, Path(out_dir) / "first_layer_gate.png")]


# ----------------------------------------------------------------------------- Sec. 3.3
def refinement_stage(token_similarity: list[float]) -> dict:
    """token_similarity[i] after layer i (index 0 = embeddings, L layers). The onset of stage 3 is
    the lowest interior local minimum over layers 1..L-1 (a point lower than both neighbours; the
    lowest, so a wiggle in the compression stage does not count); the layers after it are the
    refinement stage. Without an interior local minimum the share is None."""
    s = list(token_similarity)
    L = len(s) - 1
    minima = [i for i in range(1, L) if s[i] < s[i - 1] and s[i] < s[i + 1]]
    if not minima:
        return {"n_layers": L, "local_minima": [], "onset_layer": None, "refinement_layers": None, "share": None}
    onset = min(minima, key=lambda i: s[i])
    return {
        "n_layers": L,
        "local_minima": minima,
        "onset_layer": onset,
        "refinement_layers": L - onset,
        "share": (L - onset) / L,
    }
