"""Output directories: the guard every writer goes through (guard.py), the ownership manifest
(manifest.py), the one-writer lock and its journal of temporaries (lock.py), named crash points for
the kill tests (crash.py)."""

from .guard import (
    ANALYSIS,
    CHECKPOINT,
    EXPERIMENT,
    HF_EXPORT,
    PREPARED,
    TERNARY,
    TRAIN_RUN,
    check_output,
    check_usable,
    claim_directory,
    is_inside,
    output_kind,
    refuse_unproven,
    write_marker,
)
from .lock import acquire_output_lock, held_lock
from .manifest import MARKER, forget, read_manifest, record

__all__ = [
    "ANALYSIS",
    "CHECKPOINT",
    "EXPERIMENT",
    "HF_EXPORT",
    "PREPARED",
    "TERNARY",
    "write_marker",
    "TRAIN_RUN",
    "MARKER",
    "check_output",
    "check_usable",
    "claim_directory",
    "is_inside",
    "output_kind",
    "refuse_unproven",
    "acquire_output_lock",
    "held_lock",
    "forget",
    "read_manifest",
    "record",
]
