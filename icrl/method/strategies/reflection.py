"""A written reflection (ours, after FastICRL's strategist and Reflexion): every
``--reflect_every`` steps the model (the acting one, or ``--reflection_model``) condenses the
history into a short guide, which then stands in the prompt until the next one, before the
``--max_context_examples`` most recent episodes.

The guide is written at steps K, 2K, ... (none before step K) from the reflection prompt
(``reflection_messages``): the task's description and labels, the summary of every answer so
far (as ``summary``), and the last K episodes with their feedback; the model writes up to
``--reflection_tokens`` tokens after ``Guide:`` (free generation at the run's temperature,
seeded ``seed + step + 1000003``, apart from the step's own calls). The training line of that step records it (``reflection``), and every
step's metrics say which step's guide was shown (``reflection_step``, absent before the first).
The prompt shows it after the system prompt and the description::

    A guide you wrote from your earlier answers:
    <the guide>

A resumed run reads the guides back from its records; the guide is never in the episodes.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ...errors import UsageError
from ..calls import Model, ModelCall
from ..episode import Episode, StepRecord
from ..registry import Param
from ..task import TaskView
from .base import Setting, Strategy, _any, register_strategy
from .summary import summary_text

REFLECT_EVERY = Param("reflect_every", 10, "reflection: the model writes a new guide every this many steps", type=int,
                      check=lambda n: None if n >= 1 else "a number of steps >= 1", folder="reflect",
                      column="reflect_every", label="guide every {}", only="llm")
REFLECTION_TOKENS = Param("reflection_tokens", 64, "reflection: the guide's token budget", type=int,
                          check=lambda n: None if n >= 1 else "a number of tokens >= 1", folder="reftok",
                          column="reflection_tokens", only="llm")
REFLECTION_MODEL = Param("reflection_model", None, "reflection: the model that writes the guide (default: the "
                         "acting model), loaded with the same backend", type=str, folder="refmodel",
                         column="reflection_model", only="llm")
GUIDE_HEADING = "A guide you wrote from your earlier answers:"
PREFIX = "Guide:"
SEED_OFFSET = 1000003  # the guide's generation seed: seed + step + this
GUIDE_FIELD = "reflection"  # the training line's field of a guide written at its step
GUIDE = ModelCall("guide", field=GUIDE_FIELD, option="reflection_model", generates=True,
                  budget="reflection_tokens", summary="guides written")


def reflection_messages(task: TaskView, history: Sequence[Episode], window: int) -> list[dict[str, str]]:
    """The messages that ask for a guide (see the module docstring)."""
    recent = "\n".join(f"{e.prompt} -> {e.prediction} ({_said(e.feedback)})" for e in history[-window:])
    return [{"role": "system", "content": "You help a classifier that learns only from feedback on its answers."},
            {"role": "user", "content": f"{task.description}\nLabels: {', '.join(task.labels)}.\n\n"
                                        f"{summary_text(history, task.labels)}\n\nRecent answers:\n{recent}\n\n"
                                        f"Write a short guide (a few sentences) for answering the next inputs."}]


def _said(feedback: Optional[float]) -> str:
    return "right" if feedback == 1 else "wrong" if feedback == 0 else "partly right"


@register_strategy
class Reflection(Strategy):
    """A guide the model writes every K steps, then the most recent episodes."""

    name = "reflection"
    family = "reflection"
    filters = ("",)
    calls = (GUIDE,)
    params = (REFLECT_EVERY, REFLECTION_TOKENS, REFLECTION_MODEL)
    reads = ("max_context_examples",)  # the most recent episodes, every one kept
    summary = "a guide the model writes every --reflect_every steps from its answers and rewards, then the " \
              "most recent episodes"

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any,
                 every: int = 10, tokens: int = 64):
        super().__init__(max_examples, p_keep, accept)
        self.every, self.tokens = every, tokens
        self.writer: Optional[Model] = None  # the model that writes the guides (GUIDE's model: ``attach``)
        self.reset()

    @classmethod
    def build(cls, setting: Setting) -> Reflection:
        v = setting.values
        return cls(setting.max_examples, setting.p_keep, setting.accept, v["reflect_every"], v["reflection_tokens"])

    @classmethod
    def check(cls, name: str, values: Mapping[str, Any]) -> None:
        if values.get("context_p_keep", 1.0) != 1.0:
            raise UsageError(f"--context_p_keep keeps or drops episodes; {name} shows the most recent: drop it")
        if values.get("icrl") is False:
            raise UsageError(f"{name} reflects on answers and rewards: supervised ICL (--no-icrl) has neither; "
                             f"use --icrl")

    def reset(self) -> None:
        self.guide: Optional[str] = None
        self.guide_step: Optional[int] = None

    def due(self, step: int) -> bool:
        """Whether a new guide is written at ``step``."""
        return step > 0 and step % self.every == 0

    def take(self, guide: str, step: int) -> None:
        self.guide, self.guide_step = guide, step

    def attach(self, call: ModelCall, model: Model) -> None:
        self.writer = model

    @classmethod
    def call_prompt(cls, call: ModelCall, task: TaskView, prompt: str,
                    label: str) -> tuple[list[dict[str, str]], str, None]:
        """The smallest prompt of its ``call`` (no history yet): its messages, the prefix, and
        None for the answers (it writes freely; a budget check, ``icrl.run.budgets``)."""
        return reflection_messages(task, [], 1), PREFIX, None

    def prepare(self, step: int, history: Sequence[Episode], task: TaskView, seed: int,
                temperature: float) -> dict[str, Optional[str]]:
        """A new guide at the steps it is due, written by ``writer`` from ``history`` (the
        episodes the step's context may show); the training line records it (``reflection``)."""
        if not self.due(step):
            return {}
        writer = self.writer
        if writer is None:
            raise RuntimeError(f"{self.name}: no model is attached for its {GUIDE.kind} call (attach)")
        prompt = writer.render(reflection_messages(task, history, self.every), PREFIX)
        (written,) = writer.generate([prompt], self.tokens, temperature, seed + step + SEED_OFFSET)
        self.take(written.text.strip(), step)
        return {GUIDE_FIELD: self.guide}

    def restore(self, records: Sequence[StepRecord], upto: int) -> None:
        """The guide in use at step ``upto`` (the last written at or before it), from records."""
        self.reset()
        for record in records[:upto + 1]:
            guide = record.answers.get(GUIDE_FIELD)
            if guide is not None:
                self.take(guide, record.step)

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        return list(history[max(len(history) - self.max_examples, 0):])

    def metrics(self) -> dict[str, Any]:
        return {} if self.guide_step is None else {"reflection_step": self.guide_step}

    def preamble(self, history: Sequence[Episode], labels: Sequence[str]) -> str:
        return "" if self.guide is None else f"{GUIDE_HEADING}\n{self.guide.strip()}"
