"""Peak memory and time of the LM loss (head + cross-entropy, forward and backward) on the CPU: today's path,
which materializes the fp32 (tokens x vocab) logits, against the chunked head + CE
(`model.loss_chunk_tokens`, nexus/models/chunked_ce.py), at the 124M baseline's head shape.

Memory: torch has no peak counter for CPU tensors, so each measurement is a fresh process's peak resident
set (getrusage ru_maxrss) grown during one forward + backward of the loss, after its inputs exist; the two
paths alternate process by process, round after round. Large tensors are mmap-backed, so the RSS growth
follows the tensors. Time: both paths alternate in this one process, median of the rounds.

    python benchmarks/speed/loss_memory.py                        # 1024 tokens, d 768, vocab 50,304, chunk 256
    python benchmarks/speed/loss_memory.py --tokens 64 --vocab 512 --d-model 32 --rounds 2 --chunk 16   # smoke run
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import alternate, emit, print_machine, ratios, round_order  # noqa: E402

PATHS = ("plain", "chunked")


def inputs(args):
    g = torch.Generator().manual_seed(0)
    h = (torch.randn(args.tokens, args.d_model, generator=g) / args.d_model**0.5).requires_grad_()
    w = (torch.randn(args.vocab, args.d_model, generator=g) * 0.02).requires_grad_()
    y = torch.randint(0, args.vocab, (args.tokens,), generator=g)
    return h, w, y


def loss_step(path: str, h, w, y, chunk: int) -> float:
    """Forward + backward of the mean CE of h @ w^T on labels y; returns the loss."""
    from nexus.models.chunked_ce import chunked_head_cross_entropy
    from nexus.models.lm_loss import cross_entropy_mean

    h.grad = w.grad = None
    loss = cross_entropy_mean(h @ w.t(), y) if path == "plain" else chunked_head_cross_entropy(h, w, y, chunk)[0]
    loss.backward()
    return float(loss.detach())


def one_process(args) -> None:
    """Child: the RSS growth (MiB) of one loss step, printed as JSON."""
    tiny = argparse.Namespace(tokens=8, d_model=8, vocab=16)
    for path in PATHS:  # imports and lazy library set-up, outside the measured window
        loss_step(path, *inputs(tiny), 4)
    h, w, y = inputs(args)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    loss = loss_step(args.one, h, w, y, args.chunk)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"path": args.one, "peak_mib": grown / 1024, "loss": loss}))


def measure_memory(args) -> dict[str, list[float]]:
    out = {p: [] for p in PATHS}
    base = [
        sys.executable,
        __file__,
        "--tokens",
        str(args.tokens),
        "--d-model",
        str(args.d_model),
        "--vocab",
        str(args.vocab),
        "--chunk",
        str(args.chunk),
        "--threads",
        str(args.threads),
    ]
    for r in range(args.rounds):
        for path in round_order(PATHS, r):  # the paths alternate who goes first, as the timed rounds do
            proc = subprocess.run(base + ["--one", path], capture_output=True, text=True, check=True)
            out[path].append(json.loads(proc.stdout.strip().splitlines()[-1])["peak_mib"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1024, help="tokens in the batch (batch x seq)")
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--chunk", type=int, default=256, help="tokens per chunk of the chunked path")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)  # child process: one memory measurement
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.one:
        return one_process(args)
    print_machine()  # CPU model and capability beside the figures below
    mem = measure_memory(args)
    h, w, y = inputs(args)
    losses = {}
    for path in PATHS:  # warm-up (allocator, thread pool), and the two losses to compare
        losses[path] = loss_step(path, h, w, y, args.chunk)
    times = alternate(
        {path: (lambda path=path: loss_step(path, h, w, y, args.chunk)) for path in PATHS}, args.rounds, warmup=0
    )
    cap = torch.backends.cpu.get_cpu_capability()
    logits_mib = args.tokens * args.vocab * 4 / 2**20
    print(
        f"shape: {args.tokens} tokens x d {args.d_model} -> vocab {args.vocab} (fp32 logits {logits_mib:.0f} MiB); "
        f"chunk {args.chunk} tokens; threads {args.threads}; torch {torch.__version__}; CPU capability {cap}"
    )
    print(f"loss: plain {losses['plain']:.6f} chunked {losses['chunked']:.6f}")
    for path in PATHS:
        print(
            f"{path:>8}: peak RSS growth per round {[round(m, 1) for m in mem[path]]} MiB; "
            f"step time per round {[round(t * 1e3, 1) for t in times[path]]} ms"
        )
    time_ratio = ratios(times, "chunked", "plain")
    print(f"RATIO chunked/plain step time = {statistics.median(time_ratio):.3f} (CPU capability {cap})")
    if min(mem["plain"]) <= 0:  # a loss this small fits in pages the process already had: nothing to compare
        print("memory: the plain path's RSS did not grow (shape too small to measure); no memory ratio")
    else:
        mem_ratio = [c / pl for c, pl in zip(mem["chunked"], mem["plain"])]
        print(f"RATIO chunked/plain peak memory = {statistics.median(mem_ratio):.3f} (CPU capability {cap})")
        emit(
            f"loss peak memory, chunked/plain head+CE ({args.tokens} tok, vocab {args.vocab}, CPU {cap})",
            mem_ratio,
            "report (lower is better)",
            unit="x",
            plain_mib=mem["plain"],
            chunked_mib=mem["chunked"],
            cpu_capability=cap,
        )
    emit(
        f"loss step time, chunked/plain head+CE ({args.tokens} tok, vocab {args.vocab}, CPU {cap})",
        time_ratio,
        "report",
        unit="x",
        plain_ms=[t * 1e3 for t in times["plain"]],
        chunked_ms=[t * 1e3 for t in times["chunked"]],
        cpu_capability=cap,
    )


if __name__ == "__main__":
    main()
