"""Training-step time of each ExoFormer-family variant relative to gated attention (and the base
Transformer when it is run), measured alternately in one process (round-robin, so machine load drifts
hit every variant alike). One step = forward + backward, plus the recipe's Muon + AdamW step with
--optimizer (off by default: at benchmark batch sizes the optimizer would dominate the step).

Target (issue 3, issue 14): dynamic ExoFormer <= 1.05x gated attention on the anchor path the
paper-scale preset takes.

Headline shape (`--shape 450m`, the default): the project's `exo-dynamic-e-450m` preset's own shape,
read from the preset (d_model 1024, 29 layers, 16 heads, SwiGLU inner 2048, 2,048-token sequences),
one sequence per step on the CPU, and the anchor path that preset takes. That path is read from the
preset too: 16 x 2,048 = 32,768 tokens per micro-batch against 57,601 vocabulary rows, so every
token's anchor is projected ("direct"), not gathered from a per-vocabulary table; the byte vocabulary
used here would pick the table path, so the benchmark forces the direct one. One step takes tens of
seconds on one core, so use few rounds.

`--shape 450m-reduced`: the same depth, path and proportions (SwiGLU inner 2d, head size 64,
sequence 2d) at width 256 (512 tokens), the earlier headline. The mixing's elementwise work per
token grows with d_model and the matmuls with d_model^2, so this narrow shape over-states the
overhead the preset pays; it is kept as a secondary, quicker row.

`--shape custom` takes --d-model/--layers/--seq as given (the earlier default was d 512 x 8 layers,
one 2,048-token sequence, where a byte vocabulary puts the anchor on the table path).

    python benchmarks/speed/variant_overhead.py --threads 1 --clock process --rounds 6 --warmup 1   \
# headline: the preset's shape
    python benchmarks/speed/variant_overhead.py --shape 450m-reduced --threads 1 --clock process --rounds 30
    python benchmarks/speed/variant_overhead.py --shape custom --d-model 512 --layers 8 --seq 2048 --variants all
    python benchmarks/speed/variant_overhead.py --rounds 20 --device cuda --dtype bfloat16 --d-model 1024 --seq 2048

Prints one row per variant: median step time, ratio to gated (as a ratio of medians, and as the
median of per-round paired ratios with a 95% bootstrap interval), the FLOPs ratio to gated by the
paper's per-token formula and as executed for this batch (FlopCounterMode, forward + backward), and
the raw per-round times. `--clock process` times each step by this process's CPU time instead of
the elapsed time: on a machine shared with other jobs it leaves out the time they hold the cores
(not their competition for memory bandwidth). \
nexus's CLI tunes glibc malloc (nexus/runtime.py), so this script does too;
--no-malloc-tuning measures the default allocator.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats
from torch.utils.flop_counter import FlopCounterMode

from nexus.analysis.flops import forward_flops_per_token
from nexus.analysis.hooks import direct_anchor_projection
from nexus.models import build_model, fused_mix, mix_kernels
from nexus.optim.param_groups import build_optimizer
from nexus.presets import get_preset
from nexus.runtime import tune_cpu_allocator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios  # noqa: E402

VARIANTS = ["base-transformer", "gated", "resformer", "naive-combination", "nures-e", "exo-s", "exo-e", "exo-dynamic-e"]
HEADLINE = ["gated", "exo-dynamic-e"]
PAPER_PRESET = "exo-dynamic-e-450m"


def preset_anchor_path(name: str = PAPER_PRESET) -> tuple[str, int, int]:
    """The anchor path `name` takes in training: ExoAnchor gathers from the vocabulary table only when
    the table has fewer rows than the micro-batch has tokens. Returns (path, tokens, vocab rows)."""
    cfg = get_preset(name)
    tokens, vocab = cfg.train.batch_size * cfg.data.seq_len, cfg.model.vocab_size
    return ("table" if vocab < tokens else "direct"), tokens, vocab


def make(stem: str, args, device):
    cfg = get_preset(f"{stem}-tiny")
    m = cfg.model
    m.d_model, m.n_layers, m.max_seq_len = args.d_model, args.layers, args.seq
    m.n_heads = getattr(args, "heads", None) or args.d_model // 64  # the preset's own head count at its width
    if args.ffn:
        m.ffn_hidden = args.ffn
    torch.manual_seed(0)
    model = build_model(m).to(device)
    opt = None
    if args.optimizer:
        opt = build_optimizer(model, cfg.train)
        for g in opt.param_groups:
            g["lr"] = g["base_lr"]
    return cfg, model, opt


def step(model, opt, x, y, device, dtype) -> None:
    """One training step, for the harness to time: on CUDA it waits for the device at both ends, so the
    step's own kernels are all that falls inside the timed call."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = model(x, labels=y).loss
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    else:
        model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()


