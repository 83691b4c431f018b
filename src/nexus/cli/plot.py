"""`nexus plot RUN [RUN ...]`: loss against tokens, FLOPs and wall time of existing runs, to a PNG and a CSV."""
from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="plot the loss curves of existing runs (PNG + CSV)",
                       description="Train and validation loss of each RUN against tokens processed, training FLOPs "
                                   "and wall time, growth steps marked: validation on top, the train loss EMA-smoothed "
                                   "with the raw curve faint behind it; writes OUT.png and OUT.csv (every plotted "
                                   "point, the smoothed train curve as series train_ema). A RUN is a `nexus train` run directory or a checkpoint inside one.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or checkpoints inside them)")
    p.add_argument("--out", default="runs/plot", metavar="PATH",
                   help="output path without suffix: PATH.png and PATH.csv (default: runs/plot)")
    p.add_argument("--title", default=None, help="figure title (default: the runs' names)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing PATH.png / PATH.csv")
    p.add_argument("--smooth", type=_weight, default=None, metavar="W",
                   help="EMA weight of the train curve in [0, 1) (0: raw only; default: 1 - 30/points, none "
                        "below 30 points); the raw curve stays, faint, behind it")
    p.add_argument("--logx", action="store_true", help="log-scaled x axes (tokens, FLOPs, wall time)")
    p.add_argument("--logy", action="store_true", help="log-scaled loss axis (the late part of a run, not the "
                                                       "first drop, gets the room)")
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


def run(args, extra) -> int:
    import sys

    from ..atomic import write_text_atomic
    from ..config import ConfigError
    from ..experiments.run_plot import curves_csv, plot_runs, read_run, run_names, with_smoothing

    out = Path(args.out)
    png, csv_path = out.with_name(out.name + ".png"), out.with_name(out.name + ".csv")
    for f in (png, csv_path):
        if f.exists() and not args.overwrite:
            raise ConfigError(f"--out={args.out!r}: {str(f)!r} exists (valid: a new path, or --overwrite to replace it)")
        if f.exists() and not f.is_file():
            raise ConfigError(f"--out={args.out!r}: {str(f)!r} is not a file (valid: a path for two new files)")
    runs = [read_run(p, name) for p, name in zip(args.runs, run_names(args.runs))]  # all read before any write
    runs = with_smoothing(runs, args.smooth)
    png.parent.mkdir(parents=True, exist_ok=True)
    plot_runs(runs, png, args.title, logx=args.logx, logy=args.logy)
    write_text_atomic(csv_path, curves_csv(runs))
    for r in runs:
        for note in r["notes"]:
            print(f"nexus plot: note: {note}", file=sys.stderr)
    print(f"wrote {png} and {csv_path} ({len(runs)} run(s): {', '.join(r['name'] for r in runs)})")
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("plot", __name__)
