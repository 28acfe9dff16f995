"""A plugin whose strategy fails while its index is down: select raises from step
$FLAKY_DOWN_FROM on (unset: it works). Tests a plugin that fails during a run."""

import os

from icrl.plugin import Strategy, register_strategy


@register_strategy
class Flaky(Strategy):
    name = "flaky"
    family = "example"
    filters = ("",)
    summary = "the latest episodes, while the index answers (a test plugin)"

    def select(self, history, rng, query=None):
        down_from = os.environ.get("FLAKY_DOWN_FROM")
        if down_from is not None and len(history) >= int(down_from):
            raise ConnectionError("the index does not answer")
        return list(history[len(history) - self.max_examples:]) if self.max_examples else []
