#!/usr/bin/env python
"""Write the self-contained HTML study report of the runs under a folder.

    python run_report.py data/                       # every run, into data/report.html
    python run_report.py data/methods --out methods.html --filter task=banking77_top10
"""

import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

from icrl.infra.plugins import start  # noqa: E402

main = start(sys.argv[1:], "icrl.cli.report:main")  # plugins first: what they register is in --help

if __name__ == "__main__":
    sys.exit(main())
