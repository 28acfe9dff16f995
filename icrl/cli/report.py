"""run_report.py's command line: ``python run_report.py DATA_DIR [--out FILE]`` writes the study
report (:mod:`icrl.report`) of the runs there."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from ..errors import UsageError
from .parser import ArgumentParser, add_plugin_flag, parse_flags
from .view import file_size

DEFAULT_NAME = "report.html"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="run_report.py",
        description="Write one self-contained HTML study report (no server, no network) of the runs under a data "
                    "folder or a sweep: every configuration with its seeds, final and best test accuracy with "
                    "intervals over seeds, paired verdicts against zero-shot and the paper's methods, curves and "
                    "diagnostics, the benchmark score per model, and a link to each run's episode viewer.")
    p.add_argument("data_dir", help="the folder the runs were written to (run_experiment.py / run_sweep.py "
                                    "--output_dir), or any folder above runs")
    p.add_argument("--out", default=None, help=f"the HTML file to write (default: DATA_DIR/{DEFAULT_NAME}); each run's "
                                               f"viewer page goes to viewers/ beside it")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="only runs with this value, as run_draw_plots.py --filter (e.g. task=banking77); repeatable")
    p.add_argument("--viewers", action=argparse.BooleanOptionalAction, default=True,
                   help="also write each run's episode viewer page, linked from the report")
    add_plugin_flag(p)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = parse_flags(build_parser, argv)
        data_dir = Path(args.data_dir)
        if not data_dir.is_dir():
            raise UsageError(f"{str(data_dir)!r} is not a readable folder: pass the folder that holds the runs")
        check_listable(data_dir)
        out = Path(args.out) if args.out else data_dir / DEFAULT_NAME
        tic = time.perf_counter()
        from ..report.page import write_report  # pandas: only once the flags are checked

        path, data = write_report(data_dir, out, tuple(args.filter), viewers=args.viewers)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = data["counts"]
    viewers = f", {counts['runs']} viewer pages in {path.parent / 'viewers'}" if args.viewers else ""
    print(f"wrote {path} ({counts['runs']} runs in {counts['configs']} configurations, {file_size(path.stat().st_size)}"
          f"{viewers}) in {time.perf_counter() - tic:.1f} s: open it in a browser")
    for row in data["leaderboard"]:
        print(f"benchmark score: {row['line']}")
    return 0


def check_listable(folder: Path) -> None:
    """A folder whose entries cannot be listed (its permissions) is said as such: a search for
    runs in it would find none and say there are no runs."""
    try:
        with os.scandir(folder) as entries:
            next(entries, None)
    except OSError as exc:
        raise UsageError(f"cannot read the folder {str(folder)!r} ({exc.strerror or type(exc).__name__}): give "
                         f"yourself read access to it (chmod u+rx), or pass a folder you can read") from None


def check_data_dir(value: str) -> None:
    """--data_dir of run_draw_plots.py and run_count_tokens.py: a folder that exists and can be
    listed, checked before the libraries that read the runs load."""
    if not Path(value).is_dir():
        raise UsageError(f"--data_dir {value!r} is not a directory")
    check_listable(Path(value))
