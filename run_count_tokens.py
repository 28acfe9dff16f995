#!/usr/bin/env python
"""Count the tokens of finished runs by replaying their records (no model): first the paper's
processed tokens (the published run_count_tokens.py's figure), then every prompt token of the
training and test calls, and what a prefix cache would still compute.

    python run_count_tokens.py --data_dir data [--model M] [--task T] [--strategy S] [--csv tokens.csv]

See icrl/analysis/counting.py.
"""

import sys

from icrl.infra import plugins, threads
from icrl.infra.diskfull import guard

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads
with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
    from icrl.cli.tokens import main

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
