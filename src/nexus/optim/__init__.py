"""Optimizers (AdamW, Muon), the parameter grouping that builds them from a TrainConfig, and the LR schedule.

Below train and growth: the trainer builds its optimizer here, and growth rebuilds one for the grown
model here, so growth never imports the trainer's package.
"""
