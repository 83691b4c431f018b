"""The NEXUS v4.1 training script's interface (spec 004, `train_nexus.py`): environment variables
translated into a `nexus train` command line, run through the same front door (cli/train.py).

    MODEL_SIZE=small BATCH_SIZE=4 GRAD_ACCUM=8 TOTAL_STEPS=20000 python -m nexus.cli.env_train

Every environment variable of the v4.1 script, with its default, maps onto `nexus train --preset
nexus-<size>` plus overrides (`train_args` shows the command). A few nexus additions (DATASET,
TOKENIZER, INIT_CHECKPOINT, DEVICE, SEED) make offline and local runs possible. Bad values print one
line naming the variable and exit with code 2; errors of the command name the variable behind a flag.

As `nexus train --resume auto`, a run directory that already holds checkpoints is resumed from the
newest one (crash protection, as in the v4.1 script), growth included; INIT_CHECKPOINT is `--init-from` (with
`--resize-vocab`: byte pretraining -> chat SFT adds 3 special tokens); HUB_MODEL_ID is `--push-to-hub`.
Every log line carries memory: CUDA allocated/reserved on GPU, process RSS on CPU.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError
from ..runtime import tune_cpu_allocator

SIZES = ("tiny", "small", "base", "medium", "micro")  # micro: nexus addition for smoke tests (nexus-micro preset)
PHASES = ("pretrain", "sft")
HUB_DATA = {"pretrain": "hf:HuggingFaceFW/fineweb-edu:sample-10BT", "sft": "hf:HuggingFaceTB/smol-smoltalk"}
PHASE_LR = {"pretrain": 3e-4, "sft": 1e-4}  # the v4.1 script's hyper-parameter table
PHASE_WARMUP = {"pretrain": 500, "sft": 100}
PROMPTS = ("The future of AI is", "Once upon a time", "The most important idea in science is", "def main():")
CHAT_PROMPTS = (
    "Hi! Who are you?",
    "What is the capital of France?",
    "Write a haiku about rain.",
    "How do I sort a list in Python?",
)


@dataclass
class Var:
    name: str
    default: object  # None: depends on PHASE
    kind: str  # int | float | str | choice
    minimum: float | None = None  # smallest valid numeric value
    choices: tuple = ()
    help: object = ""  # str, or a function giving it when usage() is printed (a list built from a registry)


def _dataset_help() -> str:
    from ..data.readers import valid_sources  # the registered sources, listed when asked for, not at import

    return f"{valid_sources()} (default: the v4.1 script's hub set for PHASE)"


VARS = [
    Var(
        "MODEL_SIZE",
        "small",
        "choice",
        choices=SIZES,
        help="preset: tiny/small/base/medium (micro: a 70k-param smoke-test model)",
    ),
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
    Var("DATASET", None, "str", help=_dataset_help),
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
        raise EnvError(
            f"{var.name}={raw!r} is not {'an integer' if var.kind == 'int' else 'a number'} (valid: {_valid(var)})"
        ) from None
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
    out: dict[str, Any] = {}  # each variable's own type (Var.kind)
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


# a flag of `nexus train` -> the variable that sets it, for error messages
FLAG_VARS = {"--push-to-hub": "HUB_MODEL_ID", "--init-from": "INIT_CHECKPOINT", "--out": "OUTPUT_DIR"}


def train_args(env: dict, given=()) -> list[str]:
    """The `nexus train` arguments the variables describe. given: the variables set in the environment
    (an INIT_CHECKPOINT keeps its own tokenizer unless TOKENIZER is given)."""
    size = env["MODEL_SIZE"]
    args = ["train", "--preset", f"nexus-{size}", "--resume", "auto", "--quiet", "--out", env["OUTPUT_DIR"]]
    if env["INIT_CHECKPOINT"]:
        args += ["--init-from", env["INIT_CHECKPOINT"], "--resize-vocab"]
    if env["HUB_MODEL_ID"]:
        args += ["--push-to-hub", env["HUB_MODEL_ID"]]
    fields = {
        "data.source": env["DATASET"],
        "data.seq_len": env["SEQ_LEN"],
        "data.chat": env["PHASE"] == "sft",
        "data.max_documents": env["MAX_SAMPLES"],
        "train.batch_size": env["BATCH_SIZE"],
        "train.grad_accum": env["GRAD_ACCUM"],
        "train.lr": env["LR"],
        "train.warmup_steps": env["WARMUP_STEPS"],
        "train.steps": env["TOTAL_STEPS"],
        "train.log_every": env["LOG_EVERY"],
        "train.save_every": env["SAVE_EVERY"],
        "train.eval_every": env["EVAL_EVERY"],
        "train.sample_every": env["EVAL_EVERY"],
        "train.eval_batches": 4,
        "train.device": env["DEVICE"],
        "train.seed": env["SEED"],
        "train.sample_tokens": env["SAMPLE_TOKENS"],
    }
    if not env["INIT_CHECKPOINT"] or "TOKENIZER" in given:
        fields["data.tokenizer"] = env["TOKENIZER"]
    if env["N_SUP"]:
        fields["model.arch.n_sup"] = env["N_SUP"]
    if env["T_INNER"]:
        fields["model.arch.t_inner"] = env["T_INNER"]
    if env["SEQ_LEN"] > _base_model(env).max_seq_len:
        fields["model.max_seq_len"] = env["SEQ_LEN"]
    for k, v in fields.items():
        args += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
    return args


def _base_model(env: dict):
    """The model config the run starts from: INIT_CHECKPOINT's, else the preset's."""
    if env["INIT_CHECKPOINT"]:
        from ..checkpoint import read_config

        return read_config(env["INIT_CHECKPOINT"], flag="INIT_CHECKPOINT").model
    from ..presets import get_preset

    return get_preset(f"nexus-{env['MODEL_SIZE']}").model


def parse_train_args(argv: list[str]):
    """(argparse namespace, dotted overrides) of a `nexus train` command line, as `nexus` parses it."""
    from . import build_parser
    from .train import flag_overrides

    args, extra = build_parser("train").parse_known_args(argv)
    return args, flag_overrides(args, extra)[0]


def build_run_config(env: dict):
    """The RunConfig of a new run the variables describe (preset nexus-<MODEL_SIZE> plus overrides)."""
    from .common import build_config

    return build_config(*parse_train_args(train_args(env)))


def memory_text(device) -> str:
    from ..train.trainer import memory_stats

    mem = memory_stats(device)
    if "cuda_alloc_mb" in mem:
        return f"mem alloc {mem['cuda_alloc_mb']:.0f} MB reserved {mem['cuda_reserved_mb']:.0f} MB"
    return f"mem rss {mem['rss_mb']:.0f} MB"


def make_trainer_class():
    from ..train.trainer import Trainer

    class EnvTrainer(Trainer):
        """The nexus Trainer with the v4.1 script's console output: memory in every line, 4 samples per eval."""

        def log(self, record: dict) -> None:
            super().log(record)
            if not self.is_main:
                return
            mem = memory_text(self.device)
            if "val_loss" in record:
                print(
                    f"step {record['step']:>6} | val loss {record['val_loss']:.4f} "
                    f"(ppl {math.exp(min(record['val_loss'], 50)):.2f}) | {mem}",
                    flush=True,
                )
            elif record.get("event") == "growth":
                # the record without the pre-growth model config (a screenful): that stays in config.json
                short = {k: v for k, v in self.cfg.growth_history[-1].items() if k != "model_before"}
                print(f"step {record['step']:>6} | grew: {short} | {mem}", flush=True)
            elif "loss" in record:  # other records (post-growth diagnostics) are in metrics.jsonl only
                gn = f" | grad {record['grad_norm']:.3f}" if "grad_norm" in record else ""
                print(
                    f"step {record['step']:>6}/{self.cfg.train.steps} | loss {record['loss']:.4f}{gn} | "
                    f"lr {record['lr']:.2e} | {record['tokens_per_s']:.0f} tok/s | {mem}",
                    flush=True,
                )

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
                out = self.model.generate(
                    torch.tensor([ids], device=self.device),
                    max_new_tokens=self.cfg.train.sample_tokens,
                    temperature=0.8,
                    top_p=0.9,
                    eos_id=tok.eos_id,
                    generator=g,
                )
                texts.append(f"{prompt} -> {tok.decode(out[0, len(ids) :].tolist())}")
            torch.set_rng_state(rng)  # sampling must not perturb the training RNG (exact resume)
            if self.is_main:
                print(f"--- samples @ step {self.step} ---", flush=True)
                for t in texts:
                    print("  " + t.replace("\n", " "), flush=True)
            return texts[0]

    return EnvTrainer


