"""Checks of a run's records against its config.json: which steps are complete and valid, what
is damaged, and whether the run is finished (``inspect_run``; never raises for bad content)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from .io import read_json
from .layout import CONFIG, TEST, TRAIN
from .lines import sort_out


class DamagedRecords(UsageError):
    """A run's records contradict each other or its config.json (one-line message)."""


@dataclass
class RunState:
    """What a run's records say, checked against its config.json (see ``inspect_run``)."""

    directory: Path
    config: Optional[dict] = None
    train: list = field(default_factory=list)
    test: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    complete: bool = False   # every planned step and test step is on disk

    @property
    def finished(self) -> bool:
        """Complete and consistent: the only state in which a run is trusted as done."""
        return self.complete and not self.problems

    @property
    def damage(self) -> str:
        return "; ".join(self.problems)

    @property
    def missing_tests(self) -> list[int]:
        """Planned test steps of completed steps that have no valid record."""
        test_steps = plan_of(self.config or {})[2] or []
        done = self.steps_done
        have = {r["step"] for r in self.test}
        return [t for t in test_steps if t < done and t not in have]

    @property
    def steps_done(self) -> int:
        if plan_of(self.config or {})[4] == "zero_shot":
            return 1 if self.test else 0
        return len(self.train)


def plan_of(config: dict) -> tuple[Optional[list], Optional[int], Optional[list], Optional[int], str]:
    """(training ids, steps, test steps, test-set size, mode) planned by a config.json; None for
    what it does not hold in its type."""
    def section(name: str) -> dict:
        value = config.get(name)
        return value if isinstance(value, dict) else {}

    resolved, ids = section("resolved"), section("test_set").get("ids")
    steps, test_steps, train_ids = resolved.get("steps"), resolved.get("test_steps"), config.get("train_example_ids")
    mode = resolved.get("mode")
    return (train_ids if isinstance(train_ids, list) else None,
            steps if _is_count(steps) else None,
            test_steps if isinstance(test_steps, list) and all(_is_count(t) for t in test_steps) else None,
            len(ids) if isinstance(ids, list) else None, mode if isinstance(mode, str) else "")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def inspect_run(directory) -> RunState:
    """Check a run's records against its config.json; never raises for bad content."""
    directory = Path(directory)
    state = RunState(directory)
    try:
        config = read_json(directory / CONFIG)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        state.problems.append("no config.json")
        return state
    except (OSError, ValueError) as exc:
        state.problems.append(f"config.json unreadable ({exc})")
        return state
    state.config = config
    train_ids, steps, test_steps, num_test, mode = plan_of(config)
    if steps is None or test_steps is None:
        state.problems.append("config.json has no plan (resolved steps and test steps)")
        return state
    try:
        lines = sort_out(directory, steps, test_steps, mode, train_ids, num_test)
    except OSError as exc:
        state.problems.append(f"records unreadable ({exc})")
        return state
    state.train = [record for _, record in lines.train]
    state.test = [lines.test[t][1] for t in sorted(lines.test)]
    if lines.refusal is not None:
        state.problems.append(str(lines.refusal))
    state.problems += lines.notes
    for name, cut in ((TRAIN, lines.cut_train), (TEST, lines.cut_test)):
        if cut:
            state.problems.append(f"{name} ends with a line cut short")
    if lines.pending and mode != "zero_shot" and len(state.train) == steps:
        state.problems.append(f"{TEST} has steps after the last one ({[r['step'] for r in lines.pending]})")
    if mode == "zero_shot":
        state.complete = bool(state.test)
    else:
        state.complete = len(state.train) == steps and not state.missing_tests
    if mode != "zero_shot" and len(state.train) == steps and state.missing_tests:
        state.problems.append(f"test steps {state.missing_tests} are missing from {TEST}")
    return state
