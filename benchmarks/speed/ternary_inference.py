"""Packed ternary NEXUS v4.1 inference on CPU: decode tokens/s of the model loaded from the packed
file (`kernel="auto"`, or the kernels named by --kernel) vs a model of the same shapes with plain fp32
nn.Linear weights (issue 17 target: ratio >= 1.5, goal 2; issue 41: >= 2 on AVX2 CPUs too), and the
bits per ternary weight in the packed file (target <= 2.1).

Every model decodes the same prompt greedily with cached conv states; rounds alternate between the fp32
model and each packed model in one process and every round's ratio is printed with the median and
range, because the machine may be shared. The CPU (model, torch capability, flags) is printed beside
the figures, with auto's measured choice. Each packed model's accuracy against the exact (dense,
bitwise) path is printed too: max |logit difference| on the prompt and top-1 agreement on the same
positions.

    python benchmarks/speed/ternary_inference.py                         # nexus-small, B=1, 32 new tokens, 3 rounds
    python benchmarks/speed/ternary_inference.py --preset nexus-tiny --kernel auto,fp32-2bit,int4
    python benchmarks/speed/ternary_inference.py --new-tokens 240 --budget-s 0   # the longer run of earlier sessions

The default run is sized to finish in under 5 minutes on a loaded 2-core machine: rounds stop being
added once --budget-s seconds have passed (at least one round; the count run is printed).

To emulate a CPU without AVX-512 on one that has it (figures then measure the code generated for
AVX2 on this CPU's caches and clock, not an AVX2-only CPU), restrict every code generator:
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
    NUMBA_CPU_NAME=znver3 NUMBA_CPU_FEATURES="$(python benchmarks/speed/ternary_inference.py --avx2-numba-features)" \
    python benchmarks/speed/ternary_inference.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import CLOCKS, alternate, emit, print_machine  # noqa: E402


def avx2_numba_features() -> str:
    """This CPU's LLVM feature string with every AVX-512 (and AMX, AVX-VNNI, GFNI) feature turned off:
    numba then generates AVX2 code, as for a Zen 3 or Haswell-class CPU."""
    import llvmlite.binding as ll

    feats = ll.get_host_cpu_features()
    off = ("avx512", "amx", "avxvnni", "avx10", "gfni")
    return ",".join(f"{'-' if k.startswith(off) else '+' if v else '-'}{k}" for k, v in sorted(feats.items()))


def decode(model, prompt, new_tokens: int):
    """One greedy generation of `new_tokens` tokens, for the harness to time."""

    def run() -> None:
        out = model.generate(prompt, max_new_tokens=new_tokens, temperature=0)
        assert out.shape[1] == prompt.shape[1] + new_tokens

    return run


def step_ratios(packed, fp32_model, prompt, rounds: int) -> tuple[list, list]:
    """ms per cached one-token decode step after the prompt, the two models alternating who goes first."""
    caches = {}
    models = {"packed": packed, "fp32": fp32_model}
    with torch.no_grad():
        for name, model in models.items():
            caches[name] = model.new_cache()
            model(prompt, cache=caches[name])
        times = alternate(
            {
                name: (lambda name=name, model=model: model(prompt[:, :1], cache=caches[name]))
                for name, model in models.items()
            },
            rounds,
            calls=3,
            warmup=0,
        )
    return [t * 1e3 for t in times["packed"]], [t * 1e3 for t in times["fp32"]]


def main() -> None:
    from nexus.models.bitlinear import PACKED_KERNELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="nexus-small")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--reps", type=int, default=3, help="alternated rounds (fewer if --budget-s runs out)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=120.0,
        help="start no new round after this many seconds of timed rounds (0 = no limit)",
    )
    p.add_argument("--packing", default="2bit", choices=["2bit", "base3"])
    p.add_argument(
        "--kernel",
        default="auto",
        help=f"packed models' decode kernels, comma-separated, each timed against fp32 ({'|'.join(PACKED_KERNELS)})",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument(
        "--clock",
        default="wall",
        choices=list(CLOCKS),
        help="cpu: process CPU time, which leaves out the time other processes hold the cores "
        "(use with --threads 1; the numba kernels are single-threaded)",
    )
    p.add_argument(
        "--step-rounds",
        type=int,
        default=0,
        help="also time cached one-token steps alone (3 per model per round) for this many rounds",
    )
    p.add_argument(
        "--avx2-numba-features",
        action="store_true",
        help="print the NUMBA_CPU_FEATURES string that emulates AVX2 on this CPU and exit",
    )
    args = p.parse_args()
    if args.avx2_numba_features:
        print(avx2_numba_features())
        return
    kernels = args.kernel.split(",")
    bad = [k for k in kernels if k not in PACKED_KERNELS]
    if bad:
        sys.exit(f"--kernel={bad[0]!r} (valid: comma-separated {'|'.join(PACKED_KERNELS)})")
    if args.threads:
        torch.set_num_threads(args.threads)
    print_machine()

    from nexus.checkpoint import save_checkpoint
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.export.ternary import load_ternary, save_ternary
    from nexus.models import build_model
    from nexus.presets import get_preset

    cfg = get_preset(args.preset)
    torch.manual_seed(0)
    ternary_model = build_model(cfg.model).eval()
    fp32_cfg = get_preset(args.preset)
    fp32_cfg.model.arch.ternary = False
    fp32_model = build_model(fp32_cfg.model).eval()
    packed = {}
    with tempfile.TemporaryDirectory() as tmp:
        report = save_ternary(ternary_model, cfg, ByteTokenizer(), Path(tmp) / "model.tern", args.packing)
        for k in kernels:
            packed[k], _, _ = load_ternary(report["path"], kernel=k, say=print)
        exact, _, _ = load_ternary(report["path"], kernel="dense", say=None)
        ckpt = save_checkpoint(Path(tmp) / "ckpt", ternary_model, cfg, ByteTokenizer())
        ckpt_bytes = (ckpt / "model.safetensors").stat().st_size
    prompt = torch.randint(
        0, cfg.model.vocab_size, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(0)
    )
    # teacher-forced top-1 agreement on the prompt followed by random tokens (free-running greedy sequences
    # diverge after the first near-tie, which on random weights says little about accuracy; the exact
    # model's own greedy continuation, used before, cost 32 fp32 decode steps of the run's time budget)
    agree_len = min(args.new_tokens, 32)
    tail = torch.randint(0, cfg.model.vocab_size, (args.batch, agree_len), generator=torch.Generator().manual_seed(1))
    cont = torch.cat([prompt, tail], dim=1)
    accuracy = {}
    with torch.no_grad():
        assert torch.equal(exact(prompt).logits, ternary_model(prompt).logits)  # the packed file is exact
        want, want_cont = exact(prompt).logits, exact(cont).logits.argmax(-1)
        for k, model in packed.items():
            diff = (model(prompt).logits - want).abs().max().item()
            agree = (model(cont).logits.argmax(-1) == want_cont).float().mean().item()
            accuracy[k] = (diff, agree)
    del exact
    for model in [*packed.values(), fp32_model]:
        decode(model, prompt, 2)()  # warm-up (allocations, first-call dispatch)
    # every packed model and the fp32 one alternate who goes first, round after round; no new round starts
    # once --budget-s seconds of rounds have passed
    sides = {
        **{k: decode(model, prompt, args.new_tokens) for k, model in packed.items()},
        "fp32": decode(fp32_model, prompt, args.new_tokens),
    }
    times = alternate(sides, args.reps, warmup=0, clock=args.clock, budget_s=args.budget_s or None)
    if len(times["fp32"]) < args.reps:
        print(f"--budget-s {args.budget_s:g} reached: {len(times['fp32'])} of {args.reps} rounds run")
    tok_s = {k: [args.new_tokens * args.batch / t for t in v] for k, v in times.items()}
    fp = tok_s.pop("fp32")
    rc = cfg.model.arch
    print(
        f"{args.preset}: {report['ternary_params'] / 1e6:.2f}M ternary + "
        f"{report['other_params'] / 1e6:.2f}M fp32 params, "
        f"N_sup {rc.n_sup} x T_inner {rc.t_inner} x {cfg.model.n_layers} layers, threads {torch.get_num_threads()}"
    )
    print(
        f"packed file ({args.packing}): {report['file_bytes'] / 1e6:.2f} MB (embeddings and scales included) vs "
        f"fp32 checkpoint {ckpt_bytes / 1e6:.2f} MB; {report['bits_per_ternary_weight']:.3f} bits per ternary weight "
        f"({report['bits_per_ternary_weight_with_scales']:.3f} with scales; target <= 2.1)"
    )
    f_med = statistics.median(fp)
    for k, ter in tok_s.items():
        used = sorted(
            {m.kernel for m in packed[k].modules() if hasattr(m, "kernel") and getattr(m, "is_ternary", False)}
        )
        diff, agree = accuracy[k]
        ratios = [t / f for t, f in zip(ter, fp)]
        print(
            f"packed kernel {k} (layers run {', '.join(used)}): max |logit diff| vs the exact packed model {diff:.4g} "
            f"on the prompt; top-1 agreement over {cont.shape[1]} teacher-forced positions "
            f"{agree:.3f} (random-init weights)"
        )
        print(
            f"  decode tokens/s ({args.clock} clock, batch {args.batch}, prompt {args.prompt_len}, "
            f"{args.new_tokens} new, {len(ter)} alternated "
            f"rounds): packed {statistics.median(ter):.2f} vs fp32 {f_med:.2f} (medians); raw packed "
            f"{[round(v, 2) for v in ter]} fp32 {[round(v, 2) for v in fp]}"
        )
        print(
            f"  ratio per round {[round(r, 3) for r in ratios]} -> median {statistics.median(ratios):.3f}, "
            f"range [{min(ratios):.3f}, {max(ratios):.3f}] (target >= 1.5, goal 2)"
        )
        emit(
            f"ternary decode vs fp32 dense ({args.preset}, kernel {k}, B={args.batch}, {args.new_tokens} new tokens, "
            f"{args.clock} clock)",
            ratios,
            ">= 1.5 (goal 2)",
            met=statistics.median(ratios) >= 1.5,
            ternary_tok_s=ter,
            fp32_tok_s=fp,
            bits_per_weight=round(report["bits_per_ternary_weight"], 4),
            kernels_run=used,
        )
    if args.step_rounds:
        first = next(iter(packed))
        pk, fs = step_ratios(packed[first], fp32_model, prompt, args.step_rounds)
        r = [f / k for k, f in zip(pk, fs)]
        print(
            f"one-token steps alone (kernel {first}), ms: packed {[round(v) for v in pk]} "
            f"fp32 {[round(v) for v in fs]}; "
            f"ratio per round {[round(v, 2) for v in r]} -> median {statistics.median(r):.2f}, "
            f"range [{min(r):.2f}, {max(r):.2f}]"
        )


if __name__ == "__main__":
    main()
