"""Training throughput of the nexus baseline vs HF LlamaForCausalLM, and vs the machine's matmul peak.

Both models get the identical config, identical weights (copied through nexus.hf's key mapping)
and identical batches; each timed step is forward + backward + torch AdamW step, fp32, eager (or both
compiled with --compile), in one process with nexus's malloc tuning (--no-malloc-tuning to skip), which HF's
model shares. The two models are timed alternately, round after round, in this one process so
that load from other processes hits both alike; the median step time of each is reported.

    python benchmarks/speed/train_throughput.py                 # d_model 512, 8 layers, seq 256 (the target shape)
    python benchmarks/speed/train_throughput.py --d-model 128 --layers 2 --rounds 2   # quick smoke run

Targets (issue 17): nexus >= 1.25x HF tokens/s and >= 85% of the measured matmul peak, the best fp32 mm
rate over this model's own GEMM shapes and operand layouts. The script also prints the ceiling that
bounds nexus/HF for the same FLOPs as far as torch's own GEMM kernels go: the best square-GEMM rate
divided by HF's achieved FLOP rate (the silicon's theoretical peak is higher; benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import CLOCKS, StepTimer, alternate, emit, print_machine, ratios  # noqa: E402


def matmul_rate_gflops(shapes, repeats: int = 3, clock: str = "wall") -> tuple[float, str]:
    """fp32 torch.mm rate: for each shape (m, k, n, layout) the median of `repeats` timings, best shape wins.
    layout "nn" multiplies plain row-major operands, "tn"/"nt" a transposed view as the first/second
    operand (what backward passes hand to mm). Medians, not minima, so a lucky quiet moment on a shared
    machine does not inflate the peak the model is held to."""
    best, best_shape = 0.0, ""
    for m, k, n, layout in shapes:
        a = torch.randn(k, m).t() if layout == "tn" else torch.randn(m, k)
        b = torch.randn(n, k).t() if layout == "nt" else torch.randn(k, n)
        # one warm-up call (thread pool, caches), then `repeats` timed ones
        times = alternate({"mm": lambda a=a, b=b: torch.mm(a, b)}, rounds=repeats, warmup=1, clock=clock)["mm"]
        rate = 2 * m * k * n / statistics.median(times) / 1e9
        if rate > best:
            best, best_shape = rate, f"{m}x{k}x{n} {layout}"
    return best, best_shape


def model_gemm_shapes(cfg, tokens: int) -> list[tuple[int, int, int, str]]:
    """Every weight GEMM one training step runs, with the operand layouts torch hands to mm: forward
    x @ W^T (nt), input gradient g @ W (nn), weight gradient g^T @ x (tn)."""
    d, hd = cfg.d_model, cfg.hd
    outs = {cfg.n_heads * hd, cfg.kv_heads * hd, cfg.ffn, cfg.vocab_size, d}  # (d_in = d) projections
    pairs = {(d, o) for o in outs} | {(cfg.n_heads * hd, d), (cfg.ffn, d)}  # o_proj and down_proj read wider inputs
    shapes = set()
    for d_in, d_out in pairs:
        shapes |= {(tokens, d_in, d_out, "nt"), (tokens, d_out, d_in, "nn"), (d_out, tokens, d_in, "tn")}
    return sorted(shapes)


# Shapes no training step of this model runs, for the ceiling only: square GEMMs from in-cache (512) to
# DRAM-bound (2048), the best rates this CPU's fp32 kernels reach at all.
CEILING_SHAPES = [(n, n, n, lay) for n in (512, 1024, 2048) for lay in ("nn", "tn", "nt")]


def profile_step(step_fn, opt) -> None:
    """Where one training step's CPU time goes: GEMMs, attention, the optimizer and everything else."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step_fn(opt)
    groups = {
        "GEMM (mm/addmm/bmm/linear)": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"),
        "attention (sdpa)": ("aten::_scaled_dot_product", "aten::scaled_dot_product"),
        "optimizer": ("Optimizer.step", "aten::_fused_adamw", "aten::_foreach"),
    }
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    shares = dict.fromkeys([*groups, "other (elementwise, norms, loss, framework)"], 0.0)
    for e in prof.key_averages():
        name = next((g for g, prefixes in groups.items() if e.key.startswith(prefixes)), None)
        shares[name or "other (elementwise, norms, loss, framework)"] += e.self_cpu_time_total
    print("  profile (self CPU time): " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in shares.items()))


