"""The NEXUS v4.1 training script's interface (seed 004, `train_nexus.py`) on top of the nexus Trainer.

    MODEL_SIZE=small BATCH_SIZE=4 GRAD_ACCUM=8 TOTAL_STEPS=20000 python -m nexus.train.env_entry

Every environment variable of the seed, with the seed's default, maps onto a `nexus-<size>` preset
plus overrides (the same run as `nexus train --preset nexus-small --train.batch_size 4 ...`). A few
nexus additions (DATASET, TOKENIZER, INIT_CHECKPOINT, DEVICE, SEED) make offline and local runs
possible. Bad values print one line naming the variable and exit with code 2.

Every log line carries memory: CUDA allocated/reserved on GPU, process RSS on CPU. A run directory
that already holds checkpoints is resumed from the newest one (crash protection, as in the seed).
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from ..runtime import tune_cpu_allocator

SIZES = ("tiny", "small", "base", "medium", "micro")  # micro: nexus addition for smoke tests (nexus-micro preset)
PHASES = ("pretrain", "sft")
HUB_DATA = {"pretrain": "hf:HuggingFaceFW/fineweb-edu:sample-10BT", "sft": "hf:HuggingFaceTB/smol-smoltalk"}
PHASE_LR = {"pretrain": 3e-4, "sft": 1e-4}  # the seed's hyper-parameter table
PHASE_WARMUP = {"pretrain": 500, "sft": 100}
PROMPTS = ("The future of AI is", "Once upon a time", "The most important idea in science is", "def main():")
CHAT_PROMPTS = ("Hi! Who are you?", "What is the capital of France?", "Write a haiku about rain.",
                "How do I sort a list in Python?")


@dataclass
class Var:
    name: str
    default: object  # None: depends on PHASE
    kind: str  # int | float | str | choice
    minimum: float | None = None  # smallest valid numeric value
    choices: tuple = ()
    help: str = ""


VARS = [
    Var("MODEL_SIZE", "small", "choice", choices=SIZES, help="preset: tiny/small/base/medium (micro: a 70k-param smoke-test model)"),
    Var("BATCH_SIZE", 4, "int", 1, help="micro batch size"),
    Var("GRAD_ACCUM", 8, "int", 1, help="gradient accumulation (effective batch = BS x GA)"),
    Var("SEQ_LEN", 256, "int", 2, help="sequence length"),
    Var("LR", None, "float", 0, help="peak learning rate (3e-4 pretrain, 1e-4 sft)"),
    Var("WARMUP_STEPS", None, "int", 0, help="LR warmup steps (500 pretrain, 100 sft)"),
    Var("TOTAL_STEPS", 20000, "int", 1, help="total optimizer steps"),
    Var("LOG_EVERY", 10, "int", 1, help="print loss every N steps"),
    Var("SAVE_EVERY", 1000, "int", 1, help="save a checkpoint every N steps"),
    Var("EVAL_EVERY", 500, "int", 1, help="validation loss + 4 sample generations every N steps"),
    Var("N_SUP", 0, "int", 0, help="override deep supervision steps (0 = preset)"),
    Var("T_INNER", 0, "int", 0, help="override depth recurrence iterations (0 = preset)"),
    Var("PHASE", "pretrain", "choice", choices=PHASES, help="pretrain (FineWeb-Edu) or sft (smol-smoltalk)"),
    Var("OUTPUT_DIR", "./nexus-out", "str", help="where checkpoints and metrics.jsonl go"),
    Var("HUB_MODEL_ID", "", "str", help="push the final checkpoint to this HF Hub repo (owner/name)"),
    Var("MAX_SAMPLES", 0, "int", 0, help="limit dataset size in documents (0 = no limit)"),
    # nexus additions
    Var("DATASET", None, "str", help="embedded | local .txt/.jsonl/.parquet | hf:<name>[:<config>] (default: the seed's hub set for PHASE)"),
    Var("TOKENIZER", "byte", "str", help="byte | bpe | path to tokenizer.json"),
    Var("INIT_CHECKPOINT", "", "str", help="start from this nexus checkpoint (e.g. SFT from a pretrain run)"),
    Var("DEVICE", "auto", "str", help="auto | cpu | cuda | cuda:N"),
    Var("SEED", 0, "int", 0, help="random seed"),
    Var("SAMPLE_TOKENS", 64, "int", 1, help="tokens per sample generation"),
]


class EnvError(ConfigError):
    """A bad environment variable; the message names it, its value and what is valid."""


def _parse(var: Var, raw: str):
    if var.kind == "choice":
        if raw not in var.choices:
            raise EnvError(f"{var.name}={raw!r} (valid: {'|'.join(var.choices)})")
        return raw
    if var.kind == "str":
        return raw
    try:
        value = int(raw) if var.kind == "int" else float(raw)
    except ValueError:
        raise EnvError(f"{var.name}={raw!r} is not {'an integer' if var.kind == 'int' else 'a number'} "
                       f"(valid: {_valid(var)})") from None
    if var.kind == "float" and not math.isfinite(value):
        raise EnvError(f"{var.name}={raw!r} (valid: {_valid(var)})")
    if var.minimum is not None and (value <= 0 if var.minimum == 0 and var.kind == "float" else value < var.minimum):
        raise EnvError(f"{var.name}={raw!r} (valid: {_valid(var)})")
    return value


def _valid(var: Var) -> str:
    if var.kind == "float":
        return "a number > 0"
    return f"an integer >= {int(var.minimum)}" + (" (0 = default)" if var.minimum == 0 else "")


def read_env(environ=None) -> dict:
    """Environment -> {VAR: value}, defaults filled in (phase-dependent ones resolved)."""
    environ = os.environ if environ is None else environ
    out = {}
    for var in VARS:
        raw = environ.get(var.name)
        if raw is None or raw.strip() == "" and var.kind != "str":
            out[var.name] = var.default
        else:
            out[var.name] = _parse(var, raw.strip())
    phase = out["PHASE"]
    out["LR"] = out["LR"] if out["LR"] is not None else PHASE_LR[phase]
    out["WARMUP_STEPS"] = out["WARMUP_STEPS"] if out["WARMUP_STEPS"] is not None else PHASE_WARMUP[phase]
    out["DATASET"] = out["DATASET"] or HUB_DATA[phase]
    hub = out["HUB_MODEL_ID"]
    if hub and (hub.count("/") != 1 or not all(hub.split("/"))):
        raise EnvError(f"HUB_MODEL_ID={hub!r} (valid: owner/name, e.g. username/nexus-small)")
    return out


def build_run_config(env: dict):
    """The RunConfig the variables describe (preset nexus-<MODEL_SIZE> plus overrides)."""
    from ..presets import get_preset

    cfg = get_preset(f"nexus-{env['MODEL_SIZE']}")
    if env["INIT_CHECKPOINT"]:
        from ..checkpoint import read_config

        cfg.model = read_config(env["INIT_CHECKPOINT"]).model  # the checkpoint's shapes win over MODEL_SIZE
    m, d, t = cfg.model, cfg.data, cfg.train
    if env["N_SUP"]:
        m.recurrent.n_sup = env["N_SUP"]
    if env["T_INNER"]:
        m.recurrent.t_inner = env["T_INNER"]
    m.max_seq_len = max(m.max_seq_len, env["SEQ_LEN"])
    d.source, d.tokenizer, d.seq_len = env["DATASET"], env["TOKENIZER"], env["SEQ_LEN"]
    d.chat = env["PHASE"] == "sft"
    d.max_documents = env["MAX_SAMPLES"]
    t.batch_size, t.grad_accum, t.lr, t.warmup_steps = env["BATCH_SIZE"], env["GRAD_ACCUM"], env["LR"], env["WARMUP_STEPS"]
    t.steps, t.log_every, t.save_every = env["TOTAL_STEPS"], env["LOG_EVERY"], env["SAVE_EVERY"]
    t.eval_every = t.sample_every = env["EVAL_EVERY"]
    t.eval_batches = 4
    t.out_dir, t.device, t.seed, t.sample_tokens = env["OUTPUT_DIR"], env["DEVICE"], env["SEED"], env["SAMPLE_TOKENS"]
    cfg.preset = f"nexus-{env['MODEL_SIZE']}" + ("-sft" if d.chat else "")
    return cfg.validate()


def memory_text(device) -> str:
    from .trainer import memory_stats

    mem = memory_stats(device)
    if "cuda_alloc_mb" in mem:
        return f"mem alloc {mem['cuda_alloc_mb']:.0f} MB reserved {mem['cuda_reserved_mb']:.0f} MB"
    return f"mem rss {mem['rss_mb']:.0f} MB"


def _resize_vocab(model, vocab_size: int) -> None:
    """Grow the (tied) embedding for new special tokens: byte pretrain (259) -> byte chat SFT (262)."""
    import torch

    old = model.embed.weight.data
    if old.shape[0] >= vocab_size:
        return
    new = torch.empty(vocab_size, old.shape[1], dtype=old.dtype).normal_(0, model.cfg.init_std)
    new[: old.shape[0]] = old
    model.embed = torch.nn.Embedding.from_pretrained(new, freeze=False)
    if model.lm_head is not None:
        head = torch.empty(vocab_size, old.shape[1], dtype=old.dtype).normal_(0, model.cfg.init_std)
        head[: model.lm_head.weight.shape[0]] = model.lm_head.weight.data
        model.lm_head = torch.nn.Linear(old.shape[1], vocab_size, bias=False)
        model.lm_head.weight.data.copy_(head)
    model.cfg.vocab_size = vocab_size


def make_trainer_class():
    from .trainer import Trainer

    class EnvTrainer(Trainer):
        """The nexus Trainer with the seed's console output: memory in every line, 4 samples per eval."""

        def log(self, record: dict) -> None:
            super().log(record)
            if not self.is_main:
                return
            mem = memory_text(self.device)
            if "val_loss" in record:
                print(f"step {record['step']:>6} | val loss {record['val_loss']:.4f} "
                      f"(ppl {math.exp(min(record['val_loss'], 50)):.2f}) | {mem}", flush=True)
            else:
                gn = f" | grad {record['grad_norm']:.3f}" if "grad_norm" in record else ""
                print(f"step {record['step']:>6}/{self.cfg.train.steps} | loss {record['loss']:.4f}{gn} | "
                      f"lr {record['lr']:.2e} | {record['tokens_per_s']:.0f} tok/s | {mem}", flush=True)

        def sample(self) -> str:
            import torch

            tok = self.data.tokenizer
            rng = torch.get_rng_state()
            texts = []
            for i, prompt in enumerate(CHAT_PROMPTS if self.cfg.data.chat else PROMPTS):
                if self.cfg.data.chat:
                    from ..data.chat import chat_prompt_ids

                    ids = chat_prompt_ids(tok, [{"role": "user", "content": prompt}])
                else:
                    ids = tok.encode(prompt) or [tok.eos_id]
                g = torch.Generator(device=self.device).manual_seed(self.cfg.train.seed + i)
                out = self.model.generate(torch.tensor([ids], device=self.device), max_new_tokens=self.cfg.train.sample_tokens,
                                          temperature=0.8, top_p=0.9, eos_id=tok.eos_id, generator=g)
                texts.append(f"{prompt} -> {tok.decode(out[0, len(ids):].tolist())}")
            torch.set_rng_state(rng)  # sampling must not perturb the training RNG (exact resume)
            if self.is_main:
                print(f"--- samples @ step {self.step} ---", flush=True)
                for t in texts:
                    print("  " + t.replace("\n", " "), flush=True)
            return texts[0]

    return EnvTrainer


