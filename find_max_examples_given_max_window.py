"""How many ICRL episodes fit in a context window: tokenizer and chat template only.

    python find_max_examples_given_max_window.py --model_name smollm2-135m \
        --task_name banking77 --max_window_tokens 4096 [--verbose] [--no-icrl] [--largest_fitting]

Prints what the published script prints and its runner uses: one more than the largest
number of episodes that fits (--largest_fitting: that number itself).

See icrl/run/window.py (the search) and icrl/cli/window.py for the worst case used.
"""

import sys

from icrl.infra import plugins, threads
from icrl.infra.diskfull import guard

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads
with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
    from icrl.cli.window import main

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
