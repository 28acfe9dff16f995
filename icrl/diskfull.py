"""A full disk or a read-only folder is one line (issues 23.3, 25.5).

- ``WRITE_ERRORS``: the errno values that mean "cannot write here" (no space, quota, file
  too large, read-only file system, permissions).
- ``OneLineFileHandler``: a logging file handler that, when its file cannot be written,
  says so once on stderr in one line and stops writing to it, instead of logging's
  "--- Logging error ---" traceback for every message.
- ``guard(main)``: runs a tool's ``main`` and turns a write error that escaped it into one
  line and exit code 2 (the tools' own files are written atomically, records.write_atomic, so a rerun resumes).
"""

from __future__ import annotations

import logging
import sys
from typing import Callable

from .run.signals import WRITE_ERRORS



def is_write_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in WRITE_ERRORS


def write_error_line(exc: OSError) -> str:
    where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
    return (f"error: cannot write{where}: {exc.strerror or exc}; free space or fix permissions, then rerun the "
            f"same command")


class OneLineFileHandler(logging.FileHandler):
    """A FileHandler whose failures are one line, once (then it writes nothing more)."""

    failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        if self.failed:
            return
        self.failed = True
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"warning: cannot write the log {self.baseFilename} ({why}); going on without it", file=sys.stderr,
              flush=True)


def guard(main: Callable[[], int]) -> int:
    """``main()``, with a write error that escapes it said in one line (exit code 2)."""
    try:
        return main()
    except OSError as exc:
        if not is_write_error(exc):
            raise
        print(write_error_line(exc), file=sys.stderr)
        return 2