def check_hub_access(repo_id: str) -> None:
    """Fail before training, not after hours of it, when the Hub cannot be reached or we are not logged in."""
    try:
        from huggingface_hub import HfApi

        HfApi().whoami()
    except Exception as e:  # offline, no token, HTTP errors: one line each
        raise EnvError(f"HUB_MODEL_ID={repo_id!r}: cannot push ({type(e).__name__}: {_first_line(e)}); offline or not "
                       "logged in? unset HUB_MODEL_ID to train without pushing") from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:120] if text else "no details"


def push_to_hub(checkpoint: str, repo_id: str) -> str:
    """Upload a checkpoint directory; any failure (offline, no token) becomes one EnvError line."""
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(folder_path=checkpoint, repo_id=repo_id)
    except Exception as e:  # huggingface_hub raises many types (offline, auth, HTTP); one line each
        raise EnvError(f"HUB_MODEL_ID={repo_id!r}: push failed ({type(e).__name__}: {_first_line(e)}); "
                       f"offline or not logged in? the checkpoint is kept at {checkpoint}") from None
    return f"https://huggingface.co/{repo_id}"


def _refuse_grown_run(checkpoint) -> None:
    """This script trains without growth hooks (the train package cannot import growth), so a run that
    grew or still has a growth ahead would lose its re-warmup or its growth: send it to `nexus train`."""
    from ..checkpoint import read_config

    ckpt_cfg = read_config(checkpoint, flag="OUTPUT_DIR")
    if ckpt_cfg.growth_history or ckpt_cfg.train.hook("growth"):
        raise ConfigError(f"OUTPUT_DIR={str(Path(checkpoint).parent)!r} holds a run with growth (its checkpoint "
                          f"{str(checkpoint)!r} records a growth or a growth ahead), which this script does not "
                          f"carry (valid: an OUTPUT_DIR of a run without growth; resume this one with "
                          f"`nexus train --resume {checkpoint}`)")


