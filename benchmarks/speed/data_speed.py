"""Data path speed and memory, each as a ratio against a reference measured in the same process.

    python benchmarks/speed/data_speed.py loader  [--tokens 100000000] [--rounds 5] [--batches 200]
    python benchmarks/speed/data_speed.py prepare [--mb 32] [--procs 2] [--rounds 3]
    python benchmarks/speed/data_speed.py memory  [--mb 1024] [--procs 2]

loader: batches/s of DataModule on a prepared multi-shard corpus of --tokens byte tokens (made by
  `prepare` from generated text) against nanoGPT's get_batch (np.memmap re-opened per batch, random
  windows, torch.stack of per-row slices; train.bin = the shards concatenated), batch 12 x 1024,
  alternated round after round. Also the loader's tokens/s against the training tokens/s of
  baseline-small (the largest CPU preset) measured here for a few steps. Goals: >= 1.0x, >= 100x.
prepare: `prepare` throughput (tokens/s, from reading the file to finished shards) against bare
  `tokenizers` encode_batch over the same documents, already in memory, split across the same number
  of worker processes (a process pool, TOKENIZERS_PARALLELISM=false in both), BPE of 4,096 trained on
  tinyshakespeare; the text is tinyshakespeare repeated to --mb MB. Goal >= 0.8x.
memory: peak resident memory (the process and all below it, forkserver workers included, sampled
  from /proc every 20 ms) while
  preparing --mb MB of generated text, against the size of that corpus held as a Python list of
  document strings (sys.getsizeof summed, a lower bound of what the old hub reader kept). Bounded means
  the peak does not grow with the corpus: the ratio list / peak must be >= 10.
Every mode prints its raw numbers and a RESULT line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, alternate, emit, print_machine, ratios  # noqa: E402

WORDS = (
    "the of and to in is was for on that with as by at from his an were are which this be or has had not "
    "first one their its new after who they two her she been other when there all during into school time "
    "may years more most only over city some world would where later up such used many can state about "
    "national out known university united then made"
).split()


def generated_text(path: Path, n_bytes: int, seed: int = 0) -> None:
    """Paragraphs of random words, blank-line separated, written in pieces (never held whole)."""
    rng = np.random.default_rng(seed)
    vocab = np.array(WORDS)
    written = 0
    with open(path, "w") as f:
        while written < n_bytes:
            lens = rng.integers(40, 400, 200)
            words = vocab[rng.integers(0, len(vocab), int(lens.sum()))]
            docs, i = [], 0
            for n in lens:
                docs.append(" ".join(words[i : i + n]))
                i += n
            block = "\n\n".join(docs) + "\n\n"
            f.write(block)
            written += len(block)


def _prepare(src_path: Path, out: Path, tok, procs: int, shard_mb: int = 32) -> dict:
    from nexus.config import DataConfig
    from nexus.data.prepare import prepare
    from nexus.data.sources import resolve_source

    return prepare(
        resolve_source(str(src_path)),
        DataConfig(source=str(src_path)),
        tok,
        out,
        num_proc=procs,
        shard_bytes=shard_mb << 20,
        progress=False,
    )


# ----------------------------------------------------------------------------- loader
def nanogpt_get_batch(path: Path, block_size: int, batch_size: int):
    """nanoGPT train.py's get_batch (CPU branch), verbatim apart from the arguments."""
    import torch

    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix])
    return x, y


def cpu_preset_tokens_per_s(steps: int = 1) -> float:
    """Training tokens/s of baseline-small (the largest CPU preset) at its own batch: median of `steps`
    timed steps after one untimed (a step takes tens of seconds on a shared CPU)."""
    import torch

    from nexus.models import build_model
    from nexus.optim.param_groups import build_optimizer
    from nexus.presets import get_preset

    cfg = get_preset("baseline-small")
    cfg.model.vocab_size = 259
    model = build_model(cfg.model)
    opt = build_optimizer(model, cfg.train)
    B, L = cfg.train.batch_size, cfg.data.seq_len
    x = torch.randint(0, 259, (B, L))

    def step() -> None:
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = alternate({"step": step}, rounds=steps, warmup=1)["step"]
    return B * L / statistics.median(times)


