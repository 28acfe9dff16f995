#!/usr/bin/env python
"""Count the prompt tokens of finished runs by replaying their records (no model).

    python run_count_tokens.py --data_dir data [--model M] [--task T] [--strategy S] [--csv tokens.csv]

See icrl/analysis/counting.py.
"""

import sys

from icrl.analysis.token_cli import main

if __name__ == "__main__":
    sys.exit(main())
