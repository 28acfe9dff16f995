"""A run read back for the tools that report on runs (figures and summary tables, the viewer, the
study report, the token counter, the benchmark score): the checks a resume makes, in memory.

    run = read_run(run_dir)       # DamagedRecords (one line) where a resume refuses the run
    run.train, run.test           # TrainLine / TestLine: the lines a resume continues from, repaired
    run.problems                  # what a resume repairs or recomputes; [] for a finished run

``read_run`` reads the run's log (``icrl.records.log.read_log``) and refuses it where a resume
refuses it (config.json missing, unreadable, of other types or contradicting itself; made with
a plugin that is not loaded, or has changed; a training line the steps after it depend on). It
then loads the run's data from the raw files at hand (``icrl.tasks.data_at_hand``: never the
Hugging Face Hub) and runs the resume's records check
on it (``icrl.run.rebuild``: config.json against the data, every line against the line the run
rebuilds), writing nothing: its refusals are the reader's, its repairs the lines the reader
shows and its notes the run's problems. Without the run's data (no raw files at hand, another
version of them), the lines are parsed into their types as they are (``RunLog.typed``) and
checked against what config.json alone can tell (``records.log.record_problems``); ``checked``
says which was done, ``unchecked`` why the data was not used.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..config import RunConfig
from ..errors import UsageError
from ..records import RunLog, read_log
from ..records.configfile import ConfigFile
from ..records.log import record_problems
from ..records.schema import TestLine, TrainLine
from ..tasks import Task, data_at_hand, load_task
from .assemble import build_reward
from .data import RunData, check_same_data, load_data
from .plugins import check_loaded
from .rebuild import check_config, check_records


@dataclass
class CheckedRun:
    """One run as the readers show it (module docstring)."""

    log: RunLog
    train: list[TrainLine] = field(default_factory=list)
    test: list[TestLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checked: bool = False  # the records check ran against the run's data
    unchecked: str = ""    # why not, where it did not

    @property
    def directory(self) -> Path:
        return self.log.directory

    @property
    def config(self) -> ConfigFile:
        return self.log.checked_config()

    @property
    def mode(self) -> str:
        return self.config.resolved.mode

    @property
    def finished(self) -> bool:
        """Complete and nothing to repair: what a resume reports as already finished."""
        return self.log.complete and not self.problems

    @property
    def damage(self) -> str:
        return "; ".join(self.problems)

    @property
    def steps_done(self) -> int:
        if self.mode == "zero_shot":
            return 1 if self.test else 0
        return len(self.train)


@functools.lru_cache(maxsize=8)
def _task(name: str) -> Task:
    return load_task(name)


def _data(config: ConfigFile) -> tuple[Optional[RunData], str]:
    """(the run's data from the raw files at hand, or None and why not)."""
    spec = config.spec
    if spec.task_name is None or not data_at_hand(spec.task_name):
        return None, "its data is not at hand (set ICRL_DATA_DIR to the raw dataset files)"
    try:
        data = load_data(RunConfig(spec), say_warnings=False, task=_task(spec.task_name))
    except UsageError as exc:
        return None, f"its data does not load ({exc})"
    return data, ""


def read_run(directory: Path) -> CheckedRun:
    """The run in ``directory`` checked as a resume checks it (module docstring)."""
    log = read_log(Path(directory)).refuse()
    config = log.checked_config()
    check_loaded(config, log.directory)  # made with a plugin: it is loaded, unchanged (before its names are read)
    data, why = _data(config)
    if data is not None:
        try:
            check_same_data(log.directory, config, data)
        except UsageError as exc:
            data, why = None, f"the data at hand is not the run's ({exc})"
    if data is None:
        train, test, found = log.typed()
        return CheckedRun(log, train, test, log.problems + found + record_problems(config, train, test),
                          unchecked=why)
    plan = check_config(log, data)
    run = RunConfig(config.spec)
    checked = check_records(log, run, data, plan, build_reward(run).bind(data.task))
    return CheckedRun(log, checked.train, checked.test, list(checked.repairs), checked=True)