def run(environ=None) -> dict:
    from .train import execute, plan_run

    environ = os.environ if environ is None else environ
    env = read_env(environ)
    args, extra = parse_train_args(train_args(env, given=[k for k, v in environ.items() if v.strip()]))
    plan = plan_run(args, extra, say=lambda msg: None)  # the line below says whether it resumes
    cfg = plan.cfg
    print(
        f"nexus env entry: MODEL_SIZE={env['MODEL_SIZE']} PHASE={env['PHASE']} DATASET={env['DATASET']} "
        f"N_SUP={getattr(cfg.model.arch, 'n_sup', '-')} T_INNER={getattr(cfg.model.arch, 't_inner', '-')} "
        f"effective batch={cfg.train.batch_size * cfg.train.grad_accum} OUTPUT_DIR={env['OUTPUT_DIR']}"
        + (f" | resuming from {plan.resume}" if plan.resume else ""),
        flush=True,
    )
    try:
        result, trainer = execute(plan, quiet=True, trainer_class=make_trainer_class(), push_to_hub=args.push_to_hub)
    finally:
        plan.release()
    if trainer.is_main:
        print(
            f"final: val loss {result['val_loss']:.4f} (ppl {result['val_ppl']:.2f}) | "
            f"checkpoint {result['checkpoint']} "
            f"| {memory_text(trainer.device)}" + (f" | pushed to {result['pushed']}" if "pushed" in result else ""),
            flush=True,
        )
    return result


