"""Summarised histories (ours, after Krishnamurthy et al. 2024 and BanditBench): the prompt holds
a summary of every earlier answer, per label how often the model gave it and how often that
was rewarded, instead of (or before) raw episodes.

- ``summary``: the summary, then the ``--summary_episodes`` most recent episodes (default 0:
  the summary alone).
- ``summary_knn``: the summary, then the ``--summary_episodes`` episodes most similar to the
  input (BM25, as ``knn_lexical``; query-aware).

The summary counts the feedback the prompt would have shown (flipped with
``--icrl_flip_feedback``; 0.5 for a partly right answer under ``--reward coarse_credit``); it
stands after the system prompt and the task description, before the episodes. Its text, for
the toy task after three steps::

    Your answers so far (label: times you gave it, times it was rewarded):
    - billing: 2 given, 1 rewarded
    - refund: 1 given, 0 rewarded
    - delivery: 0 given, 0 rewarded
    - account: 0 given, 0 rewarded

and before the first step ``Your answers so far: none yet.``. A summary counts every episode, so
the episode-only settings (``--context_p_keep``, ``--icrl_omit_feedback``) are refused, and so
is supervised ICL (its episodes have no answer or reward to count).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ...errors import UsageError
from ..episode import Episode
from ..registry import Param
from .base import Setting, Strategy, _any, register_strategy
from .retrieval import KnnLexical

SUMMARY_EPISODES = Param("summary_episodes", 0, "summary strategies: how many episodes follow the summary (summary: "
                         "the most recent; summary_knn: the most similar to the input)", type=int,
                         check=lambda n: None if n >= 0 else "a number of episodes >= 0", folder="sumeps",
                         column="summary_episodes", label="{} episodes", only="llm")
HEADING = "Your answers so far (label: times you gave it, times it was rewarded):"
NOTHING_YET = "Your answers so far: none yet."


def summary_text(history: Sequence[Episode], labels: Sequence[str]) -> str:
    """Per label, how often ``history`` answered it and the feedback it was shown (see the module)."""
    answered = [e for e in history if e.prediction is not None and e.feedback is not None]
    if not answered:
        return NOTHING_YET
    given = {label: 0 for label in labels}
    rewarded = {label: 0.0 for label in labels}
    for e in answered:
        label, shown = e.prediction, e.feedback
        assert label is not None and shown is not None  # answered holds only these
        given[label] = given.get(label, 0) + 1
        rewarded[label] = rewarded.get(label, 0.0) + float(shown)
    lines = [f"- {label}: {given[label]} given, {rewarded[label]:g} rewarded" for label in given]
    return "\n".join([HEADING, *lines])


def refuse_episode_settings(name: str, values: Mapping[str, Any]) -> None:
    """A strategy that summarises every episode takes no setting that drops or hides some."""
    if values.get("context_p_keep", 1.0) != 1.0:
        raise UsageError(f"--context_p_keep keeps or drops episodes; {name} summarises every episode: drop it")
    if values.get("icrl_omit_feedback"):
        raise UsageError(f"--icrl_omit_feedback hides the rewards {name} summarises: drop it")
    if values.get("icrl") is False:
        raise UsageError(f"{name} summarises answers and rewards: supervised ICL (--no-icrl) has neither; use --icrl")


@register_strategy
class Summary(Strategy):
    """A per-label summary of the history, then its most recent episodes."""

    name = "summary"
    family = "summary"
    filters = ("",)
    params = (SUMMARY_EPISODES,)
    reads = ()  # its episodes are --summary_episodes, all of them summarised
    summary = "a per-label summary of the answers and rewards so far, then the --summary_episodes most recent episodes"

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any, episodes: int = 0):
        super().__init__(max_examples, p_keep, accept)
        self.episodes = episodes

    @classmethod
    def build(cls, setting: Setting) -> Summary:
        return cls(setting.max_examples, setting.p_keep, setting.accept, setting.values["summary_episodes"])

    @classmethod
    def check(cls, name: str, values: Mapping[str, Any]) -> None:
        refuse_episode_settings(name, values)

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        return list(history[max(len(history) - self.episodes, 0):]) if self.episodes else []

    def preamble(self, history: Sequence[Episode], labels: Sequence[str]) -> str:
        return summary_text(history, labels)


@register_strategy
class SummaryKnn(Summary):
    """A per-label summary of the history, then the episodes most similar to the input (BM25)."""

    name = "summary_knn"
    query_aware = True
    summary = "a per-label summary of the answers and rewards so far, then the --summary_episodes most similar episodes"

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any, episodes: int = 0):
        super().__init__(max_examples, p_keep, accept, episodes)
        self.knn = KnnLexical.build_for(episodes)

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        return self.knn.select(history, rng, query=query) if self.episodes else []

    def metrics(self) -> dict[str, Any]:
        return self.knn.metrics() if self.episodes else {}
