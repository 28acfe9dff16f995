#!/usr/bin/env python
"""Draw the paper's figures (PNG + PDF) and summary.csv from the runs under --data_dir (no model).

    python run_draw_plots.py --data_dir data --out_dir plots [--filter task=banking77] [--smooth 50] [--other_runs]

See icrl/analysis/figures.py (the paper's method selection: icrl/analysis/runs.py, paper_method_of).
"""

import sys

from icrl.infra import plugins, threads
from icrl.infra.diskfull import guard

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads
with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
    from icrl.cli.figures import main

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