def env_error(e: ConfigError) -> EnvError:
    """A `nexus train` error with each flag named by the variable that set it."""
    text = str(e)
    for flag, var in FLAG_VARS.items():
        text = text.replace(f"{flag}=", f"{var}=").replace(f"drop {flag}", f"unset {var}")
    return EnvError(text)


def usage() -> str:
    lines = ["usage: [VAR=value ...] python -m nexus.cli.env_train   (or: nexus-train-env)", "", "variables:"]
    for v in VARS:
        default = {"LR": "3e-4 / 1e-4 (sft)", "WARMUP_STEPS": "500 / 100 (sft)", "DATASET": "hub set of PHASE"}.get(
            v.name, v.default
        )
        lines.append(f"  {v.name:<16} default {str(default)!r:<22} {v.help() if callable(v.help) else v.help}")
    return "\n".join(lines)


def main(argv=None, environ=None) -> int:
    from . import run_guarded

    argv = sys.argv[1:] if argv is None else argv
    tune_cpu_allocator()
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv:
        print(
            f"nexus-train-env: error: unexpected arguments {argv!r} (valid: none; configure with environment "
            "variables, see --help)",
            file=sys.stderr,
        )
        return 2

    def train() -> int:
        try:
            run(environ)
        except EnvError:
            raise
        except ConfigError as e:
            raise env_error(e) from None
        return 0

    return run_guarded("nexus-train-env", train)


def entry() -> None:
    from ..console import keep_running_without_reader

    keep_running_without_reader()  # a closed stdout never stops the run (nexus/console.py)
    sys.exit(main())


if __name__ == "__main__":
    entry()
