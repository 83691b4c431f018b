"""How torchrun ranks share the model (`train.parallel`), declared without torch so a config is checked
without importing it; the trainer wraps the model (DDP) or fsdp.py shards it (FSDP2)."""

from __future__ import annotations

from ..config_base import declare_choice


def _fsdp2_rules(train, errors: list[str], p: str) -> None:
    opt = train.optimizer
    if not getattr(opt, "elementwise", True):  # the kind declares it (config.OptimizerOptions.elementwise)
        errors.append(
            f"{p}.optimizer={opt.kind!r} (valid: an elementwise optimizer such as adamw with "
            f"train.parallel=fsdp2 ({opt.kind} updates whole matrices, FSDP2 holds row shards))"
        )


declare_choice("train.parallel", "ddp", "replicate the model on every rank (DistributedDataParallel)")
declare_choice(
    "train.parallel",
    "fsdp2",
    "shard parameters, gradients and optimizer state across ranks (FSDP2)",
    check=_fsdp2_rules,
)
