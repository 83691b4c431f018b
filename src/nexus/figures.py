"""Shared plumbing for every PNG nexus writes (analyses and experiments): matplotlib on the
non-interactive Agg backend, and a save that never leaves a half-written image behind."""
from __future__ import annotations

import os
from pathlib import Path


def pyplot():
    """matplotlib.pyplot with the Agg backend (servers have no display; must precede the pyplot import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, **savefig_kw) -> str:
    """Write `fig` to `path` under a temporary name, rename it into place, close the figure, and
    return the file's name."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", **savefig_kw)
    pyplot().close(fig)
    os.replace(tmp, path)
    return path.name
