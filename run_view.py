#!/usr/bin/env python
"""Write a self-contained HTML episode viewer for the runs under a folder.

    python run_view.py data/                       # every run, into data/viewer.html
    python run_view.py data/smollm2-135m/trec_coarse --out trec.html
"""

import sys

from icrl.infra import plugins, threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads
with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
    from icrl.cli.view import main

if __name__ == "__main__":
    sys.exit(main())
