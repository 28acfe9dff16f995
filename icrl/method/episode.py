"""One training step's record as the context strategies and the prompt renderer see it
(``Episode``), and what a resumed part of the method reads of a recorded step (``StepRecord``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol


@dataclass(frozen=True)
class Episode:
    """(prompt, prediction, feedback, answer, accuracy, step) for one training example.

    prediction: the model's label; None in supervised ICL (the gold answer is shown instead).
    feedback:   the reward shown in context, 1 or 0 (may differ from accuracy when flipped);
                None in supervised ICL.
    answer:     the gold label.
    accuracy:   1 if prediction == answer else 0; None in supervised ICL.
    step:       the training step it was recorded at (the context's ids in the records).
    """

    prompt: str
    prediction: Optional[str]
    feedback: Optional[float]
    answer: str
    accuracy: Optional[int]
    step: Optional[int] = None


class StepRecord(Protocol):
    """What the method reads back of a recorded training step (``icrl.records.schema.TrainLine``
    is one): a resumed policy, strategy or exploration rebuilds its state from these."""

    step: int
    prompt: str
    prediction: Optional[str]
    answer: str
    accuracy: Optional[int]
    context: list[int]
    metrics: dict[str, Any]
    explored: Optional[bool]
    answers: dict[str, str]  # the declared model calls' answers at this step, by record field

    @property
    def earned(self) -> Optional[float]:
        """The step's reward (the accuracy where no other reward is recorded); None in ICL."""
