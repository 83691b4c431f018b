"""CPU training: bf16 autocast vs fp32, eager vs torch.compile, for nexus and HF LlamaForCausalLM
(issue 26 item 4), to decide nexus's CPU defaults from measurements on the machine at hand.

Speed: the d512 x 8 training benchmark of train_throughput.py (seq 256, batch 8, byte vocabulary,
same weights, each side's fused torch AdamW), every (model, mode) timed alternately in one process,
round after round, so load from other processes hits all of them alike. Loss: `nexus train` on the
baseline-tiny preset (the default run) for --loss-steps steps in fp32 and in bf16, seeds 0, 1, 2;
bf16 is "within seed noise" when the mean paired difference is smaller than the fp32 runs' spread
over seeds. Compile: the time to the first compiled step of the same preset and its step time.

Widths (issue 51 item 1, `--widths`): the bf16 / fp32 training-step ratio of nexus alone at each d_model given
(2 layers by default, heads of 64 or --head-dim, seq 256, batch 8, nexus's AdamW as `nexus train` builds it,
autocast as the trainer takes it), every (width, dtype) alternated in one process, round after round, on the
process CPU clock; plus the studies' shape (d 64 x 4 layers, heads of 16, FFN 128, batch 16 x seq 128). The
table `--train.dtype auto`'s rule (nexus/train/precision.py) was set from, one run per head dim (16, 32, 64);
`--widths` runs only this table (results: benchmarks/results/dtype-auto.md).

    python benchmarks/speed/cpu_precision.py --threads 1 --rounds 3                     # everything
    python benchmarks/speed/cpu_precision.py --threads 1 --widths 64,128,256,512 --head-dim 16 --rounds 7 --steps 2
    python benchmarks/speed/cpu_precision.py --threads 1 --no-loss --no-compile-check   # speed only
    python benchmarks/speed/cpu_precision.py --d-model 64 --layers 2 --rounds 1 --loss-steps 4 --seeds 0  # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, alternate, emit, print_machine  # noqa: E402


def cpu_bf16_report() -> str:
    """What the CPU offers for bf16 arithmetic (the flags torch's bf16 GEMMs are fast with)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    native = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return (
        f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}; native bf16: "
        f"{', '.join(native) if native else 'none (no avx512_bf16 / amx_bf16)'}"
    )


def speed(args) -> dict:
    from train_throughput import build_pair, training_step

    pair_args = SimpleNamespace(
        vocab=args.vocab,
        d_model=args.d_model,
        layers=args.layers,
        heads=args.d_model // 64 or 1,
        kv_heads=0,
        seq=args.seq,
        untied=False,
        hf_attn="sdpa",
    )
    cfg, ours, hf = build_pair(pair_args)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
    x, y = ids[:, :-1], ids[:, 1:]

    def make_step(model, is_hf, dtype):
        opt = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)  # lr 0: every round times the same weights
        step = training_step(model, opt, x, y, torch.bfloat16 if dtype == "bf16" else torch.float32, hf=is_hf)
        return lambda: float(step())

    sides = {
        f"{name} {dtype}": make_step(model, name == "hf", dtype)
        for name, model in (("nexus", ours), ("hf", hf))
        for dtype in ("fp32", "bf16")
    }
    losses = {k: fn() for k, fn in sides.items()}  # warm-up (and the losses each mode computes)
    # every (model, mode) alternates who goes first, round after round, on the process CPU clock
    times = alternate(sides, args.rounds, calls=args.steps, warmup=0, clock="cpu")
    print(
        f"shape: d {cfg.d_model} x {cfg.n_layers} layers, seq {args.seq}, batch {args.batch}, vocab {args.vocab}; "
        f"threads {torch.get_num_threads()}; CPU time per step, {args.rounds} alternated rounds x {args.steps} steps"
    )
    for k, v in times.items():
        print(
            f"  {k:>10}: median {statistics.median(v) * 1e3:8.1f} ms  steps(ms) {[round(t * 1e3) for t in v]}  "
            f"first loss {losses[k]:.4f}"
        )
    ratio = lambda a, b: [tb / ta for ta, tb in zip(times[a], times[b])]  # noqa: E731  speed of a over b, per round
    emit(
        "nexus bf16 autocast vs nexus fp32 (CPU training, speed)",
        ratio("nexus bf16", "nexus fp32"),
        "> 1 to default to bf16",
    )
    emit("HF bf16 autocast vs HF fp32 (CPU training, speed)", ratio("hf bf16", "hf fp32"), "report")
    emit("nexus fp32 vs HF fp32 eager (CPU training, speed)", ratio("nexus fp32", "hf fp32"), ">= 1.5 (nexus default)")
    hf_best = min(("hf fp32", "hf bf16"), key=lambda k: statistics.median(times[k]))
    nexus_best = min(("nexus fp32", "nexus bf16"), key=lambda k: statistics.median(times[k]))
    emit(f"nexus best ({nexus_best}) vs HF best ({hf_best})", ratio(nexus_best, hf_best), ">= 1.0")
    return {k: statistics.median(v) for k, v in times.items()}


