"""One training step's record as the context strategies and the prompt renderer see it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
    feedback: Optional[int]
    answer: str
    accuracy: Optional[int]
    step: Optional[int] = None
