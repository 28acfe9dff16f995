"""The edge of a plugin's parts (icrl.run.edge): a built-in part is not touched; a plugin's
select(), metrics(), prepare(), preamble(), build(), reward, score(), fields(), bind() and
figure are checked where they return; what the plugin raises of its own (an exit, a
KeyboardInterrupt no Ctrl-C sent) is a PluginBreach, and what it must not hide passes on."""

from __future__ import annotations

import copy
import math
import signal
from pathlib import Path

import numpy as np
import pytest

from icrl.cli import parse_args
from icrl.errors import UsageError
from icrl.infra import plugins, signals
from icrl.method.calls import ModelCall
from icrl.method.episode import Episode
from icrl.method.prompts import feedback_message
from icrl.method.rewards import ExactMatch, Reward
from icrl.method.strategies.base import STRATEGIES, Strategy
from icrl.run import edge
from icrl.run.assemble import build_reward, build_strategy
from icrl.records.plan import Plan

MINE = plugins.Plugin("mine", "/x/mine.py", "a" * 64)
HISTORY = [Episode(f"input {t}", "a", 1, "a", 1, t) for t in range(6)]
NOTE = ModelCall("note", field="note", summary="notes")


class Mine(Strategy):
    """A plugin's strategy: returns what ``answer`` says."""

    name, family = "mine", "mine"
    calls = (NOTE,)

    def __init__(self, answer=None):
        super().__init__(3, 1.0)
        self.answer = answer or (lambda history: list(history[-3:]))
        self.notes = {"note": "a guide"}
        self.stats: dict = {"hits": [1, 2.5], "name": None}

    def select(self, history, rng, query=None):
        return self.answer(history)

    def metrics(self):
        return self.stats

    def prepare(self, step, history, task, seed, temperature):
        return self.notes

    def preamble(self, history, labels):
        return self.notes.get("note")


class MyReward(Reward):
    name = "my_reward"

    def __init__(self, value=1, **params):
        super().__init__(**params)
        self.value = value

    def score(self, prediction, answer):
        return self.value


def checked(part) -> edge.CheckedStrategy:
    return edge.strategy(lambda: part, MINE, 3)


def breach(call) -> str:
    with pytest.raises(edge.PluginBreach) as caught:
        call()
    return str(caught.value)


def test_a_built_in_part_is_not_touched():
    config = parse_args(["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl",
                         "--backend", "fake", "--max_context_examples", "4", "--seed", "1", "--training_seed", "1",
                         "--test_seed", "1"])
    assert type(build_strategy(config, Plan("icrl", 4, 10, ()))) is STRATEGIES.get("random_unbiased").cls
    assert type(build_reward(config)) is ExactMatch
    given = ExactMatch()
    assert build_reward(config, given) is given
    part = Mine()
    assert edge.strategy(lambda: part, None, 3) is part and edge.reward(lambda: given, None) is given
    draw = lambda ctx: "skipped"  # noqa: E731
    assert edge.figure("x", draw, None) is draw


def test_a_plugins_context_is_checked():
    strategy = checked(Mine())
    context = strategy.select(HISTORY, np.random.default_rng(0))
    assert context == HISTORY[-3:] and strategy.select([], np.random.default_rng(0)) == []
    copies = [Episode(e.prompt, e.prediction, e.feedback, e.answer, e.accuracy, e.step) for e in HISTORY[:2]]
    assert checked(Mine(lambda h: copies)).select(HISTORY, None) == copies  # equal to the history's own
    wrong = {"abc": "'abc'", None: "None", (0, 1): "(0, 1)", "many": "6 episodes", "twice": "the episode of step 1 twice",
             "foreign": "an episode that is not in the history it was given (step 7)"}
    answers = {"many": lambda h: list(h), "twice": lambda h: [h[1], h[1]],
               "foreign": lambda h: [Episode("other", "a", 1, "a", 1, 7)]}
    for returned, said in wrong.items():
        answer = answers.get(returned, lambda h, r=returned: r)
        assert breach(lambda: checked(Mine(answer)).select(HISTORY, None)) == (
            f"plugin mine (/x/mine.py): select() returned {said}, expected a list of at most 3 episodes from the "
            f"history, each once; fix the plugin and rerun the same command")


def test_a_strategy_that_does_not_read_the_context_size_may_show_more():
    summary = Mine(lambda h: list(h))
    summary.reads = ()  # its episodes are a setting of its own (as icrl's summary strategy)
    assert checked(summary).select(HISTORY, None) == HISTORY


def test_metrics_prepare_and_preamble_are_checked():
    strategy = checked(Mine())
    assert strategy.metrics() == {"hits": [1, 2.5], "name": None}
    assert strategy.prepare(0, HISTORY, None, 1, 1.0) == {"note": "a guide"} and strategy.preamble([], []) == "a guide"
    deep: list = []
    for _ in range(40):
        deep = [deep]
    for stats in ({"score": math.nan}, {"n": np.int64(3)}, [1], {1: "a"}, {"deep": deep}, {"x": object()}):
        part = Mine()
        part.stats = stats
        assert "expected a dict of JSON values (text keys, finite numbers)" in breach(checked(part).metrics)
    part = Mine()
    part.stats = {"deep": deep[0][0][0][0][0][0][0][0][0][0][0][0]}  # 28 deep: a JSON value
    assert checked(part).metrics() == part.stats
    part = Mine()
    part.notes = {"prediction": "b"}
    assert breach(lambda: checked(part).prepare(0, HISTORY, None, 1, 1.0)) == (
        "plugin mine (/x/mine.py): prepare() returned {'prediction': 'b'}, expected a dict from note to text or None; "
        "fix the plugin and rerun the same command")
    part.notes = {"note": 3}
    assert "preamble() returned 3, expected a string ('' for none)" in breach(lambda: checked(part).preamble([], []))


