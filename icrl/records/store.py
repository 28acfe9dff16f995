"""One run directory's records: create, append the typed lines, rewrite them repaired, and
refresh results.json (the one place it is written, from the records)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, overload

from .check import inspect_run
from .io import append_jsonl, read_json, remove_leftovers, write_json_atomic, write_jsonl_atomic
from .layout import CONFIG, LOG, RESULTS, TEST, TRAIN
from .schema import TestLine, TrainLine
from .summary import summarize


class RunRecords:
    """Appends and reads the records of one experiment directory."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    @property
    def exists(self) -> bool:
        return (self.directory / CONFIG).is_file()

    def config(self) -> dict:
        return read_json(self.directory / CONFIG)

    def results(self) -> Optional[dict]:
        path = self.directory / RESULTS
        return read_json(path) if path.is_file() else None

    def finished(self) -> bool:
        """Every planned step is on disk and the records agree with config.json."""
        return inspect_run(self.directory).finished

    def has_steps(self) -> bool:
        """Whether any line of a completed step may be on disk (a run without is no run)."""
        for name in (TRAIN, TEST):
            try:
                if b"\n" in (self.directory / name).read_bytes():
                    return True
            except FileNotFoundError:
                pass
        return False

    def create(self, config: dict) -> None:
        """Start a fresh run: remove old records, write the configuration."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in (TRAIN, TEST, RESULTS, LOG):
            (self.directory / name).unlink(missing_ok=True)
        write_json_atomic(self.directory / CONFIG, config)

    def remove_leftovers(self) -> list[Path]:
        """Temporary files of atomic writes cut short by a kill (call under the run's lock)."""
        return remove_leftovers(self.directory, (CONFIG, RESULTS, TRAIN, TEST))

    def append_train(self, line: TrainLine) -> dict:
        """Write one training step's line (flushed, fsynced); returns it as written."""
        record = line.as_json()
        append_jsonl(self.directory / TRAIN, record)
        return record

    def append_test(self, line: TestLine) -> dict:
        """Write one test step's line; returns it as written."""
        record = line.as_json()
        append_jsonl(self.directory / TEST, record)
        return record

    def rewrite_train(self, records: Iterable[dict]) -> None:
        self._rewrite(TRAIN, records)

    def rewrite_test(self, records: Iterable[dict]) -> None:
        self._rewrite(TEST, sorted(records, key=lambda r: r["step"]))

    @overload
    def refresh_results(self, train: list, test: list, steps: int, mode: str) -> dict: ...
    @overload
    def refresh_results(self) -> Optional[dict]: ...

    def refresh_results(self, train: Optional[list] = None, test: Optional[list] = None,
                        steps: Optional[int] = None, mode: Optional[str] = None) -> Optional[dict]:
        """Write results.json as the summary of the records, unless it already says that: of the
        given ones (the steps planned, the mode), else of those on disk checked against
        config.json (None when there is no config.json to read)."""
        if train is None or test is None or steps is None or mode is None:
            state = inspect_run(self.directory)
            if state.config is None:
                return None
            resolved = state.config["resolved"]
            train, test, steps, mode = state.train, state.test, resolved["steps"], resolved["mode"]
        summary = summarize(train, test, steps, mode)
        try:
            current = self.results()
        except (OSError, ValueError):
            current = None  # unreadable: rewritten
        if current != summary:
            write_json_atomic(self.directory / RESULTS, summary)
        return summary

    def _rewrite(self, name: str, records: Iterable[dict]) -> None:
        write_jsonl_atomic(self.directory / name, records)
