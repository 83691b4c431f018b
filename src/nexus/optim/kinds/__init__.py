"""The optimizer kinds a run may choose (`train.optimizer: {kind, **options}`), each declared in its own module
of this package without torch, so a config is parsed and checked without importing it: a subclass of
`config.OptimizerOptions` with the kind's options (defaults from its paper) and `builder`, the function that
builds it (optim/param_groups.py). The baseline kind, `adamw`, is `config.AdamWOptions`. A new optimizer is a
module here plus its torch module (its builder and a `GrowableOptimizer`, optim/base.py): no edit elsewhere."""