def run_loader(args) -> None:
    from nexus.config import DataConfig
    from nexus.data.loader import DataModule
    from nexus.data.tokenizer import ByteTokenizer

    work = Path(tempfile.mkdtemp(prefix="nexus-loader-bench-"))
    try:
        text = work / "corpus.txt"
        generated_text(text, args.tokens)
        with StepTimer() as t:
            m = _prepare(text, work / "prep", ByteTokenizer(), args.procs)
        prep_s = t.elapsed.wall
        text.unlink()
        n_train = m["tokens"]["train"]
        print(f"prepared {n_train:,} train tokens in {len(m['shards']['train'])} shards, {prep_s:.1f} s")
        with open(work / "train.bin", "wb") as f:  # nanoGPT's single file, same tokens
            for e in m["shards"]["train"]:
                f.write((work / "prep" / e["file"]).read_bytes())
        B, L = 12, 1024
        with StepTimer() as t:
            dm = DataModule(DataConfig(source=str(work / "prep"), seq_len=L), quiet=True)
        open_s = t.elapsed.wall
        print(f"DataModule on the prepared directory ready in {open_s * 1000:.0f} ms")
        step = iter(range(1 << 62))  # nexus's batches go on through the training steps, round after round

        def nexus_batch() -> None:
            dm.global_train_batch(next(step), 0, B, 1)

        # the two loaders alternate who goes first, round after round, --batches batches each per round
        times = alternate(
            {"nexus": nexus_batch, "nanoGPT": lambda: nanogpt_get_batch(work / "train.bin", L, B)},
            args.rounds,
            calls=args.batches,
            warmup=0,
        )
        ours, ref = ([1 / t for t in times[k]] for k in ("nexus", "nanoGPT"))
        per_round = ratios(times, "nanoGPT", "nexus")  # nexus batches/s over nanoGPT's
        print(f"batches/s (batch {B} x {L}): nexus {[round(v, 1) for v in ours]}, nanoGPT {[round(v, 1) for v in ref]}")
        train_tps = cpu_preset_tokens_per_s()
        loader_tps = statistics.median(ours) * B * L
        print(
            f"loader {loader_tps:,.0f} tokens/s vs baseline-small training {train_tps:,.0f} tokens/s: "
            f"{loader_tps / train_tps:,.0f}x"
        )
        emit(
            "loader vs nanoGPT get_batch",
            per_round,
            ">= 1.0x",
            met=statistics.median(per_round) >= 1.0,
            nexus_batches_per_s=ours,
            nanogpt_batches_per_s=ref,
            train_tokens=n_train,
            open_ms=round(open_s * 1000, 1),
            loader_tokens_per_s=round(loader_tps),
            cpu_preset_train_tokens_per_s=round(train_tps),
            loader_over_training=round(loader_tps / train_tps, 1),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------- prepare
_BASE_TOK = None


def _base_init(tok_json: str) -> None:
    global _BASE_TOK
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    _BASE_TOK = Tokenizer.from_str(tok_json)


def _base_encode(docs: list[str]) -> int:
    return sum(len(e.ids) for e in _BASE_TOK.encode_batch(docs))


def run_prepare(args) -> None:
    import multiprocessing

    from nexus.data.tokenizer import BPETokenizer

    shakespeare = Path("/work/shared/data/tinyshakespeare.txt")
    base = shakespeare.read_text()
    tok = BPETokenizer.train([p for p in base.split("\n\n") if p.strip()], 4096)
    work = Path(tempfile.mkdtemp(prefix="nexus-prepare-bench-"))
    try:
        text = work / "corpus.txt"
        reps = max(1, (args.mb << 20) // len(base.encode()))
        with open(text, "w") as f:
            for _ in range(reps):
                f.write(base.strip() + "\n\n")
        docs = [d.strip() for d in text.read_text().split("\n\n") if d.strip()]
        print(f"corpus: {text.stat().st_size / 2**20:.1f} MB, {len(docs):,} documents, {args.procs} processes")
        ctx = multiprocessing.get_context("forkserver")
        n = {}

        def nexus_prepare() -> None:
            shutil.rmtree(work / "prep", ignore_errors=True)
            m = _prepare(text, work / "prep", tok, args.procs, shard_mb=max(1, args.mb // (4 * args.procs)))
            n["nexus"] = m["tokens"]["train"] + m["tokens"]["val"] - sum(m["documents"].values())  # without EOS

        def bare_encode() -> None:
            with ctx.Pool(args.procs, initializer=_base_init, initargs=(tok.tok.to_str(),)) as pool:
                chunks = [docs[i :: args.procs * 8] for i in range(args.procs * 8)]
                n["tokenizers"] = sum(pool.map(_base_encode, chunks))

        # the two alternate who goes first, round after round; every round counts the tokens it made
        rates = {"nexus": [], "tokenizers": []}

        def tokens_per_s(r: int, seconds: dict) -> None:
            for k in rates:
                rates[k].append(n[k] / seconds[k])

        alternate({"nexus": nexus_prepare, "tokenizers": bare_encode}, args.rounds, warmup=0, after_round=tokens_per_s)
        ours, ref = rates["nexus"], rates["tokenizers"]
        per_round = [a / b for a, b in zip(ours, ref)]
        print(f"tokens/s: nexus prepare {[round(v) for v in ours]}, bare encode_batch {[round(v) for v in ref]}")
        emit(
            "prepare vs bare tokenizers encode_batch",
            per_round,
            ">= 0.8x",
            met=statistics.median(per_round) >= 0.8,
            nexus_tokens_per_s=[round(v) for v in ours],
            tokenizers_tokens_per_s=[round(v) for v in ref],
            procs=args.procs,
            corpus_mb=round(text.stat().st_size / 2**20, 1),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------- memory
def _rss_tree(root: int) -> int:
    """Resident bytes of `root` and every process below it (forkserver workers are grandchildren, which
    getrusage's RUSAGE_CHILDREN never sees while they live)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            pass
    return total


def run_memory(args) -> None:
    import threading

    from nexus.data.tokenizer import ByteTokenizer

    work = Path(tempfile.mkdtemp(prefix="nexus-memory-bench-"))
    try:
        text = work / "corpus.txt"
        generated_text(text, args.mb << 20, seed=1)
        as_list = 0
        with open(text) as f:  # the corpus as a list of document strings, counted without building it
            carry = ""
            for chunk in iter(lambda: f.read(1 << 22), ""):
                parts = (carry + chunk).split("\n\n")
                carry = parts.pop()
                as_list += sum(sys.getsizeof(p) + 8 for p in parts)  # the string + its list slot
        del carry, parts, chunk
        before = _rss_tree(os.getpid())
        peak, done = [before], threading.Event()

        def sample():
            while not done.wait(0.02):
                peak[0] = max(peak[0], _rss_tree(os.getpid()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with StepTimer() as t:
            m = _prepare(text, work / "prep", ByteTokenizer(), args.procs, shard_mb=args.shard_mb)
        dt = t.elapsed.wall
        done.set()
        sampler.join()
        tokens = m["tokens"]["train"] + m["tokens"]["val"]
        print(
            f"prepared {text.stat().st_size / 2**20:.0f} MB ({tokens:,} tokens) in {dt:.0f} s with {args.procs} "
            f"process(es), shards of {args.shard_mb}M characters; peak resident memory of the process tree "
            f"{peak[0] / 2**20:.0f} MB (before preparing: {before / 2**20:.0f} MB); the corpus as a list of "
            f"strings: {as_list / 2**20:.0f} MB"
        )
        emit(
            "prepare peak memory vs corpus as a list",
            [as_list / peak[0]],
            ">= 10x (bounded)",
            met=as_list / peak[0] >= 10,
            peak_mb=round(peak[0] / 2**20),
            before_mb=round(before / 2**20),
            list_mb=round(as_list / 2**20),
            corpus_mb=round(text.stat().st_size / 2**20),
            shard_mb=args.shard_mb,
            procs=args.procs,
            seconds=round(dt),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["loader", "prepare", "memory"])
    ap.add_argument("--tokens", type=int, default=100_000_000, help="loader: corpus size in byte tokens")
    ap.add_argument("--batches", type=int, default=200, help="loader: batches per round and side")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2, help="worker processes (both sides)")
    ap.add_argument("--mb", type=int, default=32, help="prepare/memory: corpus size in MB")
    ap.add_argument("--shard-mb", type=int, default=8, help="memory: characters per shard, in millions")
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    {"loader": run_loader, "prepare": run_prepare, "memory": run_memory}[args.mode](args)


if __name__ == "__main__":
    main()
