"""Accuracy of a model on a synthetic task (MQAR, k-hop, induction): argmax at the scored positions."""

from __future__ import annotations

import torch

from ..config import ConfigError
from ..data.synthetic import IGNORE_INDEX, make_task


@torch.no_grad()
def task_accuracy(model, task, n_batches: int = 8, batch_size: int = 32, seed: int = 10**9 + 7) -> dict:
    """Fraction of scored positions whose argmax prediction equals the target, on fresh batches
    from a fixed seed (the same held-out set as the trainer's synthetic validation batches)."""
    vocab = model.cfg.vocab_size
    if task.vocab_size > vocab:
        raise ConfigError(f"data.synthetic.vocab={task.vocab_size} (valid: <= the model's vocab_size {vocab})")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    correct = total = 0
    for _ in range(n_batches):
        x, y = task.batch(batch_size, g)
        x, y = x.to(device), y.to(device)
        pred = model(x).logits.argmax(-1)
        scored = y != IGNORE_INDEX
        correct += int((pred[scored] == y[scored]).sum())
        total += int(scored.sum())
    model.train(was_training)
    return {"accuracy": correct / max(total, 1), "scored": total}


def evaluate_synthetic(model, cfg, task_name: str, n_batches: int, batch_size: int) -> dict:
    """Accuracy on `task_name`; the task options come from the run config when it trained on that
    task (so `nexus eval --task mqar` tests what the model learned), else the task's defaults."""
    if not str(cfg.data.source).startswith("synthetic:"):
        raise ConfigError(
            f"--task={task_name} on a model trained on data.source={cfg.data.source!r}: its accuracy "
            f"would mean nothing (valid: a checkpoint trained on synthetic:{task_name}, or perplexity "
            "without --task)"
        )
    same = cfg.data.source == f"synthetic:{task_name}"
    if not same:
        import sys

        print(
            f"note: --task={task_name} on a model trained on {cfg.data.source}: the task's default options are used",
            file=sys.stderr,
        )
    task = make_task(task_name, dict(cfg.data.synthetic) if same else {}, cfg.data.seq_len)
    return {"task": task_name, **task_accuracy(model, task, n_batches, batch_size)}
