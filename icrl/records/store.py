"""One run directory's records: create, append the typed lines, rewrite them repaired, and
refresh results.json (the one place it is written, from the records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from .io import append_jsonl, read_json, remove_leftovers, write_json_atomic, write_jsonl_atomic
from .layout import CONFIG, LOG, RESULTS, TEST, TRAIN
from .log import read_log
from .schema import TestLine, TrainLine
from .summary import summarize


class RunRecords:
    """Appends and reads the records of one experiment directory."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    @property
    def exists(self) -> bool:
        return (self.directory / CONFIG).is_file()

    def results(self) -> Optional[dict[str, Any]]:
        path = self.directory / RESULTS
        found: Optional[dict[str, Any]] = read_json(path) if path.is_file() else None
        return found

    def has_steps(self) -> bool:
        """Whether any line of a completed step may be on disk (a run without is no run)."""
        for name in (TRAIN, TEST):
            try:
                if b"\n" in (self.directory / name).read_bytes():
                    return True
            except FileNotFoundError:
                pass
        return False

    def create(self, config: dict[str, Any]) -> None:
        """Start a fresh run: remove old records, write the configuration."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in (TRAIN, TEST, RESULTS, LOG):
            (self.directory / name).unlink(missing_ok=True)
        write_json_atomic(self.directory / CONFIG, config)

    def remove_leftovers(self) -> list[Path]:
        """Temporary files of atomic writes cut short by a kill (call under the run's lock)."""
        return remove_leftovers(self.directory, (CONFIG, RESULTS, TRAIN, TEST))

    def append_train(self, line: TrainLine) -> TrainLine:
        """Write one training step's line (flushed, fsynced); returns it."""
        append_jsonl(self.directory / TRAIN, line.as_json())
        return line

    def append_test(self, line: TestLine) -> TestLine:
        """Write one test step's line; returns it."""
        append_jsonl(self.directory / TEST, line.as_json())
        return line

    def rewrite_train(self, lines: Sequence[TrainLine]) -> None:
        write_jsonl_atomic(self.directory / TRAIN, (line.as_json() for line in lines))

    def rewrite_test(self, lines: Sequence[TestLine]) -> None:
        write_jsonl_atomic(self.directory / TEST, (line.as_json() for line in sorted(lines, key=lambda r: r.step)))

    def refresh_results(self, train: Sequence[TrainLine], test: Sequence[TestLine], steps: int,
                        mode: str) -> dict[str, Any]:
        """Write results.json as the summary of the given lines (the steps planned, the mode),
        unless it already says that."""
        summary = summarize(train, test, steps, mode)
        try:
            current = self.results()
        except (OSError, ValueError):
            current = None  # unreadable: rewritten
        if current != summary:
            write_json_atomic(self.directory / RESULTS, summary)
        return summary

    def refresh_results_from_disk(self) -> Optional[dict[str, Any]]:
        """results.json as the summary of the lines on disk that read back as their types
        (``records.log``), None when the run cannot be read."""
        log = read_log(self.directory)
        if not log.usable or log.config is None:
            return None
        train, test, _ = log.typed()
        resolved = log.config.resolved
        return self.refresh_results(train, test, resolved.steps, resolved.mode)
