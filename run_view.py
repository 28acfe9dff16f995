#!/usr/bin/env python
"""Write a self-contained HTML episode viewer for the runs under a folder.

    python run_view.py data/                       # every run, into data/viewer.html
    python run_view.py data/smollm2-135m/trec_coarse --out trec.html
"""

import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

from icrl.infra.plugins import start  # noqa: E402

main = start(sys.argv[1:], "icrl.cli.view:main")  # plugins first: what they register is in --help

if __name__ == "__main__":
    sys.exit(main())
