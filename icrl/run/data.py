"""A run's data: its task, training stream, test set and exemplars, and their record in
config.json (checked again when the run resumes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..config import RunConfig, given
from ..errors import UsageError
from ..records.configfile import ConfigFile
from ..tasks import Example, Task, load_task
from .environment import tell


@dataclass
class RunData:
    task: Task
    train: list[Example]
    test: list[Example]
    exemplars: list[Example] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # not said yet (``load_data(..., say_warnings=False)``)

    @property
    def exemplar_pairs(self) -> list[tuple[str, str]]:
        return [(self.task.prompt(e), self.task.answer(e)) for e in self.exemplars]

    def record(self) -> dict[str, Any]:
        """config.json's "dataset" and "test_set"."""
        task = self.task
        return {
            "dataset": {"task": task.name, "fingerprint": task.fingerprint(), "labels": task.labels,
                        "num_train": task.num_train, "num_test": task.num_test},
            "test_set": {"ids": [e.id for e in self.test], "prompts": [task.prompt(e) for e in self.test],
                         "answers": [task.answer(e) for e in self.test]},
        }


def load_data(config: RunConfig, say_warnings: bool = True, task: Optional[Task] = None) -> RunData:
    """The task's seeded training stream, test set and exemplars; warns when a split is smaller
    than asked (``say_warnings=False``: the warnings are left in ``RunData.warnings``, for the
    caller to say once no check can refuse the run), refuses one that is empty. ``task``: the
    run's task, loaded already (default: loaded here)."""
    s = config.spec
    if task is None:
        task = load_task(given(s.task_name, "task_name"), config.options.data_dir)
    exemplars = task.exemplars(s.exemplars_per_label, given(s.training_seed, "training_seed")) \
        if s.exemplars_per_label else []
    if s.max_context_examples and exemplars and s.max_context_examples <= len(exemplars):
        raise UsageError(f"no room for context episodes: the {len(exemplars)} exemplars fill the "
                         f"{s.max_context_examples} context examples (the published runner subtracts "
                         f"them); lower --exemplars_per_label or raise --max_context_examples")
    train = [] if s.max_context_examples == 0 else \
        task.training_examples(s.train_k, given(s.training_seed, "training_seed"))
    test = task.test_examples(s.test_k, given(s.test_seed, "test_seed"))
    if s.max_context_examples != 0 and not train:
        if task.num_train == 0:
            raise UsageError(f"{task.name} has no training examples: its training split is empty")
        raise UsageError(f"{task.name} has no training examples left after the "
                         f"{len(exemplars)} exemplars")
    if not test:
        raise UsageError(f"{task.name} has no test examples: its test split is empty")
    warnings: list[str] = []
    if s.max_context_examples != 0 and s.train_k != -1 and len(train) < s.train_k:
        warnings.append(f"warning: --train_k {s.train_k} but {task.name} has {len(train)} training examples "
                        f"(after exemplars): running {len(train)} steps")
    if s.test_k != -1 and len(test) < s.test_k:
        warnings.append(f"warning: --test_k {s.test_k} but {task.name} has {len(test)} test examples: "
                        f"testing on {len(test)}")
    if say_warnings:
        for warning in warnings:
            tell(warning)
        warnings = []
    return RunData(task, train, test, exemplars, warnings)


def check_same_data(out_dir: Path, old: ConfigFile, data: RunData) -> None:
    """A resumed run must see the dataset and test set it started with."""
    new = data.record()
    if old.dataset.fingerprint != new["dataset"]["fingerprint"]:
        raise UsageError(f"{out_dir}: the dataset changed since this run started (fingerprint "
                         f"{old.dataset.fingerprint!r} there, {new['dataset']['fingerprint']!r} now); pass "
                         f"--overwrite to start again")
    for key, recorded in (("ids", old.test_set.ids), ("prompts", old.test_set.prompts)):
        if recorded != new["test_set"][key]:
            raise UsageError(f"{out_dir}: the test set's {key} changed since this run started; "
                             f"pass --overwrite to start again")
