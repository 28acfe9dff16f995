"""A full disk or a read-only folder is one line (issues 23.3, 25.5).

- ``WRITE_ERRORS``: the errno values that mean "cannot write here" (no space, quota, file
  too large, read-only file system, permissions).
- ``OneLineFileHandler``: a logging file handler that, when its file cannot be written,
  says so once on stderr in one line and stops writing to it, instead of logging's
  "--- Logging error ---" traceback for every message.
- ``guard(main)``: runs a tool's ``main`` and turns a write error that escaped it into one
  line and exit code 2 (the tools' own files are written atomically, so a rerun resumes).
- ``atomic_output(path)``: a file written whole or not at all (a tool's CSV, a figure).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import sys
from pathlib import Path
from typing import Callable

WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


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


@contextlib.contextmanager
def atomic_output(path):
    """``with atomic_output(path) as tmp: write(tmp)``: the file appears whole at ``path`` or
    not at all (the temporary ``.<stem>.<random><suffix>`` beside it, same suffix so writers
    that go by it keep their format, is removed on any failure)."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
