"""`nexus eval`: validation perplexity of a checkpoint (plus synthetic tasks and lm-eval tasks)."""
from __future__ import annotations

import json
import math

from .common import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint (perplexity, synthetic tasks, lm-eval tasks)")
    p.add_argument("--checkpoint", required=True, metavar="DIR")
    p.add_argument("--batches", type=positive_int("--batches"), default=16, help="validation micro-batches")
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=8)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    p.add_argument("--task", choices=["mqar", "khop", "induction"], default=None,
                   help="accuracy on a synthetic task instead of perplexity (options from the run's data.synthetic)")
    p.set_defaults(func=run, accepts_overrides=True)


def perplexity(model, cfg, tok, n_batches: int, batch_size: int) -> dict:
    import torch

    from ..data.loader import DataModule

    data = DataModule(cfg.data, seed=cfg.train.seed, tokenizer=tok)
    tot, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for x, y in data.val_batches(n_batches, batch_size):
            out = model(x, labels=y)
            tot += float(out.ce_loss) * out.n_tokens
            n += out.n_tokens
    loss = tot / max(n, 1)
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50)), "tokens": n}


def run(args, extra) -> int:
    from ..checkpoint import load_checkpoint
    from ..config import parse_overrides

    model, cfg, tok = load_checkpoint(args.checkpoint)
    data_overrides = [a for a in extra]
    parse_overrides(cfg, data_overrides)  # e.g. --data.source other.txt to evaluate on other text
    cfg.validate()
    if args.task:
        from ..eval.synthetic_eval import evaluate_synthetic

        res = evaluate_synthetic(model, cfg, args.task, args.batches, args.batch_size)
        print(json.dumps(res) if args.json else
              f"{res['task']} accuracy {res['accuracy']:.4f} over {res['scored']} scored positions")
        return 0
    res = perplexity(model, cfg, tok, args.batches, args.batch_size)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"validation loss {res['val_loss']:.4f} | perplexity {res['val_ppl']:.2f} | {res['tokens']} tokens")
    return 0