def paired_ratio(times: list[float], ref: list[float]) -> tuple[float, float, float]:
    """Median of the per-round ratios times[r] / ref[r], with a 95% bootstrap interval for that median.
    Each round times every variant back to back, so pairing by round cancels most of the machine's
    load drift that a ratio of two separate medians keeps."""
    ratios = np.asarray(times) / np.asarray(ref)
    if len(ratios) < 3:
        return float(np.median(ratios)), float("nan"), float("nan")
    ci = stats.bootstrap(
        (ratios,), np.median, confidence_level=0.95, n_resamples=2000, method="percentile", random_state=0
    ).confidence_interval
    return float(np.median(ratios)), float(ci.low), float(ci.high)


def executed_flops(model, x, y) -> int:
    """Matmul and attention FLOPs that one forward + backward of this batch actually runs. The anchor
    table path does less anchor work than the paper's formula counts, so both columns are printed."""
    with FlopCounterMode(display=False) as counter:
        model(x, labels=y).loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--shape",
        default="450m",
        choices=["450m", "450m-reduced", "custom"],
        help=f"450m: {PAPER_PRESET}'s own shape and anchor path (default); 450m-reduced: its depth, "
        "FFN ratio, head size, T/d ratio and anchor path at d 256; "
        "custom: --d-model/--layers/--seq/--ffn as given",
    )
    ap.add_argument(
        "--d-model", type=int, default=None, help="width (450m: the preset's; 450m-reduced: 256; custom: 512)"
    )
    ap.add_argument("--layers", type=int, default=None, help="depth (450m shapes: the preset's 29; custom: 8)")
    ap.add_argument(
        "--ffn",
        type=int,
        default=None,
        help="SwiGLU inner size (450m: the preset's; 450m-reduced: 2 d; custom: default)",
    )
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument(
        "--seq",
        type=int,
        default=None,
        help="tokens per sequence (450m: the preset's; 450m-reduced: 2 d; custom: 2048)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=12,
        help="timed rounds (each times every variant once; the paired interval narrows with more)",
    )
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help=f"variant stems, or 'all' (default: {' '.join(HEADLINE)} for the 450m shape, all for custom)",
    )
    ap.add_argument("--optimizer", action="store_true", help="include the recipe's Muon + AdamW step")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument(
        "--no-malloc-tuning",
        action="store_true",
        help="keep glibc's default malloc (nexus's CLI tunes it; see nexus/runtime.py)",
    )
    ap.add_argument(
        "--anchor-path",
        default=None,
        choices=["auto", "direct"],
        help="ExoFormer anchors: auto gathers them from a per-vocabulary table when V < tokens; "
        f"direct projects every token (default: the path {PAPER_PRESET} takes for the 450m shape, "
        "auto for custom)",
    )
    ap.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "process"],
        help="wall: elapsed time (default); process: this process's CPU time (CPU only), which leaves "
        "out the time other processes on a shared machine hold the cores",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile each model (fuses the mixing's elementwise work, as a GPU run would)",
    )
    ap.add_argument(
        "--no-flop-count",
        dest="count_flops",
        action="store_false",
        help="skip the executed-FLOPs column (one more forward + backward per variant; long at d 1024)",
    )
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    preset_path, preset_tokens, preset_vocab = preset_anchor_path()
    if args.shape == "450m":
        preset = get_preset(PAPER_PRESET)
        args.d_model, args.layers = args.d_model or preset.model.d_model, args.layers or preset.model.n_layers
        args.seq, args.ffn = args.seq or preset.data.seq_len, args.ffn or preset.model.ffn_hidden
        args.heads = preset.model.n_heads if args.d_model == preset.model.d_model else None
    if args.shape == "450m-reduced":
        d = args.d_model or 256
        args.d_model, args.layers = d, args.layers or get_preset(PAPER_PRESET).model.n_layers
        args.seq, args.ffn = args.seq or 2 * d, args.ffn or 2 * d
    if args.shape != "custom":
        args.anchor_path = args.anchor_path or ("direct" if preset_path == "direct" else "auto")
        args.variants = args.variants or list(HEADLINE)
    else:
        args.d_model, args.layers, args.seq = args.d_model or 512, args.layers or 8, args.seq or 2048
        args.anchor_path = args.anchor_path or "auto"
        args.variants = args.variants or list(VARIANTS)
    if args.variants == ["all"]:
        args.variants = list(VARIANTS)
    if args.threads:
        torch.set_num_threads(args.threads)
    malloc = "default" if args.no_malloc_tuning else ("tuned" if tune_cpu_allocator() else "default (tuning refused)")
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
    if "gated" not in args.variants:
        args.variants.insert(0, "gated")
    built = {v: make(v, args, device) for v in args.variants}
    forced_paths = contextlib.ExitStack()  # held to the end of the run
    if args.anchor_path != "auto":
        for _, model, _ in built.values():
            forced_paths.enter_context(direct_anchor_projection(model))
    if args.compile:
        built = {v: (cfg, torch.compile(model), opt) for v, (cfg, model, opt) in built.items()}
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 259, (args.batch, args.seq), generator=g).to(device)
    y = torch.randint(0, 259, (args.batch, args.seq), generator=g).to(device)
    # the raw times go to stderr round by round as they come, so a long run cut short still leaves its numbers
    print(f"{args.warmup} untimed warm-up round(s), then {args.rounds} timed", file=sys.stderr, flush=True)
    times = alternate(
        {v: (lambda v=v: step(built[v][1], built[v][2], x, y, device, dtype)) for v in args.variants},
        args.rounds,
        warmup=args.warmup,
        clock="cpu" if args.clock == "process" else "wall",
        after_round=lambda r, t: print(
            f"round {r + 1}/{args.rounds} done: " + " ".join(f"{v} {t[v] * 1e3:.1f} ms" for v in args.variants),
            file=sys.stderr,
            flush=True,
        ),
    )
    med = {v: statistics.median(ts) for v, ts in times.items()}
    unwrap = {v: getattr(built[v][1], "_orig_mod", built[v][1]) for v in args.variants}
    flops = {v: forward_flops_per_token(unwrap[v], args.seq) for v in args.variants}
    ran = {v: executed_flops(unwrap[v], x, y) if args.count_flops else float("nan") for v in args.variants}
    print(
        f"shape {args.shape} | device {device} ({torch.get_num_threads()} CPU threads) | "
        f"dtype {args.dtype} | d_model {args.d_model} x "
        f"{args.layers} layers, {built['gated'][1].cfg.n_heads} heads, ffn {built['gated'][1].cfg.ffn} | "
        f"batch {args.batch} x seq {args.seq} | optimizer "
        f"{'on' if args.optimizer else 'off'} | compile {'on' if args.compile else 'off'} | malloc {malloc} | "
        f"anchor path {args.anchor_path} | {args.clock} clock | "
        f"{args.rounds} rounds (+{args.warmup} warmup), alternating order"
    )
    print(
        f"{PAPER_PRESET} takes the {preset_path} anchor path ({preset_tokens:,} tokens per micro-batch, "
        f"{preset_vocab:,} vocabulary rows)"
    )
    fused = (
        device.type == "cpu"
        and dtype == torch.float32
        and not args.compile
        and mix_kernels.available()
        and fused_mix.enabled()
    )
    print(
        "mixing path: "
        + (
            "fused CPU kernels (nexus/models/fused_mix.py)"
            if fused
            else "eager torch ops (ModulatedMix)" + ("" if mix_kernels.available() else "; numba is not installed")
        )
    )
    paired = {v: paired_ratio(times[v], times["gated"]) for v in args.variants}
    base = med.get("base-transformer")
    print(
        f"{'variant':<20} {'median ms':>10} {'vs base':>8} {'vs gated':>9} "
        f"{'paired vs gated':>22} {'formula FLOPs':>14} "
        f"{'executed FLOPs':>15} {'min..max ms':>18}"
    )
    print(f"{'':<20} {'':>10} {'':>8} {'':>9} {'(median [95% CI])':>22} {'vs gated':>14} {'vs gated':>15}")
    for v in args.variants:
        ts = times[v]
        p_med, p_lo, p_hi = paired[v]
        vs_base = f"{med[v] / base:>8.3f}" if base else f"{'-':>8}"
        print(
            f"{v:<20} {med[v] * 1e3:>10.2f} {vs_base} {med[v] / med['gated']:>9.3f} "
            f"{f'{p_med:.3f} [{p_lo:.3f}, {p_hi:.3f}]':>22} "
            f"{flops[v] / flops['gated']:>14.4f} {ran[v] / ran['gated']:>15.4f} "
            f"{min(ts) * 1e3:>8.2f}..{max(ts) * 1e3:<8.2f}"
        )
    for v in args.variants:  # the raw numbers behind every ratio
        print(f"raw ms {v}: " + " ".join(f"{t * 1e3:.1f}" for t in times[v]))
    if "exo-dynamic-e" in med:
        p_med, p_lo, p_hi = paired["exo-dynamic-e"]
        verdict = (
            "met"
            if p_hi <= 1.05
            else "NOT met"
            if p_lo > 1.05
            else "met by the median, but the interval crosses 1.05: rerun with more --rounds"
            if p_med <= 1.05
            else "missed by the median, but the interval crosses 1.05: rerun with more --rounds"
        )
        print(
            f"target dynamic ExoFormer <= 1.05x gated: paired median {p_med:.3f}x, 95% CI [{p_lo:.3f}, {p_hi:.3f}] "
            f"(ratio of medians {med['exo-dynamic-e'] / med['gated']:.3f}x) -> {verdict}"
        )

    for v in args.variants:
        if v == "gated":
            continue
        p_med, p_lo, p_hi = paired[v]
        headline = v == "exo-dynamic-e"  # the one variant the issue sets a target for
        emit(
            f"{v} vs gated attention training step (shape {args.shape}, d {args.d_model} x {args.layers}, seq "
            f"{args.seq}, {args.clock} clock, {device})",
            ratios(times, v, "gated"),
            "<= 1.05" if headline else "report",
            met=p_med <= 1.05 if headline else None,
            paired_ci95=None if np.isnan(p_lo) else [round(p_lo, 4), round(p_hi, 4)],  # None: < 3 rounds
            ratio_of_medians=round(med[v] / med["gated"], 4),
            ms=[round(t * 1e3, 2) for t in times[v]],
            gated_ms=[round(t * 1e3, 2) for t in times["gated"]],
        )


if __name__ == "__main__":
    main()
