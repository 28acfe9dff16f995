"""Checks of a run's records against its config.json: which steps are complete and valid, what
is damaged, and whether the run is finished (``inspect_run``; never raises for bad content)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from .io import parse_jsonl, read_json
from .layout import CONFIG, TEST, TRAIN


class DamagedRecords(UsageError):
    """A run's records contradict each other or its config.json (one-line message)."""


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_train(records: list[tuple[int, object]], bad: list[int], train_ids: Optional[list],
                steps: Optional[int]) -> tuple[list[dict], Optional[str]]:
    """(the valid prefix of training records, the first problem or None).

    Line i must be step i (0-based) of the example the configuration planned for it; the
    steps after a bad line depend on it, so the prefix stops there.
    """
    kept: list[dict] = []
    first_bad = bad[0] if bad else None
    for number, record in records:
        if first_bad is not None and number > first_bad:
            break
        i = len(kept)
        if not isinstance(record, dict) or record.get("step") != i:
            got = record.get("step") if isinstance(record, dict) else record
            return kept, f"train.jsonl line {number} is step {got!r}, expected step {i}"
        if train_ids is not None and (i >= len(train_ids) or record.get("example_id") != train_ids[i]):
            planned = train_ids[i] if i < len(train_ids) else "none"
            return kept, (f"train.jsonl line {number} (step {i}) is example {record.get('example_id')!r}, "
                          f"config.json planned {planned!r}")
        kept.append(record)
    if first_bad is not None:
        return kept, f"train.jsonl line {first_bad} is not JSON"
    if steps is not None and len(kept) > steps:
        return kept[:steps], f"train.jsonl has {len(kept)} steps, the run plans {steps}"
    return kept, None


def check_test(records: list[tuple[int, object]], bad: list[int], test_steps: Optional[list],
               done: int, num_test: Optional[int]) -> tuple[list[dict], list[str], list[dict]]:
    """(valid test records of completed steps in step order, problems, records of steps not yet
    completed). Each line stands alone: a bad one costs only its own step."""
    problems = [f"test.jsonl line {n} is not JSON" for n in bad]
    by_step: dict[int, dict] = {}
    pending: list[dict] = []
    planned = set(test_steps) if test_steps is not None else None
    for number, record in records:
        step = record.get("step") if isinstance(record, dict) else None
        if (not isinstance(record, dict) or not isinstance(step, int) or isinstance(step, bool)
                or (planned is not None and step not in planned)):
            problems.append(f"test.jsonl line {number} is not a planned test step ({step!r})")
            continue
        predictions = record.get("predictions")
        if (not _is_number(record.get("accuracy")) or not isinstance(predictions, list)
                or (num_test is not None and len(predictions) != num_test)):
            problems.append(f"test.jsonl line {number} (step {step}) is incomplete")
            continue
        if step >= done:
            pending.append(record)  # written just before a kill cut its step short
            continue
        if step in by_step:
            problems.append(f"test.jsonl line {number} repeats step {step}")
            continue
        by_step[step] = record
    ordered = [by_step[t] for t in sorted(by_step)]
    if list(by_step) != sorted(by_step):
        problems.append("test.jsonl is out of step order")
    return ordered, problems, pending


@dataclass
class RunState:
    """What a run's records say, checked against its config.json (see ``inspect_run``)."""

    directory: Path
    config: Optional[dict] = None
    train: list = field(default_factory=list)
    test: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    complete: bool = False   # every planned step and test step is on disk
    train_problem: Optional[str] = None  # a bad training line that stops a resume (not a cut tail)

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
        resolved = (self.config or {}).get("resolved", {})
        done = self.steps_done
        have = {r["step"] for r in self.test}
        return [t for t in resolved.get("test_steps", []) if t < done and t not in have]

    @property
    def steps_done(self) -> int:
        resolved = (self.config or {}).get("resolved", {})
        if resolved.get("mode") == "zero_shot":
            return 1 if self.test else 0
        return len(self.train)


def plan_of(config: dict) -> tuple[Optional[list], Optional[int], Optional[list], Optional[int], str]:
    """(training ids, steps, test steps, test-set size, mode) planned by a config.json."""
    resolved = config.get("resolved") or {}
    test_set = config.get("test_set") or {}
    ids = test_set.get("ids")
    return (config.get("train_example_ids"), resolved.get("steps"), resolved.get("test_steps"),
            len(ids) if isinstance(ids, list) else None, resolved.get("mode") or "")


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
        train_lines, train_bad, train_cut = parse_jsonl(directory / TRAIN)
        test_lines, test_bad, test_cut = parse_jsonl(directory / TEST)
    except OSError as exc:
        state.problems.append(f"records unreadable ({exc})")
        return state
    if mode == "zero_shot":
        train_ids = []
    state.train, problem = check_train(train_lines, train_bad, train_ids, steps)
    if problem:
        state.problems.append(problem)
        state.train_problem = problem
    if train_cut:
        state.problems.append("train.jsonl ends with a line cut short")
    done = 1 if mode == "zero_shot" else len(state.train)
    state.test, problems, pending = check_test(test_lines, test_bad, test_steps, done, num_test)
    state.problems += problems
    if test_cut:
        state.problems.append("test.jsonl ends with a line cut short")
    if pending and mode != "zero_shot" and len(state.train) == steps:
        state.problems.append(f"test.jsonl has steps after the last one ({[r['step'] for r in pending]})")
    if mode == "zero_shot":
        state.complete = bool(state.test)
    else:
        state.complete = len(state.train) == steps and not state.missing_tests
    if mode != "zero_shot" and len(state.train) == steps and state.missing_tests:
        state.problems.append(f"test steps {state.missing_tests} are missing from test.jsonl")
    return state
