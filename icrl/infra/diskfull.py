"""A full disk or a read-only folder is one line.

- ``WRITE_ERRORS``: the errno values that mean "cannot write here" (no space, quota, file
  too large, read-only file system, permissions).
- ``OneLineFileHandler``: a logging file handler that, when its file cannot be written,
  says so once on stderr in one line and stops writing to it, instead of logging's
  "--- Logging error ---" traceback for every message.
- ``guard(main)``: runs a tool's ``main`` and turns a write error that escaped it into one
  line and exit code 2 (the tools' own files are written atomically, records.write_atomic, so a rerun resumes).
- ``os_error_line(exc, rerun)``: that line for any file error a user can fix (a full or
  read-only disk, a file that cannot be read, a folder where a file belongs), else None.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from typing import Any, Callable, Union

from ..errors import CannotWrite
from .signals import WRITE_ERRORS



def write_error_line(exc: OSError, rerun: str = "rerun the same command") -> str:
    where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
    return f"error: cannot write{where}: {exc.strerror or exc}; free space or fix permissions, then {rerun}"


def _unreadable(filename: Union[str, bytes, os.PathLike[str], os.PathLike[bytes], int]) -> bool:
    """An existing file this process may not read (a permission error on it was a read)."""
    try:
        return os.path.isfile(filename) and not os.access(filename, os.R_OK)
    except (TypeError, ValueError):
        return False


def os_error_line(exc: BaseException, rerun: str = "rerun the same command") -> "str | None":
    """One line for a file error the user can fix, or None (a bug: let it show its traceback)."""
    if not isinstance(exc, OSError):
        return None
    name = getattr(exc, "filename", None)
    if exc.errno in (errno.EISDIR, errno.ENOTDIR) and name:
        what = "a folder where a file belongs" if exc.errno == errno.EISDIR else "a path through a file"
        return f"error: {name} is {what}; move it away, then {rerun}"
    if exc.errno in (errno.EACCES, errno.EPERM) and name and _unreadable(name):
        return f"error: cannot read {name}: {exc.strerror}; fix its permissions (chmod u+r), then {rerun}"
    if exc.errno in WRITE_ERRORS or isinstance(exc, CannotWrite):
        return write_error_line(exc, rerun)
    return None


class OneLineFileHandler(logging.FileHandler):
    """A FileHandler whose failures are one line, once (then it writes nothing more).

    ``defer``: the line waits for ``say_pending()``, which the caller calls once its work went
    on (a run: after a step is on disk). A disk too full for the log is usually too full for
    the records too, and then the records' error is the one line the user gets."""

    failed = False

    def __init__(self, *args: Any, defer: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.defer = defer
        self.pending: "str | None" = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if self.failed:
            return
        self.failed = True
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        self.pending = f"warning: cannot write the log {self.baseFilename} ({why}); going on without it"
        if not self.defer:
            self.say_pending()

    def say_pending(self) -> None:
        """Say the failure, if there is one not said yet."""
        if self.pending is not None:
            print(self.pending, file=sys.stderr, flush=True)
            self.pending = None


def guard(main: Callable[[], int]) -> int:
    """``main()``, with a write error that escapes it said in one line (exit code 2)."""
    try:
        return main()
    except OSError as exc:
        line = os_error_line(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
