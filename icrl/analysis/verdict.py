"""Did ICRL beat zero-shot? Final test accuracy against zero-shot, with Wilson intervals.

``wilson_interval`` is the score interval for a binomial proportion (Wilson 1927): unlike
the normal approximation it stays inside [0, 1] and behaves at 0 or n successes and for the
small test sets of CPU runs. ``compare`` calls a difference real only when the two 95%
intervals do not overlap (a conservative reading, said in every verdict).
``verdicts`` applies it to every model, task and test set that has both an ICRL run and a
zero-shot reference; run_draw_plots.py prints them and writes them into the figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

Z95 = 1.959963984540054  # two-sided 95%
SMALL_MODEL = 1e9  # parameters: below this the paper's in-context learning is not expected


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) Wilson score interval for ``successes`` out of ``n`` (n > 0)."""
    if n <= 0:
        raise ValueError(f"a proportion needs n > 0 trials, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def compare(accuracy: float, n: int, reference: float, n_reference: int) -> str:
    """"above", "below" or "same" (the 95% Wilson intervals overlap) for ``accuracy`` on ``n``
    test items against ``reference`` on ``n_reference``."""
    lo, hi = wilson_interval(round(accuracy * n), n)
    ref_lo, ref_hi = wilson_interval(round(reference * n_reference), n_reference)
    if lo > ref_hi:
        return "above"
    if hi < ref_lo:
        return "below"
    return "same"


# The paper's methods (Monea et al. 2024), in legend order (icrl.analysis.runs.METHODS).
PAPER_METHODS = ("naive", "naive+", "explorative", "approximate")
# The p_keep of random_unbiased_only_positive that names a run explorative ICRL (run_draw_plots.py
# --explorative_p_keep; here, in a module without pandas, for the script's parser).
DEFAULT_EXPLORATIVE_P_KEEP = 0.1


def headline_of(method: str, outcome: str) -> str:
    """The verdict's headline for an outcome ("above", "below" or "same"), Wilson or paired; a
    paper method (with its settings, "explorative (p=0.1, m=16)") is called "... ICRL"."""
    name = f"{method} ICRL" if method.split(" (")[0] in PAPER_METHODS else method
    return {"above": f"{name} beat zero-shot", "below": f"{name} fell below zero-shot",
            "same": f"{name} did not beat zero-shot (no difference beyond noise)"}[outcome]


def advice_of(outcome: str, model_params: float) -> Optional[str]:
    """What to try when a method did not beat zero-shot (None when it did)."""
    if outcome == "above" or math.isnan(model_params):  # beat it, or no model (a learner)
        return None
    if model_params < SMALL_MODEL:
        return ("expected at this size (under 1B parameters): the effect needs a larger model "
                "(README: What the demo shows)")
    return "try more steps, another strategy or a larger model"


class Worded:
    """The headline and advice of a verdict with ``method``, ``outcome`` and ``model_params``
    (the Wilson verdict here, the paired one in paired.py)."""

    if TYPE_CHECKING:  # what each verdict has (a field, or the paired one's ``outcome`` property)
        method: str
        model_params: float  # NaN: no model (a learner)

        @property
        def outcome(self) -> str: ...  # "above", "below" or "same"

    @property
    def headline(self) -> str:
        return headline_of(self.method, self.outcome)

    @property
    def advice(self) -> Optional[str]:
        return advice_of(self.outcome, self.model_params)


@dataclass
class Verdict(Worded):
    model: str
    task: str
    method: str          # the ICRL method (or its label)
    steps: int
    accuracy: float      # final test accuracy (mean over seeds)
    n: int               # test items (pooled over seeds)
    reference: float     # zero-shot accuracy
    n_reference: int
    reference_name: str  # "zero-shot run" or "naive ICRL at step 0"
    model_params: float = math.inf

    @property
    def outcome(self) -> str:
        return compare(self.accuracy, self.n, self.reference, self.n_reference)

    def interval(self, reference: bool = False) -> str:
        acc, n = (self.reference, self.n_reference) if reference else (self.accuracy, self.n)
        lo, hi = wilson_interval(round(acc * n), n)
        return f"{acc:.3f} [{lo:.3f}, {hi:.3f}]"

    def line(self) -> str:
        """One console line: model, task, both accuracies with intervals, the verdict."""
        text = (f"{self.model} / {self.task}: {self.headline}: final test accuracy after {self.steps} steps "
                f"{self.interval()} vs {self.reference_name} {self.interval(reference=True)} "
                f"(Wilson 95%, {self.n} and {self.n_reference} test items; a difference counts when the "
                f"intervals do not overlap)")
        return text + (f"; {self.advice}" if self.advice else "")

    def short(self) -> str:
        """One short line for a figure panel (see ``panel_note`` for the line under them)."""
        verdict = {"above": "beat zero-shot", "below": "below zero-shot",
                   "same": "did not beat zero-shot"}[self.outcome]
        return f"{self.method} {self.interval()} vs {self.interval(reference=True)}: {verdict}"


def panel_note(verdicts: Sequence[Worded]) -> str:
    """What the numbers of ``Verdict.short`` are, and for a small model that did not beat
    zero-shot, that the effect needs a larger one."""
    note = "final test accuracy vs zero-shot, 95% Wilson intervals"
    if any(v.outcome != "above" and v.model_params < SMALL_MODEL for v in verdicts):
        note += "; the effect needs a larger model"
    return note
