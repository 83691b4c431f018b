"""What each registered layer kind declares without torch: its options dataclass (with `check`) and its
parameter count (`params`). The kind's module, builder and width-growth roles live beside it in
`nexus.models.<kind>`.

Configs are parsed, checked and counted from these declarations alone, so `nexus presets`, `nexus config`
and `nexus --help` never import torch (importing it is most of their run time: ~2 s idle, ~20 s on a loaded
2-core machine). `config.KindOptions` imports every module of this package by name on the lookup of a kind
it has not seen, so a new kind's options file needs no central list.
"""
