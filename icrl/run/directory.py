"""The run directory: claimed (locked, checked writable) before anything loads, released after;
a directory the run created and that holds no step is removed again."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..infra.lock import DirectoryLock
from ..records import RunRecords

log = logging.getLogger("icrl")


class RunDirectory:
    """One writer per run directory (the kernel releases the lock if the process dies)."""

    def __init__(self, records: RunRecords, output_dir: str):
        self.records, self.output_dir = records, output_dir
        self.path = records.directory
        self.lock = DirectoryLock(self.path)
        self.created: Optional[Path] = None

    def claim(self) -> None:
        """Lock the run directory and make sure it is writable (before anything loads)."""
        self.created = first_missing(self.path)
        try:
            self.lock.acquire()
            with tempfile.TemporaryFile(dir=self.path):
                pass
        except OSError as exc:  # e.g. a folder name too long, after its parents were made: removed again
            self.lock.release(remove=self.created is not None)
            self._remove_created()
            raise UsageError(f"cannot write the run directory {self.path} under --output_dir "
                             f"{self.output_dir!r}: {exc.strerror or exc}") from None
        for path in self.records.remove_leftovers():
            log.info("removed %s, left by a write cut short", path.name)

    def release(self) -> None:
        """Unlock; a directory this process created and that holds no step is removed again
        (a run that failed or was stopped before its first step leaves nothing behind)."""
        created = self.created is not None and self.lock.held and not self.records.has_steps()
        if created:
            for name in ("config.json", "results.json", "log.txt", "train.jsonl", "test.jsonl"):
                (self.path / name).unlink(missing_ok=True)
        self.lock.release(remove=created)
        if created:
            self._remove_created()

    def _remove_created(self) -> None:
        """Remove the run directory and the folders above it that this process made, while empty."""
        if self.created is None:
            return
        directory = self.path
        while True:
            if os.path.isdir(directory):  # False also for a name the system refused: never made
                try:
                    directory.rmdir()
                except OSError:
                    break
            if directory == self.created:
                break
            directory = directory.parent


def first_missing(path: Path) -> Optional[Path]:
    """The outermost folder of ``path`` that does not exist yet (None if it exists)."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing = folder
    return missing
