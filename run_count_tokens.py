#!/usr/bin/env python
"""Count the prompt tokens of finished runs by replaying their records (no model).

    python run_count_tokens.py --data_dir data [--model M] [--task T] [--strategy S] [--csv tokens.csv]

See icrl/token_count.py.
"""

import sys

from icrl.token_count import main
from icrl.diskfull import guard

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