def width_table(args) -> dict:
    """bf16 autocast vs fp32 training step of nexus at each width in args.widths (and the studies' shape)."""
    from nexus.config import ModelConfig, TrainConfig
    from nexus.models import build_model
    from nexus.optim.param_groups import build_optimizer

    shapes = {
        f"d{d}": dict(
            d_model=d,
            n_layers=args.layers,
            n_heads=max(1, d // args.head_dim),
            head_dim=args.head_dim if d >= args.head_dim else 0,
            seq=args.seq,
            batch=args.batch,
        )
        for d in args.widths
    }
    if not args.no_study_shape:  # the progressive studies' small model (sparkling-dense-tiny at a study's batch)
        shapes["study d64"] = dict(d_model=64, n_layers=4, n_heads=4, head_dim=16, ffn_hidden=128, seq=128, batch=16)
    sides, losses = {}, {}
    for name, sh in shapes.items():
        seq, batch = sh.pop("seq"), sh.pop("batch")
        cfg = ModelConfig(vocab_size=args.vocab, max_seq_len=seq, **sh)
        cfg.validate([], "model")
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, args.vocab, (batch, seq + 1), generator=g)
        x, y = ids[:, :-1], ids[:, 1:]
        for dtype in ("fp32", "bf16"):
            torch.manual_seed(0)
            model = build_model(cfg).train()
            opt = build_optimizer(model, TrainConfig(lr=0.0))  # lr 0: every round times the same weights

            def step(model=model, opt=opt, x=x, y=y, bf16=dtype == "bf16"):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):  # Trainer._autocast's context
                    loss = model(x, labels=y).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return float(loss.detach())

            sides[f"{name} {dtype}"] = step
        shapes[name] = {**sh, "seq": seq, "batch": batch, "params": sum(p.numel() for p in model.parameters())}
    losses = {k: fn() for k, fn in sides.items()}  # warm-up, and the first loss each side computes
    times = alternate(sides, args.rounds, calls=args.steps, warmup=0, clock="cpu")
    print(
        f"widths: {args.layers} layers, heads of {args.head_dim}, seq {args.seq}, batch {args.batch}, "
        f"vocab {args.vocab}; "
        f"threads {torch.get_num_threads()}; CPU time per step, {args.rounds} alternated rounds x {args.steps} steps"
    )
    out = {}
    for name, sh in shapes.items():
        fp, bf = times[f"{name} fp32"], times[f"{name} bf16"]
        r = [a / b for a, b in zip(fp, bf)]  # bf16 speed over fp32, paired within each round
        print(
            f"  {name:>9} ({sh['params'] / 1e6:.2f}M params, head dim {sh.get('head_dim') or sh['d_model']}, batch "
            f"{sh['batch']} x seq {sh['seq']}): "
            f"fp32 {[round(t * 1e3, 1) for t in fp]} ms, bf16 {[round(t * 1e3, 1) for t in bf]} ms; "
            f"bf16/fp32 speed median {statistics.median(r):.2f}x [{min(r):.2f}, {max(r):.2f}]; first loss "
            f"fp32 {losses[f'{name} fp32']:.4f} bf16 {losses[f'{name} bf16']:.4f}"
        )
        emit(
            f"nexus bf16 autocast vs fp32 training step, {name}"
            + ("" if name.startswith("study") else f", head dim {sh.get('head_dim') or sh['d_model']}"),
            r,
            "> 1 for train.dtype auto to pick bf16 at this width",
            fp32_ms=[round(t * 1e3, 2) for t in fp],
            bf16_ms=[round(t * 1e3, 2) for t in bf],
        )
        out[name] = statistics.median(r)
    return out


def train_loss(seed: int, dtype: str, steps: int, out, extra=()) -> tuple[float, float]:
    """(final train loss, final val loss) of `nexus train` on baseline-tiny for `steps` steps."""
    import json

    from nexus.config_overrides import parse_overrides
    from nexus.presets import get_preset
    from nexus.train.trainer import Trainer

    run = out / f"{dtype}-seed{seed}"
    cfg = parse_overrides(
        get_preset("baseline-tiny"),
        [
            "--train.steps",
            str(steps),
            "--train.seed",
            str(seed),
            "--train.dtype",
            dtype,
            "--train.device",
            "cpu",
            "--train.log_every",
            str(steps),
            "--train.eval_every",
            "0",
            "--train.sample_every",
            "0",
            "--train.save_every",
            "0",
            "--train.out_dir",
            str(run),
            *extra,
        ],
    )
    res = Trainer(cfg.validate(), quiet=True).fit()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r][-1], res["val_loss"]


