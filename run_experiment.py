#!/usr/bin/env python3
"""Run one ICRL experiment. With no arguments: the embedded demo. See README.md or --help."""

import sys

try:
    from icrl.experiment import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the package: nothing was written yet
    print("interrupted while starting; nothing was written", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
