#!/usr/bin/env python
"""Draw the paper's figures (PNG + PDF) and summary.csv from the runs under --data_dir (no model).

    python run_draw_plots.py --data_dir data --out_dir plots [--filter task=banking77] [--smooth 50]

See icrl/plots.py.
"""

import sys

from icrl.plots import main
from icrl.diskfull import guard

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
