#!/usr/bin/env python
"""Write a self-contained HTML episode viewer for the runs under a folder.

    python run_view.py data/                       # every run, into data/viewer.html
    python run_view.py data/smollm2-135m/trec_coarse --out trec.html
"""

import sys

from icrl.infra.plugins import start

main = start(sys.argv[1:], "icrl.cli.view:main")  # plugins first: what they register is in --help

if __name__ == "__main__":
    sys.exit(main())
