"""Training MFU of a ~124M Transformer++ baseline on one GPU, bf16 autocast, torch.compile.

The model is `llama-160m` (12 x 768, 12 heads, vocab 50,304) with its head tied to the embeddings:
123.6M parameters, GPT-2-small's size, the scale peers quote MFU at (35-48%). Each timed window is
forward + backward + fused AdamW steps; between windows the script measures the device's bf16 matmul
rate (an 8192^3 GEMM) in the same process, so the MFU is printed both against the vendor's dense bf16
peak (the number peers divide by) and against what this device actually gives torch right now.

FLOPs per token come from nexus's FLOPs protocol (`nexus.analysis.flops.train_flops_per_token`):
6 x the weight-matrix parameters (tied head included) + the full T x T attention square, i.e. the
PaLM / nanoGPT convention 6N + 12 L d T that peers' MFU figures use. (train_throughput.py counts
causal attention as half the square instead; at d 768 and T 1024 the difference is ~4% of the FLOPs.)

    python benchmarks/speed/gpu_mfu.py                               # CUDA, bf16, compiled, batch 16 x 1024
    python benchmarks/speed/gpu_mfu.py --vs-hf                       # + HF LlamaForCausalLM, same weights, interleaved
    python benchmarks/speed/gpu_mfu.py --loss-chunk 2048             # the chunked head + CE (model.loss_chunk_tokens)
    python benchmarks/speed/gpu_mfu.py --vs-chunked 4096             # + the chunked loss's model beside the plain one
    python benchmarks/speed/gpu_mfu.py --compile-mode reduce-overhead   # + CUDA graphs (static shapes)
    python benchmarks/speed/gpu_mfu.py --device cpu --dtype float32 --no-compile --d-model 64 --layers 2 \\
        --vocab 512 --seq 64 --batch 2 --steps 2 --rounds 2    # plumbing check on a CPU (no MFU meaning)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, alternate, emit, print_machine  # noqa: E402
from train_throughput import training_step  # noqa: E402

# Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets, TFLOP/s.
SPEC_BF16_TFLOPS = {
    "H100 SXM": 989.4,
    "H100 80GB HBM3": 989.4,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H200": 989.4,
    "H200 NVL": 835.0,
    "A100": 312.0,
    "L40S": 362.1,
    "A10G": 70.0,
}


def spec_peak_tflops(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> float | None:
    """The data-sheet dense bf16 peak of a CUDA device (None: not CUDA, not bf16, or an unknown name)."""
    if device.type != "cuda" or dtype != torch.bfloat16:
        return None
    name = torch.cuda.get_device_name(device)
    hits = [(len(k), v) for k, v in SPEC_BF16_TFLOPS.items() if k.lower() in name.lower()]
    return max(hits)[1] if hits else None  # the longest matching key names the variant


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 5) -> float:
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    sync(device)

    def gemm() -> None:  # waits for the device, so the GEMM is inside the timed call
        a @ b
        sync(device)

    times = alternate({"gemm": gemm}, rounds=repeats, warmup=1)["gemm"]  # one untimed call first
    return 2 * n**3 / statistics.median(times) / 1e12


def model_config(args):
    from nexus.presets import get_preset

    cfg = get_preset(args.preset).model
    cfg.tie_embeddings = not args.untied
    for field, value in (("d_model", args.d_model), ("n_layers", args.layers), ("vocab_size", args.vocab)):
        if value:
            setattr(cfg, field, value)
    if args.d_model:
        cfg.n_heads = max(1, args.d_model // 64)
    cfg.max_seq_len = max(cfg.max_seq_len, args.seq)
    cfg.loss_chunk_tokens = args.loss_chunk
    cfg.validate([], "model")
    return cfg


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama-160m")
    p.add_argument("--untied", action="store_true", help="keep the preset's separate head (162M) instead of 124M tied")
    p.add_argument("--d-model", type=int, default=0, help="override the preset's width (0 = keep; heads = d/64)")
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--vocab", type=int, default=0)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="autocast dtype")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--peak-n", type=int, default=8192, help="size of the square GEMM that measures the peak")
    p.add_argument(
        "--vs-hf",
        action="store_true",
        help="also time transformers' LlamaForCausalLM (same config, "
        "weights, batch, dtype, compile and fused AdamW), interleaved round by round with nexus",
    )
    p.add_argument("--loss-chunk", type=int, default=0, help="model.loss_chunk_tokens (0: the plain full-logits loss)")
    p.add_argument(
        "--vs-chunked",
        type=int,
        default=0,
        metavar="N",
        help="also time the same model with "
        "model.loss_chunk_tokens N (same weights, interleaved): does the chunked loss pay here?",
    )
    p.add_argument(
        "--compile-mode",
        default="default",
        choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs"],
        help="torch.compile mode (reduce-overhead: CUDA graphs); both sides with --vs-hf",
    )
    return p.parse_args(argv)


def resident_bytes(model, opt) -> int:
    """Bytes of a model's parameters and optimizer state (what stays allocated between its steps)."""
    tensors = list(model.parameters()) + [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    from nexus.models import build_model

    args = parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers (norms, loss) on tensor cores, as peers run
    from nexus.analysis.flops import train_flops_per_token

    cfg = model_config(args)
    torch.manual_seed(0)
    model = build_model(cfg).to(device).train()
    n_params = sum(t.numel() for t in model.parameters())
    flops_tok = train_flops_per_token(model, args.seq)
    compile_ = (lambda m: m) if args.no_compile else (lambda m: torch.compile(m, mode=args.compile_mode))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=g).to(device)
    x, y = ids[:, :-1], ids[:, 1:]
    sides = {"nexus": (model, opt, training_step(compile_(model), opt, x, y, dtype, hf=False))}
    if args.vs_chunked:
        chunked = build_model(dataclasses.replace(cfg, loss_chunk_tokens=args.vs_chunked)).to(device).train()
        chunked.load_state_dict(model.state_dict())
        c_opt = torch.optim.AdamW(chunked.parameters(), lr=1e-4, fused=True)
        sides["chunked"] = (chunked, c_opt, training_step(compile_(chunked), c_opt, x, y, dtype, hf=False))
    if args.vs_hf:
        from train_throughput import hf_twin

        hf = hf_twin(model, cfg).to(device)
        hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, fused=True)
        sides["hf"] = (hf, hf_opt, training_step(compile_(hf), hf_opt, x, y, dtype, hf=True))

    print_machine()  # CPU model and capability beside the figures below
    first = {}
    with StepTimer() as warm:
        for name, (_, _, step) in sides.items():
            first[name] = float(step())  # the same weights and batch: the same first loss (to bf16 rounding)
            for _ in range(2):  # compilation and autotuning, untimed
                step()
        sync(device)
    print(
        f"warm-up (compile) {warm.elapsed.wall:.1f} s; first-step loss "
        + ", ".join(f"{k} {v:.4f}" for k, v in first.items())
    )
    peak_mem = {name: [] for name in sides}
    peaks = []
    last = {}
    # what stays allocated between steps: each side's peak below is the device's less the other sides' state
    others = {name: sum(resident_bytes(m, o) for k, (m, o, _) in sides.items() if k != name) for name in sides}

    def window(name: str):
        """One timed window of a side: --steps steps, the device waited for at both ends."""
        step = sides[name][2]

        def run() -> None:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            for _ in range(args.steps):
                last[name] = step()
            sync(device)
            if device.type == "cuda":
                peak_mem[name].append((torch.cuda.max_memory_allocated(device) - others[name]) / 2**30)

        return run

    def measure_peak(r: int, _) -> None:
        peaks.append(matmul_tflops(device, dtype, args.peak_n))  # under the same conditions, every round

    # the sides alternate who goes first, round after round (the warm-up above was the untimed round)
    times = alternate({name: window(name) for name in sides}, args.rounds, warmup=0, after_round=measure_peak)
    rounds = {name: [args.batch * args.seq * args.steps / t for t in v] for name, v in times.items()}
    loss = last["nexus"]
    rates = rounds["nexus"]
    achieved = [r * flops_tok / 1e12 for r in rates]
    spec = spec_peak_tflops(device, dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"model: {n_params / 1e6:.1f}M params ({'untied' if args.untied else 'tied'} head), d {cfg.d_model}, "
        f"{cfg.n_layers} layers, vocab {cfg.vocab_size}; batch {args.batch} x {args.seq}; {args.dtype}; "
        f"compile {'off' if args.no_compile else args.compile_mode}; loss chunk {args.loss_chunk or 'off'}; device "
        f"{name}; torch {torch.__version__}; final loss {float(loss):.3f}"
    )
    print(
        f"training FLOPs/token {flops_tok / 1e6:.1f}M; tokens/s per round {[round(r) for r in rates]}; "
        f"achieved TFLOP/s {[round(a, 1) for a in achieved]}"
    )
    print(f"measured {args.dtype} matmul peak ({args.peak_n}^3) per round: {[round(v, 1) for v in peaks]} TFLOP/s")
    vs_measured = [a / pk for a, pk in zip(achieved, peaks)]
    mem = {k: [round(v, 2) for v in peak_mem[k]] for k in sides} if device.type == "cuda" else None
    if args.vs_chunked:
        ratio = [c / n for c, n in zip(rounds["chunked"], rounds["nexus"])]
        print(
            f"chunked loss ({args.vs_chunked} tokens per chunk), same process, interleaved: tokens/s per round "
            f"{[round(v) for v in rounds['chunked']]}; chunked/plain {[round(v, 3) for v in ratio]}; "
            f"peak memory GiB {mem}"
        )
        emit(
            f"training tokens/s, chunked/plain loss (chunk {args.vs_chunked}), {n_params / 1e6:.0f}M, {args.dtype}, "
            f"{name}",
            ratio,
            "report (> 1: the chunked loss pays)",
            chunked_tokens_per_s=rounds["chunked"],
            plain_tokens_per_s=rounds["nexus"],
            peak_gib=mem,
        )
    if args.vs_hf:
        ratio = [n / h for n, h in zip(rounds["nexus"], rounds["hf"])]
        print(
            "HF LlamaForCausalLM (sdpa), same process, interleaved: "
            f"tokens/s per round {[round(v) for v in rounds['hf']]}; "
            f"nexus/HF {[round(v, 3) for v in ratio]}; peak memory GiB (each side's own) {mem}"
        )
        emit(
            f"training tokens/s nexus vs HF LlamaForCausalLM, {n_params / 1e6:.0f}M, {args.dtype}, compile "
            f"{not args.no_compile}, {name}",
            ratio,
            ">= 1.3",
            met=statistics.median(ratio) >= 1.3 if device.type == "cuda" else None,
            nexus_tokens_per_s=rounds["nexus"],
            hf_tokens_per_s=rounds["hf"],
            peak_gib=mem,
        )
    print(f"MFU vs measured matmul peak: median {statistics.median(vs_measured):.3f}")
    if spec:
        mfu = [a / spec for a in achieved]
        print(
            f"MFU vs the data-sheet dense bf16 peak ({spec} TFLOP/s): median {statistics.median(mfu):.3f}, "
            f"range [{min(mfu):.3f}, {max(mfu):.3f}]"
        )
        emit(
            f"training MFU, {n_params / 1e6:.0f}M baseline, {args.dtype}, compile {not args.no_compile}, {name}",
            mfu,
            ">= 0.50",
            unit="fraction",
            met=statistics.median(mfu) >= 0.5,
            vs_measured_peak=vs_measured,
            tokens_per_s=rates,
            spec_tflops=spec,
        )
    else:
        emit(
            f"training share of measured matmul peak, {n_params / 1e6:.1f}M model, {args.dtype}, {name}",
            vs_measured,
            "report (no data-sheet bf16 peak for this device and dtype)",
            unit="fraction",
            tokens_per_s=rates,
        )


if __name__ == "__main__":
    main()
