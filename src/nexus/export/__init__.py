"""Exporters that read a finished checkpoint (weights + tokenizer) and write another format.

They sit above models, data and checkpoint because they read all three; `nexus export` dispatches here
(`--format ternary`) or to `nexus.hf` (`--format hf`).
"""
