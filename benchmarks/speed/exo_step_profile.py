"""Where dynamic ExoFormer's extra training-step time goes, at variant_overhead.py's secondary shape
`450m-reduced` (450m proportions at d 256: 29 layers, SwiGLU 2d, 512 tokens, the direct anchor path;
`--d-model 1024` is the preset's width, with a 2,048-token sequence): the CPU time
(process clock, so other jobs' time on a shared machine is left out) spent per step inside each
ExoFormer-only part, next to the whole step of both models.

    python benchmarks/speed/exo_step_profile.py --threads 1 --steps 5

Each part is timed by wrapping the Python function that runs it, so a part's time includes its own
torch and numba calls and nothing else; the rest of the difference between the two steps is the
anchor's backward (its projection and norms), autograd summing the anchor gradients over layers,
and the engine's work for the extra nodes and parameters. One model at a time, steps alternated.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
import variant_overhead as vo

from nexus.analysis.hooks import direct_anchor_projection
from nexus.models import fused_mix, mix_kernels, mixing
from nexus.runtime import tune_cpu_allocator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, alternate, emit, print_machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per model (after 2 untimed)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    torch.set_num_threads(args.threads)
    tune_cpu_allocator()
    d = args.d_model
    shape = argparse.Namespace(d_model=d, layers=29, seq=2 * d, ffn=2 * d, optimizer=False)
    device = torch.device("cpu")
    gated = vo.make("gated", shape, device)[1]
    exo = vo.make("exo-dynamic-e", shape, device)[1]
    direct_path = contextlib.ExitStack()  # held open for the whole profile
    direct_path.enter_context(direct_anchor_projection(exo))  # the direct path, as the 450m presets take
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 259, (1, shape.seq), generator=g)
    y = torch.randint(0, 259, (1, shape.seq), generator=g)

    spent: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            clock = StepTimer().start()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + clock.so_far().cpu

        return wrapper

    kf, kb, kg = (
        mix_kernels.forward_layer_kernel(),
        mix_kernels.backward_layer_kernel(),
        mix_kernels.gate_backward_kernel(),
    )
    mix_kernels.forward_layer_kernel = lambda: timed("mix kernels, forward (one call per layer)", kf)
    mix_kernels.backward_layer_kernel = lambda: timed("mix kernels, backward (one call per layer)", kb)
    mix_kernels.gate_backward_kernel = lambda: timed("gate MLP tail kernel, backward", kg)
    fused_mix.FusedMix.forward = staticmethod(timed("fused node forward (all)", fused_mix.FusedMix.forward))
    fused_mix.FusedMix.backward = staticmethod(timed("fused node backward (all)", fused_mix.FusedMix.backward))
    mixing.DynamicMixing.stages = timed("gate MLP forward (x W1, GELU, W2, sigmoid)", mixing.DynamicMixing.stages)
    mixing.ExoAnchor.forward = timed("anchor forward (projection, norms)", mixing.ExoAnchor.forward)
    mixing.AnchorMixer.forward = timed("mixer forward (all, incl. dispatch)", mixing.AnchorMixer.forward)

    models = {"gated": gated, "exo-dynamic-e": exo}
    sides = {
        name: (lambda model=model: vo.step(model, None, x, y, device, torch.float32)) for name, model in models.items()
    }
    alternate(sides, rounds=2, warmup=0)  # 2 untimed steps each (their parts' time is dropped below)
    spent.clear()
    # the models alternate who goes first, step after step, on the process CPU clock
    times = alternate(sides, rounds=args.steps, warmup=0, clock="cpu")
    totals = {name: sum(t) for name, t in times.items()}
    n = args.steps
    print(
        f"d_model {d} x 29 layers, {shape.seq} tokens, {torch.get_num_threads()} thread(s), process CPU time, "
        f"mean of {n} steps per model | "
        f"mixing path: {'fused' if fused_mix.enabled() and mix_kernels.available() else 'eager'}"
    )
    for name, tot in totals.items():
        print(f"step {name:<14} {tot / n * 1e3:8.1f} ms")
    print(f"difference           {(totals['exo-dynamic-e'] - totals['gated']) / n * 1e3:8.1f} ms")
    for name, t in spent.items():
        print(f"  {name:<45} {t / n * 1e3:7.2f} ms per step")
    emit(
        f"dynamic ExoFormer vs gated attention step, CPU time (d {d} x 29, {shape.seq} tokens)",
        [e / g for e, g in zip(times["exo-dynamic-e"], times["gated"])],
        "report",
        parts_ms_per_step={name: round(t / n * 1e3, 3) for name, t in spent.items()},
    )


if __name__ == "__main__":
    main()
