"""What the method reads of a run's task and data: protocols that ``icrl.tasks.Task`` and
``icrl.run.data.RunData`` satisfy (method/ imports neither: the tasks sit beside it in the
layers, the run above it). ``Row``: the task's example type (``icrl.tasks.Example``)."""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence, TypeVar

Row = TypeVar("Row")


class TaskView(Protocol):
    """A task as the prompts, the rewards and the strategies read it."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Sequence[str]: ...

    @property
    def description(self) -> str: ...

    @property
    def prediction_prefix(self) -> str: ...

    @property
    def hierarchy(self) -> Mapping[str, str]: ...


class TaskRows(TaskView, Protocol[Row]):
    """A task with its training rows and their prompts (a learner's features are made of them)."""

    @property
    def train(self) -> Sequence[Row]: ...

    def prompt(self, example: Row) -> str: ...


class RunStream(Protocol[Row]):
    """A run's data as its agent is built from it: the task, the training stream, the test items
    and the exemplars' (prompt, answer) pairs."""

    @property
    def task(self) -> TaskRows[Row]: ...

    @property
    def train(self) -> Sequence[Row]: ...

    @property
    def test(self) -> Sequence[Row]: ...

    @property
    def exemplar_pairs(self) -> Sequence[tuple[str, str]]: ...
