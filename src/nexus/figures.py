"""Shared plumbing for every PNG nexus writes (analyses and experiments): matplotlib on the
non-interactive Agg backend, and a save that never leaves a half-written image behind."""
from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot with the Agg backend (servers have no display; must precede the pyplot import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, enter: bool = False, **savefig_kw) -> str:
    """Write `fig` to `path` under a journaled temporary name, rename it into place (nexus.atomic:
    enter puts it in its folder's manifest in the same recoverable step), close the figure, and
    return the file's name."""
    from .atomic import write_file_atomic

    path = Path(path)
    try:
        write_file_atomic(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", **savefig_kw),
                          enter=enter)
    finally:
        pyplot().close(fig)
    return path.name
