"""Training tokens/s of the NEXUS v4.1 depth-recurrent model vs a plain Transformer++ with the same
parameter count and the same effective depth (issue 17: report).

    python benchmarks/speed/recurrent_vs_transformer.py                    # nexus-tiny, batch 2 x 128
    python benchmarks/speed/recurrent_vs_transformer.py --preset nexus-small --batch 1 --rounds 2

The recurrent model is the preset (physical layers x T_inner x N_sup = effective depth, deep
supervision with the one-step gradient, ternary SwiGLU). The Transformer++ gets n_layers = that
effective depth and the width (multiple of 32, heads of 32, the default SwiGLU ratio) whose parameter
count is closest to the recurrent model's. Each timed step is forward + backward + torch AdamW on
the same batch; rounds alternate the two models in one process and print both step times; the
summary is each model's median tokens/s, their ratio with its range over rounds, and the effective
layer applications per second (tokens/s x effective depth), the v4.1 script's "depth per unit compute".
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit  # noqa: E402
from _harness import ratios as ratios_of

from nexus.config import ModelConfig
from nexus.models import build_model
from nexus.presets import get_preset


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def matched_transformer(rec_cfg: ModelConfig, depth: int, target: int):
    """Transformer++ of `depth` layers whose parameter count is closest to `target`."""
    best = None
    for d in range(64, 4097, 32):
        cfg = ModelConfig(
            vocab_size=rec_cfg.vocab_size,
            d_model=d,
            n_layers=depth,
            n_heads=d // 32,
            max_seq_len=rec_cfg.max_seq_len,
            tie_embeddings=rec_cfg.tie_embeddings,
        )
        total = n_params(build_model(cfg))
        if best is None or abs(total - target) < abs(best[1] - target):
            best = (cfg, total)
        if total > 2 * target:
            break
    return best[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="nexus-tiny")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1, help="timed steps per round and model")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps a shared CPU steady)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    rec_cfg = get_preset(args.preset).model
    torch.manual_seed(0)
    rec = build_model(rec_cfg).train()
    depth = rec.effective_depth()
    tf_cfg = matched_transformer(rec_cfg, depth, n_params(rec))
    torch.manual_seed(0)
    tf = build_model(tf_cfg).train()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, rec_cfg.vocab_size, (args.batch, args.seq), generator=g)
    y = torch.randint(0, rec_cfg.vocab_size, (args.batch, args.seq), generator=g)
    models = {"recurrent": rec, "transformer": tf}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}

    def train_step(name: str) -> None:
        opts[name].zero_grad(set_to_none=True)
        models[name](x, labels=y).loss.backward()
        opts[name].step()

    rc = rec_cfg.arch
    print(
        f"{args.preset}: {n_params(rec) / 1e6:.2f}M params, d {rec_cfg.d_model}, {rec_cfg.n_layers} layers x T_inner "
        f"{rc.t_inner} x N_sup {rc.n_sup} = effective depth {depth}, ternary {rc.ternary}"
    )
    print(
        f"Transformer++: {n_params(tf) / 1e6:.2f}M params, d {tf_cfg.d_model}, {tf_cfg.n_layers} layers, "
        f"{tf_cfg.n_heads} heads, ffn {tf_cfg.ffn}"
    )
    print(f"batch {args.batch} x {args.seq}, fp32, threads {args.threads}, forward + backward + AdamW")
    tokens = args.batch * args.seq
    # one warm-up round, then rounds in which the two alternate who goes first
    times = alternate(
        {k: (lambda k=k: train_step(k)) for k in models},
        args.rounds,
        calls=args.steps,
        after_round=lambda r, t: print(
            f"  round {r}: recurrent {1e3 * t['recurrent']:.0f} ms/step, "
            f"transformer {1e3 * t['transformer']:.0f} ms/step"
        ),
    )
    tps = {k: tokens / statistics.median(v) for k, v in times.items()}
    ratios = ratios_of(times, "transformer", "recurrent")  # step-time ratio = tokens/s ratio the other way
    print(
        f"tokens/s: recurrent {tps['recurrent']:.0f}, transformer {tps['transformer']:.0f}; recurrent/transformer "
        f"median {statistics.median(ratios):.3f}, range [{min(ratios):.3f}, {max(ratios):.3f}]"
    )
    print(
        f"effective layer applications per second (tokens/s x depth {depth}): recurrent "
        f"{tps['recurrent'] * depth:.0f}, transformer {tps['transformer'] * depth:.0f}"
    )
    emit(
        f"recurrent ({args.preset}) vs Transformer++ of equal parameters and effective depth {depth}, "
        "training tokens/s",
        ratios,
        "report",
        recurrent_tok_s=round(tps["recurrent"], 2),
        transformer_tok_s=round(tps["transformer"], 2),
    )


if __name__ == "__main__":
    main()
