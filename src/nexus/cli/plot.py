"""`nexus plot RUN [RUN ...]`: loss against tokens, FLOPs and wall time of existing runs, to a figure and a CSV."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="plot the loss curves of existing runs (PNG, SVG or PDF + CSV)",
        description="Train and validation loss of each RUN against tokens processed, training FLOPs "
        "and wall time, growth steps marked: validation on top, the train loss EMA-smoothed "
        "with the raw curve faint behind it; writes OUT.png (OUT.svg or OUT.pdf with "
        "--format) and OUT.csv (every plotted point, the smoothed train curve as series "
        "train_ema). A RUN is a `nexus train` run directory or a checkpoint inside one.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or checkpoints inside them)")
    p.add_argument(
        "--out",
        default="runs/plot",
        metavar="PATH",
        help="output path without suffix: PATH.png (.svg, .pdf: --format) and PATH.csv (default: runs/plot)",
    )
    p.add_argument(
        "--format",
        choices=["png", "svg", "pdf"],
        default="png",
        help="figure format: png (raster, --dpi), svg or pdf (vector, for papers and slides)",
    )
    p.add_argument(
        "--dpi",
        type=_dpi,
        default=None,
        metavar="N",
        help="dots per inch of a png, in [50, 1200] (default 150: 2,700 x 825 pixels; 300 for print)",
    )
    p.add_argument("--title", default=None, help="figure title (default: the runs' names)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing figure or PATH.csv")
    p.add_argument(
        "--smooth",
        type=_weight,
        default=None,
        metavar="W",
        help="EMA weight of the train curve in [0, 1) (0: raw only; default: 1 - 30/points, none "
        "below 30 points); the raw curve stays, faint, behind it",
    )
    p.add_argument("--logx", action="store_true", help="log-scaled x axes (tokens, FLOPs, wall time)")
    p.add_argument(
        "--logy",
        action="store_true",
        help="log-scaled loss axis (the late part of a run, not the first drop, gets the room)",
    )
    p.set_defaults(func=run)


def _weight(s: str) -> float:
    import argparse

    try:
        w = float(s)
    except ValueError:
        w = -1.0
    if not 0 <= w < 1:
        raise argparse.ArgumentTypeError(f"--smooth={s!r} (valid: a number in [0, 1), e.g. 0.9)")
    return w


def _dpi(s: str) -> int:
    import argparse

    try:
        v = int(s)
    except ValueError:
        v = 0
    if not 50 <= v <= 1200:
        raise argparse.ArgumentTypeError(f"--dpi={s!r} (valid: a whole number in [50, 1200], e.g. 150 or 300)")
    return v


def run(args, extra) -> int:
    import sys

    from ..atomic import write_text_atomic
    from ..config import ConfigError
    from ..experiments.run_plot import curves_csv, plot_runs, read_run, run_names, with_smoothing

    out = Path(args.out)
    figure, csv_path = out.with_name(f"{out.name}.{args.format}"), out.with_name(out.name + ".csv")
    for f in (figure, csv_path):
        if f.exists() and not args.overwrite:
            raise ConfigError(
                f"--out={args.out!r}: {str(f)!r} exists (valid: a new path, or --overwrite to replace it)"
            )
        if f.exists() and not f.is_file():
            raise ConfigError(f"--out={args.out!r}: {str(f)!r} is not a file (valid: a path for two new files)")
    runs = [read_run(p, name) for p, name in zip(args.runs, run_names(args.runs))]  # all read before any write
    runs = with_smoothing(runs, args.smooth)
    figure.parent.mkdir(parents=True, exist_ok=True)
    plot_runs(runs, figure, args.title, logx=args.logx, logy=args.logy, dpi=args.dpi)
    write_text_atomic(csv_path, curves_csv(runs))
    for r in runs:
        for note in r["notes"]:
            print(f"nexus plot: note: {note}", file=sys.stderr)
    print(f"wrote {figure} and {csv_path} ({len(runs)} run(s): {', '.join(r['name'] for r in runs)})")
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("plot", __name__)
