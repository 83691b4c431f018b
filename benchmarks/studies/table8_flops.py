"""Nexusformer Table 8: forward FLOPs per token of the Nexusformer and Qwen3 presets at the paper's
4,096-token context, counted two ways, against the paper's CalFlops numbers.

  analytic  nexus.analysis.flops: matmuls, attention products (full T x T square), the LM head
  calflops  the same plus norms, activations, softmax and elementwise ops (CalFlops' conventions)

Then, per row, the other conventions (embedding lookup counted as a 2 d V matmul, no LM head, MACs
instead of FLOPs) and our parameter count against the size the paper names. \
Also printed: the calflops count without the attention core (QK^T, softmax, AV), which CalFlops
cannot see when the attention runs in a fused kernel, and the linear layers alone without the LM
head. Runs on the meta device: no memory, a few seconds.

    python benchmarks/studies/table8_flops.py [--seq 4096]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nexus.analysis.flops import (
    calflops_like_counts,
    calflops_without_attention_core,
    forward_flops_per_token,
    linear_layer_flops,
)
from nexus.models.accounting import param_count_for_config
from nexus.presets import get_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import emit, print_machine  # noqa: E402

TABLE8 = {  # (family, size) -> FLOPs per token as printed in the paper's Table 8
    ("nexusformer", "240m"): 4.256e8,
    ("qwen3", "240m"): 4.223e8,
    ("nexusformer", "300m"): 5.648e8,
    ("qwen3", "300m"): 6.036e8,
    ("nexusformer", "380m"): 7.171e8,
    ("qwen3", "380m"): 7.570e8,
    ("nexusformer", "440m"): 8.390e8,
    ("qwen3", "440m"): 8.704e8,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=4096, help="context length (the paper's: 4096)")
    args = ap.parse_args()
    print_machine()  # counts, not timings: the line keeps every benchmark's output alike
    print(
        f"{'preset':<18} {'params':>8} {'Table 8':>10} {'analytic':>16} {'calflops':>16} "
        f"{'calflops w/o attn core':>24} "
        f"{'linear w/o head':>18}"
    )
    conventions = []
    vs_paper = {"analytic": [], "calflops": []}  # per row: our count / Table 8's
    for (fam, size), paper in TABLE8.items():
        m = get_preset(f"{fam}-{size}").validate().model
        analytic = forward_flops_per_token(m, args.seq)
        cal = calflops_like_counts(m, args.seq)
        linear = linear_layer_flops(m, args.seq)
        head = 2 * m.d_model * m.vocab_size
        no_core = calflops_without_attention_core(m, args.seq)
        params = param_count_for_config(m)["total"] / 1e6
        vs_paper["analytic"].append(analytic / paper)
        vs_paper["calflops"].append(cal["total"] / paper)

        def cell(v, paper=paper):
            return f"{v:.4g} ({v / paper - 1:+.1%})"

        named = float(size[:-1]) * 1e6  # the size the paper names
        print(
            f"{fam + '-' + size:<18} {params:>7.1f}M {paper:>10.4g} {cell(analytic):>16} {cell(cal['total']):>16} "
            f"{cell(no_core):>24} {cell(linear - head):>18}"
        )
        conventions.append(
            f"{fam + '-' + size:<18} no core {no_core / paper - 1:+.1%} | + embedding lookup as a matmul "
            f"{(no_core + head) / paper - 1:+.1%} | - LM head {(no_core - head) / paper - 1:+.1%} | MACs "
            f"{no_core / 2 / paper - 1:+.1%} | params vs named size {params * 1e6 / named - 1:+.1%}"
        )
    print("\nother conventions, each against Table 8 (docs/nexusformer.md):")
    print("\n".join(conventions))
    rows = [f"{fam}-{size}" for fam, size in TABLE8]
    for way, values in vs_paper.items():
        emit(
            f"Table 8 forward FLOPs per token at {args.seq} tokens: "
            f"{way} count / the paper's, over its {len(rows)} rows",
            values,
            "report (1 = the paper's count)",
            per_row=dict(zip(rows, [round(v, 4) for v in values])),
        )


if __name__ == "__main__":
    main()
