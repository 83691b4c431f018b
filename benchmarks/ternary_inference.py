"""Packed ternary NEXUS v4.1 inference on CPU: decode tokens/s of the model loaded from the packed
file (weight-only int4 kernel, `kernel="auto"`) vs a model of the same shapes with plain fp32 nn.Linear weights
(issue 17 target: ratio >= 1.5, goal 2), and the bits per ternary weight in the packed file
(target <= 2.1).

Both models decode the same prompt greedily with cached conv states; runs alternate between the two
models in one process and every round's ratio is printed with the median and range, because the
machine may be shared. The packed model's accuracy against the exact (dense, bitwise) path is
printed too: max |logit difference| on the prompt and top-1 agreement on the same positions.

    python benchmarks/ternary_inference.py                         # nexus-small, B=1, 240 new tokens
    python benchmarks/ternary_inference.py --preset nexus-tiny --new-tokens 32 --reps 3
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _result import emit


def tokens_per_s(model, prompt, new_tokens: int) -> float:
    t0 = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=new_tokens, temperature=0)
    dt = time.perf_counter() - t0
    assert out.shape[1] == prompt.shape[1] + new_tokens
    return new_tokens * prompt.shape[0] / dt


def step_ratios(packed, fp32_model, prompt, rounds: int) -> tuple[list, list]:
    """ms per cached one-token decode step after the prompt, alternated between the two models."""
    caches = {}
    times = {"packed": [], "fp32": []}
    models = {"packed": packed, "fp32": fp32_model}
    with torch.no_grad():
        for name, model in models.items():
            caches[name] = model.new_cache()
            model(prompt, cache=caches[name])
        for _ in range(rounds):
            for name, model in models.items():
                t0 = time.perf_counter()
                for _ in range(3):
                    model(prompt[:, :1], cache=caches[name])
                times[name].append((time.perf_counter() - t0) / 3 * 1e3)
    return times["packed"], times["fp32"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="nexus-small")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=240)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--packing", default="2bit", choices=["2bit", "base3"])
    p.add_argument("--kernel", default="auto", choices=["auto", "int4", "int8", "dense"], help="packed model's decode kernel")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--step-rounds", type=int, default=0,
                   help="also time cached one-token steps alone (3 per model per round) for this many rounds")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from nexus.checkpoint import save_checkpoint
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.models import build_model
    from nexus.export.ternary import load_ternary, save_ternary
    from nexus.presets import get_preset

    cfg = get_preset(args.preset)
    torch.manual_seed(0)
    ternary_model = build_model(cfg.model).eval()
    fp32_cfg = get_preset(args.preset)
    fp32_cfg.model.arch.ternary = False
    fp32_model = build_model(fp32_cfg.model).eval()
    with tempfile.TemporaryDirectory() as tmp:
        report = save_ternary(ternary_model, cfg, ByteTokenizer(), Path(tmp) / "model.tern", args.packing)
        packed, _, _ = load_ternary(report["path"], kernel=args.kernel)
        exact, _, _ = load_ternary(report["path"], kernel="dense")
        ckpt = save_checkpoint(Path(tmp) / "ckpt", ternary_model, cfg, ByteTokenizer())
        ckpt_bytes = (ckpt / "model.safetensors").stat().st_size
    prompt = torch.randint(0, cfg.model.vocab_size, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(exact(prompt).logits, ternary_model(prompt).logits)  # the packed file is exact
        diff = (packed(prompt).logits - exact(prompt).logits).abs().max().item()
    # teacher-forced top-1 agreement on the exact model's own greedy continuation (free-running greedy
    # sequences diverge after the first near-tie, which on random weights says little about accuracy)
    agree_len = min(args.new_tokens, 32)
    cont = exact.generate(prompt, max_new_tokens=agree_len, temperature=0)
    with torch.no_grad():
        agree = (packed(cont).logits.argmax(-1) == exact(cont).logits.argmax(-1)).float().mean().item()
    del exact
    tokens_per_s(packed, prompt, 2)  # warm-up (allocations, first-call dispatch)
    tokens_per_s(fp32_model, prompt, 2)
    ter, fp = [], []
    for _ in range(args.reps):
        ter.append(tokens_per_s(packed, prompt, args.new_tokens))
        fp.append(tokens_per_s(fp32_model, prompt, args.new_tokens))
    ratios = [t / f for t, f in zip(ter, fp)]
    t_med, f_med = statistics.median(ter), statistics.median(fp)
    rc = cfg.model.arch
    print(f"{args.preset}: {report['ternary_params'] / 1e6:.2f}M ternary + {report['other_params'] / 1e6:.2f}M fp32 params, "
          f"N_sup {rc.n_sup} x T_inner {rc.t_inner} x {cfg.model.n_layers} layers, threads {torch.get_num_threads()}")
    print(f"packed file ({args.packing}): {report['file_bytes'] / 1e6:.2f} MB (embeddings and scales included) vs "
          f"fp32 checkpoint {ckpt_bytes / 1e6:.2f} MB; {report['bits_per_ternary_weight']:.3f} bits per ternary weight "
          f"({report['bits_per_ternary_weight_with_scales']:.3f} with scales; target <= 2.1)")
    print(f"packed kernel {args.kernel}: max |logit diff| vs the exact packed model {diff:.4g} on the prompt; "
          f"top-1 agreement over {cont.shape[1]} teacher-forced positions {agree:.3f} (random-init weights)")
    print(f"decode tokens/s (batch {args.batch}, prompt {args.prompt_len}, {args.new_tokens} new, {args.reps} alternated rounds): "
          f"packed ternary {t_med:.2f} vs fp32 {f_med:.2f} (medians); raw ternary {[round(v, 2) for v in ter]} "
          f"fp32 {[round(v, 2) for v in fp]}")
    print(f"ratio per round {[round(r, 3) for r in ratios]} -> median {statistics.median(ratios):.3f}, "
          f"range [{min(ratios):.3f}, {max(ratios):.3f}] (target >= 1.5, goal 2)")
    emit(f"ternary decode vs fp32 dense ({args.preset}, B={args.batch}, {args.new_tokens} new tokens)", ratios,
         ">= 1.5 (goal 2)", met=statistics.median(ratios) >= 1.5, ternary_tok_s=ter, fp32_tok_s=fp,
         bits_per_weight=round(report["bits_per_ternary_weight"], 4))
    if args.step_rounds:
        pk, fp = step_ratios(packed, fp32_model, prompt, args.step_rounds)
        r = [f / k for k, f in zip(pk, fp)]
        print(f"one-token steps alone, ms: packed {[round(v) for v in pk]} fp32 {[round(v) for v in fp]}; ratio per round "
              f"{[round(v, 2) for v in r]} -> median {statistics.median(r):.2f}, range [{min(r):.2f}, {max(r):.2f}]")


if __name__ == "__main__":
    main()
