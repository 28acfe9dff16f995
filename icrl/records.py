"""Experiment records on disk: one directory per experiment, appended as the run goes.

Layout (the published one, so existing habits carry over)::

    <output_dir>/<model>/<task>/<max_context_examples>/<icrl>/<strategy>[_<method>_<K>][_exemplars<n>]/
        <p_keep>/<omit_feedback>/<flip>[_<prob>]/<temperature>/<training_seed>/

Files in it:

- ``config.json``   every argument (never the HF token), resolved settings, package versions,
                    git commit, device, dataset fingerprint, the test set and exemplars.
- ``train.jsonl``   one JSON line per training step (written last for its step).
- ``test.jsonl``    one JSON line per test step.
- ``results.json``  summary, rewritten atomically after each test step (``finished`` flag).
- ``log.txt``       the run's log.

A step is complete once its train line is on disk (its test line, if any, is written just
before). Each append is flushed and fsynced, so a killed run loses at most the step in
flight; a truncated last line is detected and dropped on resume.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional

FORMAT_VERSION = 1
CONFIG, TRAIN, TEST, RESULTS, LOG = "config.json", "train.jsonl", "test.jsonl", "results.json", "log.txt"
MAX_CONTEXT_FILE = "maximum_context_length.json"


def experiment_dir(output_dir, args: dict) -> Path:
    """The published directory layout for one experiment's arguments."""
    strategy = args["context_strategy_name"]
    if strategy.startswith("approximate"):
        strategy = f"{strategy}_{args['approximate_context_sampling_method']}_{args['max_contexts']}"
    if args.get("exemplars_per_label"):
        strategy += f"_exemplars{args['exemplars_per_label']}"
    flip = str(args["icrl_flip_feedback"])
    if args["icrl_flip_feedback"]:
        flip += f"_{args['icrl_flip_feedback_prob']}"
    parts = [args["model_name"], args["task_name"], str(args["max_context_examples"]), str(args["icrl"]),
             strategy, str(args["context_p_keep"]), str(args["icrl_omit_feedback"]), flip,
             str(args["temperature"]), str(args["training_seed"])]
    return Path(output_dir).joinpath(*parts)


def max_context_path(output_dir, model_name: str, task_name: str) -> Path:
    return Path(output_dir) / model_name / task_name / MAX_CONTEXT_FILE


def write_json_atomic(path: Path, data) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_json(path: Path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path: Path, repair: bool = False) -> list[dict]:
    """Every complete line of a JSON-lines file.

    Reading stops at the first line without its newline or that does not parse (a write cut
    short by a kill is the last line); with ``repair`` the file is cut there so appends
    continue cleanly. Lines after it, if any, belong to steps that are then recomputed.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    records, good_end = [], 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            records.append(json.loads(line))
        except ValueError:
            break
        good_end += len(line)
    if repair and good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return records


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
        results = self.results() if self.exists else None
        return bool(results and results.get("finished"))

    def create(self, config: dict) -> None:
        """Start a fresh run: remove old records, write the configuration."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in (TRAIN, TEST, RESULTS, LOG):
            (self.directory / name).unlink(missing_ok=True)
        write_json_atomic(self.directory / CONFIG, config)

    def load_for_resume(self, has_training: bool = True) -> tuple[list[dict], list[dict]]:
        """(train, test) records of the complete steps; drops test lines after them.

        Without training (zero-shot) the single test line is the whole run.
        """
        train = read_jsonl(self.directory / TRAIN, repair=True)
        test = read_jsonl(self.directory / TEST, repair=True)
        done = len(train)
        for i, record in enumerate(train):
            if record["step"] != i:
                raise RuntimeError(f"{self.directory / TRAIN}: line {i + 1} is step {record['step']}, expected {i}")
        kept = [r for r in test if r["step"] < done or not has_training]
        if len(kept) != len(test):
            self._rewrite(TEST, kept)
        return train, kept

    def append(self, name: str, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with open(self.directory / name, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def append_train(self, record: dict) -> None:
        self.append(TRAIN, record)

    def append_test(self, record: dict) -> None:
        self.append(TEST, record)

    def write_results(self, summary: dict) -> None:
        write_json_atomic(self.directory / RESULTS, summary)

    def _rewrite(self, name: str, records: Iterable[dict]) -> None:
        path = self.directory / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def find_runs(root) -> list[Path]:
    """Every experiment directory (one holding config.json) below ``root``."""
    return sorted(p.parent for p in Path(root).rglob(CONFIG))
