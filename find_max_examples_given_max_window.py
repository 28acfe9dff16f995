"""How many ICRL episodes fit in a context window: tokenizer and chat template only.

    python find_max_examples_given_max_window.py --model_name smollm2-135m \
        --task_name banking77 --max_window_tokens 4096 [--verbose] [--no-icrl] [--largest_fitting]

Prints what the published script prints and its runner uses: one more than the largest
number of episodes that fits (--largest_fitting: that number itself).

See icrl/run/window.py (the search) and icrl/cli/window.py for the worst case used.
"""

import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

from icrl.infra.diskfull import guard  # noqa: E402
from icrl.infra.plugins import start  # noqa: E402

main = start(sys.argv[1:], "icrl.cli.window:main")  # plugins first: what they register is in --help

if __name__ == "__main__":
    sys.exit(guard(main))  # a full disk or read-only folder: one line, exit 2
