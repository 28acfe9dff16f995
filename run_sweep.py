#!/usr/bin/env python3
"""Run a grid of experiments in lock-step on one loaded model per configuration. See README.md or --help."""

import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

try:
    from icrl.infra import plugins
    from icrl.infra.diskfull import guard

    with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
        from icrl.sweep.runner import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the package: nothing was written yet
    print("interrupted while starting; nothing was written", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
