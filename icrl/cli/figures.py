"""run_draw_plots.py's command line: figures and summary tables of the runs under --data_dir
(:mod:`icrl.analysis.figures` draws them, imported once the flags are checked: a refusal comes
before pandas and matplotlib load)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..analysis.figure_options import FigureOptions, check_options
from ..analysis.figure_registry import FIGURES
from ..analysis.verdict import DEFAULT_EXPLORATIVE_P_KEEP
from ..errors import UsageError
from .parser import ArgumentParser, add_plugin_flag, parse_flags
from .report import check_data_dir


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="run_draw_plots.py",
                description="Draw the paper's figures and a summary CSV from the records under --data_dir "
                            "(no model is loaded).",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", default="data", help="results root (as run_experiment.py --output_dir)")
    p.add_argument("--out_dir", default="plots", help="where the PNG/PDF figures and summary.csv go")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="only runs with this value (e.g. task=banking77, model=smollm2-135m, method=explorative, "
                        "context_p_keep=0.1); repeat a key for either value")
    p.add_argument("--smooth", type=int, default=50, help="rolling window (steps) for training accuracy")
    p.add_argument("--explorative_p_keep", type=float, default=DEFAULT_EXPLORATIVE_P_KEEP,
                   help="p_keep of random_unbiased_only_positive drawn as explorative ICRL")
    p.add_argument("--other_runs", action="store_true",
                   help="main_results, regret and train_accuracy: also draw runs of the paper's methods at "
                        "settings the published figures leave out (naive+ at temperature 1, explorative at a given "
                        "context size, ...), as dashed lines labelled with their settings; without it only the "
                        "published selection is drawn: naive at temperature 1.0, naive+ at 2.0, explorative with "
                        "the automatic size and temperature 1.0, approximate with 8 uniform contexts")
    p.add_argument("--only", action="append", default=[], metavar="FIGURE",
                   help=f"draw only this figure (repeatable): {', '.join(FIGURES.names())}")
    add_plugin_flag(p)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = vars(parse_flags(build_parser, argv))
        options = FigureOptions(**{**args, "filter": tuple(args["filter"]), "only": tuple(args["only"])})
        check_options(options)
        check_data_dir(options.data_dir)  # not "no runs" for a folder that cannot be listed
        from ..analysis.figures import draw  # pandas and matplotlib: only now

        return draw(options)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