def loss_parity(args) -> None:
    import tempfile
    from pathlib import Path

    out = Path(tempfile.mkdtemp(prefix="cpu-precision-"))
    val = {"float32": [], "bfloat16": []}
    for seed in args.seeds:
        for dtype in val:
            with StepTimer() as run:
                tr, v = train_loss(seed, dtype, args.loss_steps, out)
            val[dtype].append(v)
            print(f"  loss: seed {seed} {dtype:>8}: train {tr:.4f} val {v:.4f} ({run.elapsed.cpu:.0f} s CPU)")
    diffs = [b - a for a, b in zip(val["float32"], val["bfloat16"])]
    spread = statistics.stdev(val["float32"]) if len(val["float32"]) > 1 else float("nan")
    print(
        f"val loss after {args.loss_steps} steps of baseline-tiny, seeds {args.seeds}: fp32 "
        f"{statistics.mean(val['float32']):.4f} +- {spread:.4f}, bf16 {statistics.mean(val['bfloat16']):.4f}; "
        f"bf16 - fp32 per seed {[round(d, 4) for d in diffs]}"
    )
    emit(
        "val loss bf16 - fp32 (baseline-tiny, same seeds)",
        diffs,
        f"|mean| < fp32 seed spread ({spread:.4f})",
        unit="nats",
        met=abs(statistics.mean(diffs)) < spread,
        fp32=val["float32"],
        bf16=val["bfloat16"],
    )


def compile_check(args) -> None:
    """Time to the first compiled training step of baseline-tiny, then eager vs compiled step time."""
    from nexus.models import build_model
    from nexus.presets import get_preset

    cfg = get_preset("baseline-tiny")
    cfg.model.vocab_size = 259
    torch.manual_seed(0)
    model = build_model(cfg.model)
    ids = torch.randint(
        0, 259, (cfg.train.batch_size, cfg.data.seq_len + 1), generator=torch.Generator().manual_seed(1)
    )
    x, y = ids[:, :-1], ids[:, 1:]
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    compiled = torch.compile(model)

    def step(fwd):
        fwd(x, labels=y).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with StepTimer() as compiling:
        step(compiled)
        step(compiled)
    first = compiling.elapsed.wall
    print(f"compile: first two compiled steps of baseline-tiny {first:.1f} s wall (compilation included)")
    times = alternate(
        {"eager": lambda: step(model), "compiled": lambda: step(compiled)},
        args.rounds,
        calls=args.compile_steps,
        warmup=0,
        clock="cpu",
    )
    print(
        f"  eager {[round(t * 1e3, 1) for t in times['eager']]} ms, "
        f"compiled {[round(t * 1e3, 1) for t in times['compiled']]} ms"
    )
    emit(
        "baseline-tiny compiled vs eager training step (speed)",
        [e / c for e, c in zip(times["eager"], times["compiled"])],
        "> 1 and compile < 60 s to default to compile",
        compile_s=round(first, 1),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=None, help="default 8 (2 with --widths)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=259)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1, help="timed steps per (model, mode) per round")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--loss-steps", type=int, default=100, help="training steps per loss run (baseline-tiny)")
    p.add_argument("--seeds", type=lambda s: [int(v) for v in s.split(",")], default=[0, 1, 2])
    p.add_argument("--compile-steps", type=int, default=3)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--no-loss", action="store_true")
    p.add_argument("--no-compile-check", action="store_true")
    p.add_argument(
        "--widths",
        type=lambda s: [int(v) for v in s.split(",")],
        default=None,
        help="d_model values of the bf16/fp32 width table (runs only that table), e.g. 64,128,256,512",
    )
    p.add_argument("--head-dim", type=int, default=64, help="the width table's head dim (heads = d_model / it)")
    p.add_argument("--no-study-shape", action="store_true", help="leave the studies' shape out of the width table")
    args = p.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress shows in a log file as each part ends
    if args.threads:
        torch.set_num_threads(args.threads)
    from nexus.runtime import tune_cpu_allocator

    tune_cpu_allocator()  # what nexus's CLI does; HF's model shares the process
    print_machine()  # CPU model and capability beside the figures below
    print(f"cpu: {cpu_bf16_report()}; torch {torch.__version__}")
    if args.layers is None:
        args.layers = 2 if args.widths else 8  # --widths: the d512 x 2 layers measurement
    if args.widths:
        width_table(args)
        return
    if not args.no_speed:
        speed(args)
    if not args.no_loss:
        loss_parity(args)
    if not args.no_compile_check:
        compile_check(args)


if __name__ == "__main__":
    main()
