"""One interface for every agent of a run: the LLM with its context strategy (``llm.LLMPolicy``)
and the bandit learners (``learners.LearnerPolicy``). The loop (``icrl.run.loop``) calls a
policy and the reward function, nothing else:

    decision = policy.act(t, prompt, history)        # a training step: context, prediction
    ... the reward of decision.prediction ...
    predictions, shown = policy.test(t, decision, test_prompts)   # at a test step
    policy.learn(t, decision, reward)                 # once the step's episode is recorded

``replay(records, history)`` rebuilds a resumed run's policy from its training records, as if
they had run live; ``recall(t, records, history)`` gives step t's decision again, for a test
step lost to a kill (recomputed with the policy as it was then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from ..episode import Episode, StepRecord
from ..exploration import Exploration


@dataclass(frozen=True)
class AgentSetting:
    """What a run's agent is built from: ``agent`` (--agent), ``seed`` (--seed), ``temperature``,
    ``omit_feedback`` (--icrl_omit_feedback), ``features`` (--features: a learner's inputs),
    ``values`` (the agents' own parameters by name: --reasoning, a learner's) and
    ``exploration`` (the exploration flags the LLM's policy acts on)."""

    agent: str = "llm"
    seed: int = 0
    temperature: float = 1.0
    omit_feedback: bool = False
    features: str = "tfidf"
    values: Mapping[str, Any] = field(default_factory=dict)
    exploration: Exploration = field(default_factory=Exploration)

    @property
    def reasoning(self) -> Optional[int]:
        """--reasoning: the tokens the model may write before each answer (None: off)."""
        value = self.values.get("reasoning")
        return value if isinstance(value, int) else None


@dataclass
class Decision:
    """What a policy did at one step.

    ``context``: the episodes shown (in context order); ``metrics``: the strategy's or learner's
    metrics of the step; ``prediction``: the label played (None: none, as in supervised ICL,
    which shows the gold answer); ``fields``: the record fields of settings beyond the paper, in
    the record's order (``reset``, ``explored``); ``visible``: the history a query-aware test
    context may draw from; ``explored``: the prediction is a random label, not the model's;
    ``snapshot``: the policy as it was at a recalled step (a learner's test predictions);
    ``preamble``: text the strategy puts before the episodes (a summary, a written guide)."""

    context: list[Episode] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    prediction: Optional[str] = None
    fields: dict[str, Any] = field(default_factory=dict)
    visible: list[Episode] = field(default_factory=list)
    explored: bool = False
    snapshot: Optional[Policy] = None
    preamble: str = ""

    @property
    def context_ids(self) -> list[int]:
        """The steps of the episodes shown (a context holds episodes of the run's history, each with its step)."""
        ids = [episode.step for episode in self.context if episode.step is not None]
        if len(ids) != len(self.context):
            raise ValueError("a context episode has no step: a context holds episodes of the run's history")
        return ids


class Policy:
    """An agent of a run (see the module docstring)."""

    def describe(self) -> dict[str, Any]:
        """config.json "backend": the model the policy calls (``{"name": "none"}`` without one)."""
        return {"name": "none"}

    def act(self, step: int, prompt: str, history: Sequence[Episode]) -> Decision:
        """Training step ``step`` on ``prompt``, after the episodes of steps 0..step-1."""
        raise NotImplementedError

    def learn(self, step: int, decision: Decision, reward: float, answer: str) -> None:
        """The step's reward (and gold answer: only a learner given the gold label reads it)."""

    def test(self, step: int, decision: Decision, prompts: Sequence[str],
             progress: Optional[Callable[[int], None]] = None) -> tuple[list[str], dict[str, Any]]:
        """(a prediction per test prompt, the test record's fields of what was shown:
        ``context_size`` with ``context`` or ``contexts``) with ``decision``'s state; tells
        ``progress`` how many prompts are done."""
        raise NotImplementedError

    def replay(self, records: Sequence[StepRecord], history: Sequence[Episode]) -> None:
        """Rebuild the state after the recorded training steps (resuming)."""

    def recall(self, step: int, records: Sequence[StepRecord], history: Sequence[Episode]) -> Decision:
        """Step ``step``'s decision as recorded, with the state a test at that step needs."""
        raise NotImplementedError