def test_build_must_make_a_strategy():
    assert breach(lambda: edge.strategy(lambda: None, MINE, 3)).startswith(
        "plugin mine (/x/mine.py): build() returned None, expected a Strategy")


def test_a_plugins_reward_is_checked():
    def reward(value):
        return edge.reward(lambda: MyReward(value), MINE)

    assert reward(0.5)("a", "b", seed=1, step=0) == (0.5, 0.5) and reward(1).score("a", "a") == 1
    for value, said in ((math.nan, "nan"), (math.inf, "inf"), ("1", "'1'"), (True, "True"), (None, "None")):
        assert breach(lambda: reward(value)("a", "b", seed=1, step=0)) == (
            f"plugin mine (/x/mine.py): its reward (score or reward_of) returned {said}, expected a finite number; fix "
            f"the plugin and rerun the same command")
        assert f"score() returned {said}, expected a finite number" in breach(lambda: reward(value).score("a", "b"))
    assert "its feedback (shown) is 0.7 for the reward 0.7, expected 1, 0 or 0.5" in breach(
        lambda: reward(0.7)("a", "b", seed=1, step=0))


def test_a_rewards_fields_and_bind_are_checked():
    class Noted(MyReward):
        calls = (NOTE,)

        def fields(self):
            return {"note": "yes", "judge": "no"}

        def bind(self, task):
            return task

    reward = edge.reward(lambda: Noted(), MINE)
    assert "fields() returned {'judge': 'no', 'note': 'yes'}, expected a dict from note to text or None" in \
        breach(reward.fields)
    assert "bind() returned 'task', expected the reward itself (return self)" in breach(lambda: reward.bind("task"))
    plain = edge.reward(lambda: MyReward(), MINE)
    assert plain.bind("task") is plain and plain.attach(NOTE, object()) is plain and plain.fields() == {}


def test_what_a_plugin_raises_itself_is_a_breach(monkeypatch):
    def exits(history):
        raise SystemExit(0)

    def interrupts(history):
        raise KeyboardInterrupt

    def fails(history):
        raise ValueError("no index")

    for answer, said in ((exits, "SystemExit(0): a plugin must not end the process"),
                         (interrupts, "KeyboardInterrupt, raised by the plugin itself (no Ctrl-C arrived)"),
                         (fails, "ValueError: no index")):
        with pytest.raises(edge.PluginBreach) as caught:
            checked(Mine(answer)).select(HISTORY, None)
        assert caught.value.line(4) == (f"plugin mine (/x/mine.py) failed in select at step 4: {said}; the 4 steps "
                                        f"before it are kept: once the plugin works, rerun the same command to resume")
        assert signals.stop_in(caught.value) is None  # not taken for a Ctrl-C


def test_what_a_plugin_must_not_hide_passes_on(monkeypatch):
    def pressed(history):  # the user's Ctrl-C arrives while the plugin runs
        signals._count(signal.SIGINT)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checked(Mine(pressed)).select(HISTORY, None)

    def refuses(history):
        raise UsageError("--every needs a history")

    with pytest.raises(UsageError, match="^--every needs a history$"):
        checked(Mine(refuses)).select(HISTORY, None)
    this = plugins.Plugin("test_edge", str(Path(__file__).resolve()), "b" * 64)  # this file's code: a plugin's
    monkeypatch.setitem(plugins._loaded, this.source, this)

    def asks_icrl(history):
        return feedback_message("a", 7)  # icrl's code raises: not the plugin's failure

    with pytest.raises(ValueError, match="feedback must be 1, 0 or 0.5"):
        edge.strategy(lambda: Mine(asks_icrl), this, 3).select(HISTORY, None)


def test_a_copy_checks_a_copy_of_the_part():
    part = Mine()
    strategy = checked(part)
    twin = copy.copy(strategy)
    assert isinstance(twin, edge.CheckedStrategy) and twin._part is not part
    twin.notes = {"note": "another"}  # attributes are the part's
    assert part.notes == {"note": "a guide"} and twin.preamble([], []) == "another"
    assert strategy.max_examples == 3 and strategy.calls == (NOTE,)


def test_a_breach_line_says_the_steps_kept():
    said = edge.PluginBreach(MINE, "select() returned 'abc'", "a list")
    assert said.line() == "plugin mine (/x/mine.py): select() returned 'abc', expected a list; fix the plugin and " \
                          "rerun the same command"
    assert said.line(0) == "plugin mine (/x/mine.py): select() returned 'abc' at step 0, expected a list; fix the " \
                           "plugin and rerun the same command"
    assert said.line(1).endswith("at step 1, expected a list; the step before it is kept: fix the plugin and rerun "
                                 "the same command to resume")


def test_a_plugins_figure_is_checked():
    from matplotlib.figure import Figure

    drawn = Figure()
    assert edge.figure("f", lambda ctx: drawn, MINE)(None) is drawn
    assert edge.figure("f", lambda ctx: "no runs", MINE)(None) == "no runs"
    assert breach(lambda: edge.figure("f", lambda ctx: 42, MINE)(None)) == (
        "plugin mine (/x/mine.py): figure 'f' returned 42, expected a matplotlib figure, or a string saying why it is "
        "skipped; fix the plugin and rerun the same command")
