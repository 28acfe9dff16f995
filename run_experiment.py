#!/usr/bin/env python3
"""Run one ICRL experiment. With no arguments: the embedded demo. See README.md or --help."""

import sys

from icrl.experiment import main

if __name__ == "__main__":
    sys.exit(main())
