"""Analyses: parameter/FLOP accounting, attention statistics, growth dynamics, plots."""