def training_step(fwd, opt, x, y, dtype, hf: bool):
    """One training step (forward, backward, optimizer) of a nexus model, or of an HF model whose loss is taken
    exactly as nexus's plain path takes it (fp32 cross-entropy over the already-shifted labels)."""

    def step():
        with torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
            if hf:
                logits = fwd(input_ids=x).logits
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
            else:
                loss = fwd(x, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def hf_twin(ours, cfg, attn: str = "sdpa"):
    """HF LlamaForCausalLM with the nexus model's config and weights (nexus.hf's key mapping), in train mode."""
    import transformers

    from nexus.hf.config_map import hf_config_from_model
    from nexus.hf.convert import nexus_state_to_hf

    hf_cfg = hf_config_from_model(cfg, "LlamaForCausalLM", {})
    hf_cfg._attn_implementation = attn
    hf = transformers.LlamaForCausalLM(hf_cfg)
    missing, unexpected = hf.load_state_dict(nexus_state_to_hf(ours, cfg, "LlamaForCausalLM"), strict=False)
    # a tied HF model has no separate lm_head entry to load; everything else must match exactly
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return hf.train()


def build_pair(args):
    """(nexus model, HF Llama model) with the same weights."""
    from nexus.config import ModelConfig
    from nexus.models import build_model

    cfg = ModelConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        max_seq_len=args.seq,
        tie_embeddings=not args.untied,
    )
    cfg.validate([], "model")
    torch.manual_seed(0)
    ours = build_model(cfg)
    return cfg, ours.train(), hf_twin(ours, cfg, args.hf_attn)


