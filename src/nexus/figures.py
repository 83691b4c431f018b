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


DPI = 150  # every figure's resolution unless a caller asks for another: sharp on a slide or a printed page
FORMATS = ("png", "svg", "pdf")  # what a figure may be written as (the file's suffix says which)


def save_figure(fig, path, enter: bool = False, dpi: int | None = None, **savefig_kw) -> str:
    """Write `fig` to `path` under a journaled temporary name, rename it into place (nexus.atomic:
    enter puts it in its folder's manifest in the same recoverable step), close the figure, and
    return the file's name. dpi: dots per inch of a raster image (default DPI, whatever the figure was made
    with); the format is the suffix's (png, svg or pdf)."""
    from .atomic import write_file_atomic

    path = Path(path)
    kw = {"dpi": DPI if dpi is None else dpi, **savefig_kw}
    try:
        write_file_atomic(
            path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", **kw), enter=enter
        )
    finally:
        pyplot().close(fig)
    return path.name