def run(environ=None) -> dict:
    env = read_env(environ)
    cfg = build_run_config(env)
    if env["HUB_MODEL_ID"]:
        check_hub_access(env["HUB_MODEL_ID"])
    Trainer = make_trainer_class()
    from ..outdir import TRAIN_RUN, check_output
    from .run_dir import latest_checkpoint

    # An earlier run here is resumed from its newest checkpoint (the seed's crash protection); a
    # directory holding anything else is refused, never written into.
    check_output(cfg.train.out_dir, TRAIN_RUN, flag="OUTPUT_DIR", resume=True)
    resume = latest_checkpoint(cfg.train.out_dir)
    print(f"nexus env entry: MODEL_SIZE={env['MODEL_SIZE']} PHASE={env['PHASE']} DATASET={env['DATASET']} "
          f"N_SUP={cfg.model.recurrent.n_sup} T_INNER={cfg.model.recurrent.t_inner} "
          f"effective batch={env['BATCH_SIZE'] * env['GRAD_ACCUM']} OUTPUT_DIR={env['OUTPUT_DIR']}"
          + (f" | resuming from {resume}" if resume else ""), flush=True)
    if resume:
        _refuse_grown_run(resume)
        trainer = Trainer(cfg, resume=str(resume), quiet=True)
    elif env["INIT_CHECKPOINT"]:
        from ..checkpoint import load_checkpoint

        model, _, tok = load_checkpoint(env["INIT_CHECKPOINT"])
        model.cfg = cfg.model  # n_sup / t_inner overrides apply to the loaded weights
        init_tok = tok if tok.kind == "bpe" else None  # byte models switch to the chat byte tokenizer for SFT
        vocab = _chat_vocab(cfg, init_tok)
        _resize_vocab(model, vocab)
        cfg.model.vocab_size = model.embed.weight.shape[0]
        trainer = Trainer(cfg, quiet=True, init_model=model, init_tokenizer=init_tok)
    else:
        trainer = Trainer(cfg, quiet=True)
    from .distributed import shutdown

    try:
        result = trainer.fit()
    finally:
        trainer.release_parallel_wrapper()
        shutdown()
    if trainer.is_main:
        print(f"final: val loss {result['val_loss']:.4f} (ppl {result['val_ppl']:.2f}) | checkpoint {result['checkpoint']} "
              f"| {memory_text(trainer.device)}", flush=True)
        if env["HUB_MODEL_ID"]:
            url = push_to_hub(result["checkpoint"], env["HUB_MODEL_ID"])
            print(f"pushed to {url}", flush=True)
    return result


