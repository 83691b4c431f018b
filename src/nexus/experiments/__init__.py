"""Experiments that answer "does growing save compute, and which variant wins at equal cost?".

progressive.py  small model -> grow -> continue, against the target model trained from scratch
compare.py      presets x seeds at equal tokens or equal FLOPs, mean +- std and a significance test
runs.py         resumable training runs (skip finished, resume partial from the last step checkpoint)
curves.py       loss curves from metrics.jsonl, training FLOPs per token, interpolation to a target loss
report.py       results.json -> report.md (every number in the report is read from results.json)
plots.py        PNG plots (matplotlib, Agg backend)
"""
