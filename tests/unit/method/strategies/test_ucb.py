"""UCB over the K contexts of an approximate strategy (icrl.method.strategies.ucb, --ucb_alpha):
untried contexts first, then mean + alpha * sqrt(ln N / n), ties to the lowest index, no draw;
a reset of the history keeps the statistics; it composes with --published_quirks."""

from __future__ import annotations

import math

import numpy as np

from icrl.method.episode import Episode
from icrl.method.strategies import make_strategy
from icrl.method.strategies.ucb import UCB


def test_untried_contexts_come_first_then_the_upper_bound():
    ucb = UCB(alpha=1.0, contexts=3)
    order = []
    for reward in (1, 0, 0):
        k = ucb.pick()
        order.append(k)
        ucb.observe(k, reward)
    assert order == [0, 1, 2]  # each untried one, lowest index first
    n = 3
    assert ucb.pick() == 0  # 1 + sqrt(ln 3) beats 0 + sqrt(ln 3)
    assert ucb.metrics(0)["ucb"] == {"score": 1 + math.sqrt(math.log(n)), "counts": [1, 1, 1],
                                     "means": [1.0, 0.0, 0.0]}


def test_a_larger_alpha_explores_the_less_tried_context():
    greedy, curious = UCB(alpha=0.0, contexts=2), UCB(alpha=5.0, contexts=2)
    for ucb in (greedy, curious):
        for k, reward in [(0, 1), (0, 1), (0, 1), (0, 0), (1, 0)]:
            ucb.observe(k, reward)
    assert greedy.pick() == 0 and curious.pick() == 1


def episodes(n):
    return [Episode(f"q{i}", "a", i % 2, "a", i % 2, i) for i in range(n)]


def test_an_approximate_strategy_with_ucb_draws_nothing_for_the_index_and_forgets_only_its_episodes():
    strategy = make_strategy("approximate", 3, 0.5, 2, "uniform")
    strategy.chooser = UCB(1.0, 2)
    history = episodes(6)
    for t in range(6):
        strategy.select(history[:t], np.random.default_rng(t))
        strategy.observe_reward(t % 2)
    counts = list(strategy.chooser.counts)
    assert sum(counts) == 6
    strategy.forget()  # --prob_reset: the contexts restart empty, the slots' statistics stay
    assert strategy.contexts == [[], []] and strategy.chooser.counts == counts
    strategy.reset()  # a new run (replay): everything restarts
    assert strategy.chooser.counts == [0, 0]


def test_ucb_and_the_published_re_offer_compose():
    history = [Episode("q0", "a", 1, "a", 1, 0), Episode("q1", "b", 0, "a", 0, 1)]
    quirks = make_strategy("approximate_only_positive", 3, 1.0, 2, "uniform", published_quirks=True)
    quirks.chooser = UCB(1.0, 2)
    quirks.select(history[:1], np.random.default_rng(1))
    quirks.select(history, np.random.default_rng(2))  # the newest is negative: the positive one is offered again
    assert quirks.reoffer and [len(c) for c in quirks.contexts] == [2, 2]