def _chat_vocab(cfg, tok) -> int:
    if tok is not None:
        return tok.vocab_size
    if cfg.data.tokenizer == "byte":
        from ..data.chat import ChatByteTokenizer
        from ..data.tokenizer import ByteTokenizer

        return (ChatByteTokenizer() if cfg.data.chat else ByteTokenizer()).vocab_size
    return cfg.model.vocab_size


def usage() -> str:
    lines = ["usage: [VAR=value ...] python -m nexus.train.env_entry   (or: nexus-train-env)", "", "variables:"]
    for v in VARS:
        default = {"LR": "3e-4 / 1e-4 (sft)", "WARMUP_STEPS": "500 / 100 (sft)", "DATASET": "hub set of PHASE"}.get(v.name, v.default)
        lines.append(f"  {v.name:<16} default {str(default)!r:<22} {v.help}")
    return "\n".join(lines)


def main(argv=None, environ=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tune_cpu_allocator()
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv:
        print(f"nexus-train-env: error: unexpected arguments {argv!r} (valid: none; configure with environment "
              "variables, see --help)", file=sys.stderr)
        return 2
    from .trainer import TrainingAborted

    try:
        run(environ)
    except ConfigError as e:
        print(f"nexus-train-env: error: {e}", file=sys.stderr)
        return 2
    except TrainingAborted as e:
        print(f"nexus-train-env: training aborted: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nexus-train-env: interrupted", file=sys.stderr)
        return 130
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
