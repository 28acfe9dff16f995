#!/usr/bin/env python3
"""Run a grid of experiments in lock-step on one loaded model per configuration. See README.md or --help."""

import sys

from icrl.sweep.runner import main

if __name__ == "__main__":
    sys.exit(main())