def matmul_flops_per_token(cfg) -> float:
    """Training FLOPs per token: 6 x (every weight-matrix parameter, LM head included) + causal attention
    scores and values (2 matmuls x 2 FLOPs x T/2 keys on average x H*hd, forward; x3 for training)."""
    d, L, hd = cfg.d_model, cfg.n_layers, cfg.hd
    per_layer = d * cfg.n_heads * hd * 2 + d * cfg.kv_heads * hd * 2 + 3 * d * cfg.ffn
    n_matrix = L * per_layer + cfg.vocab_size * d
    attn = L * 3 * (2 * 2 * (cfg.max_seq_len / 2) * cfg.n_heads * hd)
    return 6 * n_matrix + attn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=0, help="0 = same as heads (MHA)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=259, help="259 = nexus byte tokenizer")
    p.add_argument("--untied", action="store_true", help="separate LM head (default: tied, as the nexus baseline)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds; each times --steps steps per model")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--hf-attn", default="sdpa", choices=["sdpa", "eager"], help="HF attention implementation")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument(
        "--no-malloc-tuning",
        action="store_true",
        help="keep glibc's default malloc (nexus's CLI tunes it for both models; see nexus/runtime.py)",
    )
    # wall: elapsed time (the honest measure on a quiet machine). cpu: this process's CPU time, which ignores
    # time spent descheduled, so with --threads 1 it stays meaningful on a shared, overloaded box.
    p.add_argument("--clock", default="wall", choices=list(CLOCKS), help="cpu: process CPU time (use with --threads 1)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile both models (inductor; what `--train.compile true` does for nexus), HF too",
    )
    p.add_argument(
        "--adamw",
        default="fused",
        choices=["fused", "foreach"],
        help="torch AdamW kernel for both sides; fused is each side's default (nexus's trainer on "
        "CPU, HF Trainer's adamw_torch_fused since torch 2.8)",
    )
    p.add_argument("--profile", action="store_true", help="after timing, profile one step of each side")
    args = p.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_malloc_tuning:  # a process-wide setting: HF's model gets it too
        from nexus.runtime import tune_cpu_allocator

        print(f"malloc tuning: {'on' if tune_cpu_allocator() else 'refused by libc'}")

    cfg, ours, hf = build_pair(args)
    fwd_ours, fwd_hf = ours, hf
    if args.compile:  # each model in its compiled mode; compilation happens in the warm-up step, untimed
        fwd_ours, fwd_hf = torch.compile(ours), torch.compile(hf)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
    x, y = ids[:, :-1], ids[:, 1:]
    tokens = x.numel()

    def step_ours(opt):
        return float(training_step(fwd_ours, opt, x, y, torch.float32, hf=False)())

    def step_hf(opt):  # loss computed the same way as ours, on already-shifted labels
        return float(training_step(fwd_hf, opt, x, y, torch.float32, hf=True)())

    # lr 0: the weights stay identical, so every round times the same computation on both sides
    fused = args.adamw == "fused"
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=0.0, fused=fused, foreach=not fused)
    opt_hf = torch.optim.AdamW(hf.parameters(), lr=0.0, fused=fused, foreach=not fused)
    with StepTimer() as warm:
        l_ours, l_hf = step_ours(opt_ours), step_hf(opt_hf)  # warm-up, and a correctness check
    if args.compile:
        print(f"compile + first steps: {warm.elapsed.wall:.1f} s wall")
        step_ours(opt_ours), step_hf(opt_hf)  # a second step: any recompilation also stays untimed
    assert abs(l_ours - l_hf) < 1e-4, (l_ours, l_hf)

    T = args.batch * args.seq
    gemms = model_gemm_shapes(cfg, T)
    peaks, ceilings = [], []

    def matmul_peaks(r: int, _) -> None:  # the peak is measured under the same load, every round
        peaks.append(matmul_rate_gflops(gemms, clock=args.clock))
        ceilings.append(matmul_rate_gflops(CEILING_SHAPES, clock=args.clock)[0])

    # the two models alternate who goes first, round after round; --steps steps per model and round
    times = alternate(
        {"nexus": lambda: step_ours(opt_ours), "hf": lambda: step_hf(opt_hf)},
        args.rounds,
        calls=args.steps,
        warmup=0,
        clock=args.clock,
        after_round=matmul_peaks,
    )

    peak = statistics.median(p for p, _ in peaks)
    peak_shape = max(set(s for _, s in peaks), key=[s for _, s in peaks].count)
    flops_tok = matmul_flops_per_token(cfg)
    med = {k: statistics.median(v) for k, v in times.items()}
    tps = {k: tokens / v for k, v in med.items()}
    util = {k: tps[k] * flops_tok / 1e9 / peak for k in tps}
    print(
        f"shape: d_model {cfg.d_model}, layers {cfg.n_layers}, heads {cfg.n_heads}/{cfg.kv_heads}, ffn {cfg.ffn}, "
        f"vocab {cfg.vocab_size}, seq {args.seq}, batch {args.batch} | threads {torch.get_num_threads()} | "
        f"HF attention {args.hf_attn} | clock {args.clock} | compile {args.compile} | torch {torch.__version__}"
    )
    print(f"loss check: nexus {l_ours:.6f} hf {l_hf:.6f}")
    for k in ("nexus", "hf"):
        print(
            f"{k:>5}: median step {med[k] * 1e3:8.1f} ms | {tps[k]:9.0f} tokens/s | "
            f"{tps[k] * flops_tok / 1e9:7.1f} GFLOP/s = {100 * util[k]:5.1f}% of matmul peak | "
            f"steps(ms) {[round(t * 1e3) for t in times[k]]}"
        )
    ceiling = max(statistics.median(ceilings), peak)
    print(
        f"matmul peak: {peak:.1f} GFLOP/s fp32 over this model's {len(gemms)} GEMM shapes (median over rounds "
        f"{[round(p) for p, _ in peaks]}, usual best shape {peak_shape}); model FLOPs/token {flops_tok / 1e6:.1f}M"
    )
    hf_rate = tps["hf"] * flops_tok / 1e9
    # With torch's GEMM kernels no step runs its FLOPs faster than their best rate at any shape, so this
    # bounds nexus/HF for the same computation, whatever nexus does outside the GEMMs (a faster-than-torch
    # GEMM kernel could go past it, up to the silicon's own peak).
    print(
        f"ceiling: best square GEMM {ceiling:.1f} GFLOP/s (median over rounds {[round(c) for c in ceilings]}); "
        f"HF runs at {hf_rate:.1f} GFLOP/s, so nexus/HF <= {ceiling / hf_rate:.3f} for the same FLOPs"
    )
    print(
        f"RATIO nexus/hf tokens/s = {tps['nexus'] / tps['hf']:.3f}  (target >= 1.25, ceiling {ceiling / hf_rate:.3f})"
    )
    print(f"RATIO nexus / matmul peak = {util['nexus']:.3f}  (target >= 0.85)")
    mode = "compiled" if args.compile else "eager"
    per_round = ratios(times, "hf", "nexus")  # HF's step time / nexus's = nexus/HF tokens/s
    emit(
        f"training tokens/s vs HF LlamaForCausalLM ({mode}, d{cfg.d_model} x {cfg.n_layers}, seq {args.seq})",
        per_round,
        f">= 1.25 (same-FLOPs ceiling here {ceiling / hf_rate:.2f})",
        met=statistics.median(per_round) >= 1.25,
        ceiling=round(ceiling / hf_rate, 4),
        nexus_ms=[round(t * 1e3, 1) for t in times["nexus"]],
        hf_ms=[round(t * 1e3, 1) for t in times["hf"]],
    )
    shares = [tokens / t * flops_tok / 1e9 / p for t, (p, _) in zip(times["nexus"], peaks)]
    emit(
        f"training share of measured matmul peak ({mode})",
        shares,
        ">= 0.85",
        unit="fraction",
        met=statistics.median(shares) >= 0.85,
        peak_gflops=[round(p, 1) for p, _ in peaks],
    )
    if args.profile:
        for name, fn, opt in (("nexus", step_ours, opt_ours), ("hf", step_hf, opt_hf)):
            print(f"{name}:")
            profile_step(fn, opt)


if __name__ == "__main__":
    main()
