"""`train.dtype`: what a run computes in, and the rule behind `auto`, the default (issue 51 item 1).

`float32` trains in fp32; `bfloat16` under bf16 autocast (the parameters, their gradients and the optimizer
state stay fp32, so checkpoints are fp32 whatever the dtype). `auto` picks bf16 autocast where it pays and fp32
elsewhere, by a fixed rule (not a probe per run, so that the same config on the same machine always computes the
same way):

  * CUDA: bf16 where the GPU computes it natively (compute capability 8.0 or newer: bf16 tensor cores), at every
    width. Not measured across widths here (no GPU was lent for this change); tools/gpu_check.py and
    benchmarks/speed/gpu_mfu.py train in bf16 on CUDA already.
  * CPU: bf16 where the CPU computes it natively (the avx512_bf16 or amx_bf16 flag; without them torch converts
    every bf16 GEMM operand and autocast was 14-18x slower: benchmarks/results/cpu-precision.md) and the model is
    at least as wide as AUTO_CPU_MIN_D_MODEL gives for its head dim (narrower, bf16 measured no faster: small
    GEMMs and attention at small head dims lose more to bf16's conversions than they gain;
    benchmarks/results/dtype-auto.md). A head dim below the table's smallest (16) is not measured: fp32. A code
    generation restriction (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, ...) makes the flags no promise: fp32.
  * anything else (MPS, XLA, ...): fp32.

The run decides once, at its start, from the model it starts with (a growth mid-run keeps the decision), and
says what it chose and why in one line. The config keeps `auto`, what was asked: config.yaml, a checkpoint's
config.json, a study's ledger key and an experiment's plan.json then read the same on every machine, and a
resume applies the same rule again instead of inheriting one machine's answer. What the steps ran in is
recorded beside the config: the console line, the checkpoint's trainer state ("dtype") and the run's result
(fit()'s dict, an experiment's done.json). A resume decides again on the machine it runs on; when that differs
from what the checkpoint's steps ran in, one note says so and names the flag that keeps the old dtype
(docs/cli.md). To repeat a run elsewhere in the same dtype, give that dtype explicitly.

Old configs: one saved without the field (none is: it existed from the first version) or with "float32" keeps
meaning float32 (config_migration.SAVED_OLD_DEFAULTS); every study plan and `nexus experiment progressive` /
`compare` pin float32 (pin_experiment_dtype), so no committed ledger or README figure moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # torch's (oneDNN's) bf16 GEMMs are fast with these
RESULT_CARD = "benchmarks/results/dtype-auto.md"
# head dim -> the narrowest d_model `auto` trains in bf16 on a CPU with native bf16: at each head dim, the narrowest
# width of the table whose bf16/fp32 training-step speed was > 1 in every alternated round. Measured with
#   python benchmarks/speed/cpu_precision.py --threads 1 --widths 64,128,256,512 --head-dim H --rounds 7 --steps 2
# for H = 64, 16, 32 (2026-12-07, AMD EPYC, torch capability AVX512, flags avx512_bf16 avx512_vnni, torch 2.13.0,
# one thread, 2 layers, seq 256 x batch 8, nexus's AdamW, CPU time, `nice -n 15` on a 2-core VM at load 7-12
# from another job: noisy). bf16/fp32 speed, median [min, max] of 7 rounds:
#   d_model       64                 128                256                512
#   hd 16   0.79 [0.67, 0.87]  0.96 [0.86, 1.02]  1.13 [1.08, 1.20]  1.40 [1.31, 1.54]
#   hd 32   1.05 [0.99, 1.15]  1.24 [1.19, 1.28]  1.43 [1.32, 1.50]  1.69 [1.62, 1.75]
#   hd 64   1.16 [1.10, 1.18]  1.36 [1.31, 1.45]  1.57 [1.52, 1.62]  1.77 [1.73, 1.87]
# and the studies' shape (d 64, 4 heads of 16, FFN 128, 4 layers, batch 16 x seq 128): 0.56 [0.54, 0.57].
# A model's head dim takes the row of the largest measured head dim at or below it (more heads than measured
# count as 64's row; below 16, not measured: fp32). Raw times: benchmarks/results/dtype-auto.md.
AUTO_CPU_MIN_D_MODEL = {16: 256, 32: 128, 64: 64}
AUTO_CUDA_MIN_CAPABILITY = (8, 0)  # Ampere and newer: bf16 tensor cores


@dataclass(frozen=True)
class Precision:
    """A run's dtype: what the config asked (`requested`), what it computes in (`dtype`: float32 | bfloat16) and
    why (`reason`)."""

    requested: str
    dtype: str
    reason: str
    slow: bool = False  # an explicit bfloat16 on a CPU without native bf16

    @property
    def autocast(self) -> bool:
        return self.dtype == "bfloat16"

    @property
    def worth_saying(self) -> bool:
        """Whether a run prints line(): what auto chose, or an explicit choice that is slow here."""
        return self.requested == "auto" or self.slow

    def line(self) -> str:
        """The one line a run prints about it."""
        what = "bfloat16 autocast" if self.autocast else "float32"
        if self.requested == "auto":
            return f"dtype: auto -> {what} ({self.reason})"
        return f"dtype: {what} (train.dtype {self.requested}; {self.reason})"


def cpu_native_bf16() -> tuple[list[str], str]:
    """(the native-bf16 flags this CPU reports, or [] with the reason it does not count as native)."""
    from ..cpu_info import cpu_flags, restricted_by

    native = [f for f in cpu_flags() if f in NATIVE_BF16_CPU_FLAGS]
    if not native:
        return [], "CPU has no avx512_bf16 / amx_bf16: bf16 is converted, not computed natively"
    limits = restricted_by()
    if limits:
        return [], f"CPU has {' '.join(native)} but code generation is restricted by {' '.join(limits)}"
    return native, f"CPU has {' '.join(native)}"


def cuda_native_bf16(device: torch.device) -> tuple[bool, str]:
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if (major, minor) >= AUTO_CUDA_MIN_CAPABILITY:
        return True, f"GPU {name} computes bf16 natively (compute capability {major}.{minor})"
    return False, f"GPU {name} has no bf16 tensor cores (compute capability {major}.{minor} < 8.0)"


def cpu_min_d_model(head_dim: int) -> int | None:
    """The narrowest d_model at which `auto` picks bf16 on a CPU with native bf16 at this head dim (None: the head
    dim is below every measured one)."""
    rows = [h for h in AUTO_CPU_MIN_D_MODEL if h <= head_dim]
    return AUTO_CPU_MIN_D_MODEL[max(rows)] if rows else None


def resolve_precision(requested: str, device: torch.device, d_model: int, head_dim: int) -> Precision:
    """What a run of `requested` train.dtype on `device` computes in, for a model d_model wide with heads of
    head_dim, and why."""
    if requested != "auto":
        if requested == "bfloat16" and device.type == "cpu":
            flags, why = cpu_native_bf16()
            if not flags:
                return Precision(requested, requested, f"slow here: {why}; auto would pick float32", slow=True)
        return Precision(requested, requested, "set explicitly")
    if device.type == "cuda":
        native, why = cuda_native_bf16(device)
        return Precision("auto", "bfloat16" if native else "float32", why)
    if device.type != "cpu":
        return Precision("auto", "float32", f"bf16 autocast on {device.type} is not measured: fp32")
    flags, why = cpu_native_bf16()
    if not flags:
        return Precision("auto", "float32", why)
    least = cpu_min_d_model(head_dim)
    if least is None:
        smallest = min(AUTO_CPU_MIN_D_MODEL)
        return Precision(
            "auto", "float32", f"{why}, but head dim {head_dim} < {smallest}, where bf16 is not measured: {RESULT_CARD}"
        )
    shape = f"d_model {d_model} at head dim {head_dim}"
    if d_model < least:
        return Precision(
            "auto", "float32", f"{why}, but {shape} < {least}, where bf16 measured no faster: {RESULT_CARD}"
        )
    return Precision("auto", "bfloat16", f"{why}; {shape} >= {least}: {RESULT_CARD}")


def autocast_context(precision: Precision, device: torch.device):
    """The context a training or evaluation forward runs in."""
    import contextlib

    if precision.autocast:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def resume_note(stored: str | None, now: Precision) -> str | None:
    """One note when a resumed run computes in another dtype than the checkpoint's steps did (None: the same, or
    a checkpoint from before the dtype was recorded)."""
    if stored is None or stored == now.dtype:
        return None
    return (
        f"the checkpoint's steps ran in {stored}, this run continues in {now.dtype} (train.dtype {now.requested}: "
        f"{now.reason}); resume with --train.dtype {stored} to keep {stored}"
    )


# What an experiment's runs compute in when its preset leaves train.dtype at auto: float32. Its arms are compared
# with each other (and with committed ledgers and README figures measured in float32), and auto could put arms of
# different widths in different dtypes, or one study in another dtype on another machine. An explicit
# --train.dtype (or a preset's own bfloat16) still wins.
EXPERIMENT_DTYPE = "float32"


def pin_experiment_dtype(cfg) -> None:
    """Pin a preset's train.dtype auto to EXPERIMENT_DTYPE (before the command line's overrides apply)."""
    if cfg.train.dtype == "auto":
        cfg.train.dtype = EXPERIMENT_DTYPE
