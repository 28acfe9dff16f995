#!/usr/bin/env python
"""Draw the paper's figures (PNG + PDF) and summary.csv from the runs under --data_dir (no model).

    python run_draw_plots.py --data_dir data --out_dir plots [--filter task=banking77] [--smooth 50] [--other_runs]

See icrl/analysis/figures.py (the paper's method selection: icrl/analysis/runs.py, paper_method_of).
"""

import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

from icrl.infra.diskfull import guard  # noqa: E402
from icrl.infra.plugins import start  # noqa: E402

main = start(sys.argv[1:], "icrl.cli.figures:main")  # plugins first: what they register is in --help

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
