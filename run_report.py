#!/usr/bin/env python
"""Write the self-contained HTML study report of the runs under a folder.

    python run_report.py data/                       # every run, into data/report.html
    python run_report.py data/methods --out methods.html --filter task=banking77_top10
"""

import sys

from icrl.infra import plugins, threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads
with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
    from icrl.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
