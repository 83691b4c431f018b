"""`nexus eval`: validation perplexity of a checkpoint (plus synthetic tasks and lm-eval tasks)."""

from __future__ import annotations

import json

from .common import DefaultsHelpFormatter, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "eval",
        formatter_class=DefaultsHelpFormatter,
        help="evaluate a checkpoint (perplexity, synthetic tasks, lm-eval tasks)",
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="nexus checkpoint directory")
    p.add_argument("--batches", type=positive_int("--batches"), default=16, help="validation micro-batches")
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=8, help="sequences per micro-batch")
    p.add_argument(
        "--data",
        default=None,
        metavar="SOURCE",
        help="score every document of SOURCE (a file, folder, glob, list, prepared directory, stdlib, "
        "embedded, hf:<name>): loss (nats per token), perplexity and, where the byte counts are "
        "known (not for .bin token files), bits per byte (default: a quick estimate from "
        "--batches x --batch-size windows of the run's validation split)",
    )
    p.add_argument(
        "--split",
        choices=["all", "val"],
        default=None,
        help="with --data: all documents (default) or the document-level validation split; alone: the run's "
        "own data, whole (val)",
    )
    p.add_argument(
        "--window",
        type=positive_int("--window"),
        default=None,
        help="tokens per scored window (default: the run's data.seq_len)",
    )
    p.add_argument(
        "--stride",
        type=positive_int("--stride"),
        default=None,
        help="new tokens scored per window (default = --window: disjoint windows, lm-eval's rolling "
        "convention; smaller: sliding windows with more context)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    p.add_argument(
        "--task",
        choices=["mqar", "khop", "induction"],
        default=None,
        help="accuracy on a synthetic task instead of perplexity (options from the run's data.synthetic)",
    )
    p.add_argument(
        "--lm-eval",
        default=None,
        metavar="TASKS",
        help="comma-separated lm-evaluation-harness tasks instead of perplexity (needs `pip install 'nexus[eval]'`)",
    )
    p.add_argument(
        "--lm-eval-include", default=None, metavar="DIR", help="directory of local lm-eval task YAMLs (works offline)"
    )
    p.add_argument(
        "--lm-eval-limit", type=positive_int("--lm-eval-limit"), default=None, help="at most N examples per task"
    )
    p.add_argument(
        "--lm-eval-fewshot",
        type=int,
        default=None,
        metavar="K",
        help="few-shot examples per prompt (none: the task's own number)",
    )
    p.set_defaults(func=run, accepts_overrides=True)


def run(args, extra) -> int:
    from ..checkpoint import load_checkpoint
    from ..config_overrides import parse_overrides
    from ..eval.perplexity import perplexity

    if args.lm_eval:
        return _run_lm_eval(args)
    model, cfg, tok = load_checkpoint(args.checkpoint)
    data_overrides = [a for a in extra]
    parse_overrides(cfg, data_overrides)  # e.g. --data.source other.txt to evaluate on other text
    cfg.validate()
    if args.task:
        from ..eval.synthetic_eval import evaluate_synthetic

        res = evaluate_synthetic(model, cfg, args.task, args.batches, args.batch_size)
        print(
            json.dumps(res)
            if args.json
            else f"{res['task']} accuracy {res['accuracy']:.4f} over {res['scored']} scored positions"
        )
        return 0
    if args.data is not None or args.split is not None:
        return _run_whole_text(args, model, cfg, tok)
    res = perplexity(model, cfg, tok, args.batches, args.batch_size)
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"validation loss {res['val_loss']:.4f} | perplexity {res['val_ppl']:.2f} | {res['tokens']} tokens "
            f"(estimate: {args.batches} x {args.batch_size} windows of the validation split; "
            "--split val scores all of it)"
        )
    return 0


def _run_whole_text(args, model, cfg, tok) -> int:
    from ..config import ConfigError
    from ..eval.whole_text import evaluate_source

    window = args.window or cfg.data.seq_len
    if window > cfg.model.max_seq_len:
        raise ConfigError(f"--window={window} (valid: at most the model's max_seq_len, {cfg.model.max_seq_len})")
    stride = min(args.stride or window, window)
    split = args.split or ("all" if args.data is not None else "val")
    res = evaluate_source(model, cfg, tok, args.data or cfg.data.source, split, window, stride, args.batch_size)
    if args.json:
        print(json.dumps(res))
        return 0
    how = (
        f"disjoint windows of {window} tokens (lm-eval rolling)"
        if res["windows"] == "disjoint"
        else f"sliding windows of {window} tokens, stride {stride}"
    )
    words = f" | word perplexity {res['word_perplexity']:.2f}" if res["word_perplexity"] is not None else ""
    if res["bits_per_byte"] is None:  # token files: their byte counts are unknown, so no bits per byte is printed
        print(
            f"{res['source']} ({split}): loss {res['loss']:.4f} nats per token | "
            f"perplexity {res['perplexity']:.2f} | bits per byte: not computed (token files hold no byte counts; "
            f"a text source or a `nexus data prepare` directory has them) | {res['documents']:,} documents, "
            f"{res['tokens']:,} tokens | {how}"
        )
        return 0
    print(
        f"{res['source']} ({split}): loss {res['loss']:.4f} nats per token | perplexity {res['perplexity']:.2f} | "
        f"bits per byte {res['bits_per_byte']:.4f}{words} | {res['documents']:,} documents, {res['tokens']:,} tokens, "
        f"{res['bytes']:,} bytes | {how}"
    )
    return 0


def _run_lm_eval(args) -> int:
    """lm-eval tasks through nexus.eval.lm_eval_adapter; unknown tasks fail before the model loads."""
    from ..checkpoint import load_checkpoint
    from ..eval.lm_eval_adapter import NexusLM, evaluate_tasks, task_manager

    tasks = [t for t in args.lm_eval.split(",") if t.strip()]
    tm = task_manager(tasks, args.lm_eval_include)
    model, _, tok = load_checkpoint(args.checkpoint)
    res = evaluate_tasks(
        NexusLM(model, tok, batch_size=args.batch_size),
        tasks,
        limit=args.lm_eval_limit,
        num_fewshot=args.lm_eval_fewshot,
        tm=tm,
    )
    if args.json:
        print(json.dumps(res))
    else:
        for task, metrics in res.items():
            print(
                f"{task}: "
                + " | ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
            )
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("eval", __name__)
