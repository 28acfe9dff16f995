"""A plugin that breaks its contract on request (tests of icrl.run.edge): from the step
$BREACH_FROM on (unset: never), its strategy ``breach`` or its reward ``breach_reward`` does
what $BREACH says; otherwise they are the latest episodes and exact match."""

import os
import signal
import sys
import time

from icrl.plugin import Episode, Reward, Strategy, register_reward, register_strategy

SEED = 100  # the tests' --seed: a reward's seed is seed + step


def breach(step: int):
    """What to do at ``step`` ("" for nothing)."""
    start = os.environ.get("BREACH_FROM")
    return os.environ.get("BREACH", "") if start is not None and step >= int(start) else ""


@register_strategy
class Breach(Strategy):
    name = "breach"
    family = "example"
    filters = ("",)
    summary = "the latest episodes, or a breach of the contract on request (a test plugin)"

    def select(self, history, rng, query=None):
        what = breach(len(history))
        returns = {"string": "abc", "none": None, "ints": [0, 1], "many": list(history),
                   "foreign": [Episode("an input", "a", 1, "a", 1, 0)], "twice": list(history[:1]) * 2}
        if what in returns:
            return returns[what]
        if what == "exit":
            sys.exit(0)
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "ctrl-c":  # the user presses Ctrl-C while select runs
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        return list(history[len(history) - self.max_examples:]) if self.max_examples else []


@register_reward
class BreachReward(Reward):
    name = "breach_reward"
    summary = "exact match, or a breach of the contract on request (a test plugin)"

    def reward_of(self, prediction, answer, prompt, seed):
        returns = {"nan": float("nan"), "inf": float("inf"), "string": "1", "bool": prediction == answer}
        return returns.get(breach(seed - SEED), int(prediction == answer))

    def score(self, prediction, answer):
        return int(prediction == answer)
