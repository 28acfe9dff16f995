"""A run's records read back typed, for every tool that reports on runs (figures and summary
tables, the viewer, the study report, the token counter, the benchmark score).

``read_run(directory)`` checks the run as ``inspect_run`` does (steps against config.json: what
is wrong there is the run's ``damage``, and such a run is not finished, as before), and then
parses through the schema every line of train.jsonl and test.jsonl (``TrainLine.from_json``,
``TestLine.from_json``: every field of the right type, none missing, none unknown) and the
whole of config.json (``args`` against ``config.RunSpec``, every other section and field the
schema names against it: ``check_config``, which a resume runs too). A line or a section that
does not parse raises ``DamagedRecords`` in one line naming the file, the line and the field and
what it should hold, before the tool has written anything: the scripts print it and exit 2. A line that is not
JSON at all stays what ``inspect_run`` makes of it (damage; the lines before it are read).

``TypedRun`` is what the readers get: the run's config.json (checked), its lines as
``TrainLine`` and ``TestLine`` (those ``inspect_run`` keeps: the steps a resume would continue
from, sorted out by ``records.lines``, and the test steps of completed steps), its results.json
(checked against ``ResultsFile``; {} when there is none or it is not JSON: the records say what
the run did, and a resumed run rewrites it), and the state of the check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from .check import DamagedRecords, RunState, inspect_run
from .io import parse_jsonl, read_json
from .layout import CONFIG, RESULTS, TEST, TRAIN
from .schema import (BackendRecord, Dataset, Environment, Exemplar, Extension, Resolved, ResultsFile, RuntimeArgs,
                     TestLine, TestSet, TrainLine)
from .typed import check_mapping, hints


@dataclass
class TypedRun:
    """One run's records as the readers use them (see ``read_run``)."""

    state: RunState
    train: list[TrainLine] = field(default_factory=list)
    test: list[TestLine] = field(default_factory=list)
    results: dict = field(default_factory=dict)  # results.json, checked

    @property
    def directory(self) -> Path:
        return self.state.directory

    @property
    def config(self) -> Optional[dict]:
        """config.json, its sections the readers use checked; None when unreadable."""
        return self.state.config

    @property
    def problems(self) -> list:
        return self.state.problems

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def damage(self) -> str:
        return self.state.damage

    @property
    def steps_done(self) -> int:
        return self.state.steps_done


def check_config(config: dict, path: Path) -> dict:
    """``config`` with every section the schema names checked against its types (keys other than
    those the schema names pass, so runs of a plugin read too); DamagedRecords otherwise. The
    readers and a resume check config.json so."""
    check_mapping(config, {"format_version": int, "created": str, "train_example_ids": List[int],
                           "exemplars": List[Exemplar], "extended": List[Extension]}, str(path))
    for section, types in (("args", args_types()), ("runtime_args", hints(RuntimeArgs)), ("resolved", hints(Resolved)),
                           ("backend", hints(BackendRecord)), ("environment", hints(Environment)),
                           ("dataset", hints(Dataset)), ("test_set", hints(TestSet))):
        if section in config:
            check_mapping(config[section], types, f"{path} {section}")
    return config


def args_types() -> dict:
    """config.json ``args``: name -> type, as ``config.RunSpec`` declares them, each also null (a
    setting one kind of run does not use is recorded as null by it: a learner's model name)."""
    from ..config import RunSpec  # the run's settings: their types are the parser's

    return {name: Optional[kind] for name, kind in hints(RunSpec).items()}


def read_lines(path: Path, typed) -> None:
    """Parse every JSON line of ``path`` as ``typed`` (``TrainLine``, ``TestLine``);
    DamagedRecords naming the file, the line and the field for the first that does not fit."""
    try:
        lines, _, _ = parse_jsonl(path)
    except OSError:
        return  # unreadable: the run's damage already says so
    for number, record in lines:
        typed.from_json(record, f"{path} line {number}")


FIX = "restore it as the run wrote it, or run the run again (--overwrite)"


def read_run(directory) -> TypedRun:
    """The run's records read back typed (see the module docstring); a run whose config.json
    cannot be read has none (``config`` None: the readers skip it with a note, as before)."""
    try:
        return _read_run(Path(directory))
    except DamagedRecords as exc:
        raise DamagedRecords(f"{exc}; {FIX}") from None


def read_results(directory: Path) -> dict:
    """results.json with every field the schema names checked (``ResultsFile``): DamagedRecords
    naming the file and the field otherwise; {} when there is none or it is not JSON."""
    path = directory / RESULTS
    try:
        results = read_json(path) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return check_mapping(results, hints(ResultsFile), str(path))


def _read_run(directory: Path) -> TypedRun:
    try:  # checked before inspect_run compares the records with it
        config = read_json(directory / CONFIG)
    except (OSError, ValueError):
        config = None  # unreadable: inspect_run says why
    if isinstance(config, dict):
        check_config(config, directory / CONFIG)
    state = inspect_run(directory)
    if state.config is None:
        return TypedRun(state)
    read_lines(state.directory / TRAIN, TrainLine)
    read_lines(state.directory / TEST, TestLine)
    # the lines inspect_run kept (read a moment before: a run may be appending), as the types
    train = [TrainLine.from_json(r, f"{state.directory / TRAIN} line {i}") for i, r in enumerate(state.train, 1)]
    test = [TestLine.from_json(r, f"{state.directory / TEST} step {r.get('step')}") for r in state.test]
    return TypedRun(state, train, test, read_results(state.directory))
