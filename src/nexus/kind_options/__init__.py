"""What each registered layer kind declares without torch: its options dataclass (with `check`), its
parameter count (`params`) and the scales its growth pins in model.growth_state (`growth_pins`). The
kind's module, builder and width-growth roles live beside it in `nexus.models.<kind>`.

Configs are parsed, checked and counted from these declarations alone, so `nexus presets`, `nexus config`
and `nexus --help` never import torch (the listing: 0.47 s, against 5.16 s when it imported torch;
benchmarks/README.md, presets_speed.py). \
`config.KindOptions` imports every module of this package by name on the lookup of a kind
it has not seen, so a new kind's options file needs no central list.
"""
