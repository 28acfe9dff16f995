"""One run directory's records: create, append the typed lines, read for resume, repair, and
refresh results.json (the one place it is written, from the records)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from .check import check_test, check_train, inspect_run, plan_of, unresumable
from .io import append_jsonl, parse_jsonl, read_json, remove_leftovers, write_json_atomic, write_jsonl_atomic
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

    def load_for_resume(self, config: Optional[dict] = None) -> tuple[list[dict], list[dict], list[str]]:
        """(train, test, notes) of the complete steps, the files repaired for appending.

        A training line cut short by a kill is removed; any other bad training line stops the
        resume (the steps after it depend on it): DamagedRecords. Test lines stand alone: bad,
        repeated or orphaned ones are dropped (``notes`` says which), valid ones are all kept,
        and test steps missing before the resume point are left for the caller to recompute.
        """
        config = self.config() if config is None else config
        train_ids, steps, test_steps, num_test, mode = plan_of(config)
        path = self.directory / TRAIN
        lines, bad, cut = parse_jsonl(path)
        if mode == "zero_shot":
            train, problem = [], (f"train.jsonl has {len(lines)} lines; a zero-shot run has none" if lines else None)
        else:
            train, problem = check_train(lines, bad, train_ids, steps)
        if problem:
            raise unresumable(self.directory, problem)
        if cut:
            self._rewrite(TRAIN, train)
        done = 1 if mode == "zero_shot" else len(train)
        t_lines, t_bad, t_cut = parse_jsonl(self.directory / TEST)
        test, notes, pending = check_test(t_lines, t_bad, test_steps, done, num_test)
        if mode == "zero_shot":
            test = test[:1]
        if notes or pending or t_cut:
            self._rewrite(TEST, test)
        return train, test, notes

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

    def refresh_results(self, train: Optional[list] = None, test: Optional[list] = None,
                        steps: Optional[int] = None, mode: Optional[str] = None) -> Optional[dict]:
        """Write results.json as the summary of the records, unless it already says that: of the
        given ones (the steps planned, the mode), else of those on disk checked against
        config.json (None when there is no config.json to read)."""
        if train is None:
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
