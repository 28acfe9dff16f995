#!/usr/bin/env python
"""Write a self-contained HTML episode viewer for the runs under a folder.

    python run_view.py data/                       # every run, into data/viewer.html
    python run_view.py data/smollm2-135m/trec_coarse --out trec.html
"""

import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

from icrl.cli.view import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
