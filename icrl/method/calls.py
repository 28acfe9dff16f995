"""The model calls of a run, each declared once by the part that makes it.

A part of the method that asks a model something declares the call (``ModelCall``): its kind,
the record field that keeps what the model answered, and the setting that names the model that
answers it (None: the acting model). The composition root (``icrl.run.assemble``) hands each
part the model of each call it declares; the experiment plugs in the real models, the records
check a model that answers from the records, the cost estimate a stand-in. The records check,
the token counter and the estimate read the declarations: a new call is taught to them by its
declaration alone.

The acting model's own calls are declared here (``ANSWER``: a training input's label, with
--reasoning the reasoning before it; ``TEST_ANSWER``: the test inputs' labels); a strategy
declares its calls in ``Strategy.calls`` (a written guide), a reward in ``Reward.calls`` (a
model's verdict). A part that declares calls may say the smallest prompt of each
(``call_prompt(call, task, prompt, label)``: messages, prefix, the answers or None for free
text), so that its budget is checked against its model's window before any model loads
(``icrl.run.budgets``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from .episode import StepRecord


@dataclass(frozen=True)
class ModelCall:
    """One kind of model call. ``kind``: its name; ``field``: the training line's field that
    records its answer (None: the call's answer is the line's own prediction); ``option``: the
    run setting that names the model answering it (None: the acting model); ``generates``: the
    call writes text freely (its budget: the setting ``budget``), not a label; ``summary``: how
    a report names its calls."""

    kind: str
    field: Optional[str] = None
    option: Optional[str] = None
    generates: bool = False
    budget: Optional[str] = None
    summary: str = ""

    def model_name(self, options: Mapping[str, Any]) -> Optional[str]:
        """The name of the model that answers it in a run whose settings name ``options`` (the
        declared options' values by name; None: the acting model)."""
        name = options.get(self.option) if self.option else None
        return name if isinstance(name, str) and name else None

    def answered(self, record: StepRecord) -> bool:
        """Whether a training line records an answer of this call."""
        return self.field is not None and record.answers.get(self.field) is not None


ANSWER = ModelCall("answer", summary="training calls")
TEST_ANSWER = ModelCall("test_answer", summary="test calls")

# The model of each declared call: models(call) -> a backend (the acting model for ANSWER).
Models = Callable[[ModelCall], Any]


class Written(Protocol):
    """What a model wrote freely after one prompt (``icrl.backends.Generated``)."""

    @property
    def text(self) -> str: ...

    @property
    def tokens(self) -> int: ...


class Model(Protocol):
    """What a part asks of the model of a call it declares (``icrl.backends.Backend`` and
    ``Reasoner`` have it; so do the stand-ins of the records check and the estimate): a rendered
    prompt, a label among ``labels`` after each prompt, free text after each prompt."""

    def render(self, messages: Sequence[dict[str, str]], prefix: str) -> str: ...

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]: ...

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> Sequence[Written]: ...


def declared_calls(*parts: object) -> list[ModelCall]:
    """The calls that ``parts`` (a strategy, a reward, None for none) declare, each once, in order."""
    out: list[ModelCall] = []
    for part in parts:
        for call in getattr(part, "calls", ()):
            if call not in out:
                out.append(call)
    return out
