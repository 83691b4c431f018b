"""The optimizers a run may choose (`train.optimizer`), declared without torch so a config is checked
without importing it; param_groups.py builds them (which parameters each one takes)."""
from __future__ import annotations

from ..config_base import declare_choice

declare_choice("train.optimizer", "adamw", "AdamW for every parameter")
declare_choice("train.optimizer", "muon", "Muon for 2-D hidden matrices, AdamW for the rest (embeddings, head, norms)")
