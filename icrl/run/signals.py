"""Signals: SIGTERM and SIGHUP stop a run like Ctrl-C does (as ``Interrupted``), and a second
signal cannot cut short the saving of progress after the first."""

from __future__ import annotations

import errno
import signal
import threading

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Errors of a full or read-only disk: a one-line message, not a traceback.
WRITE_ERRORS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class Interrupted(Exception):
    """SIGTERM or SIGHUP arrived (Ctrl-C arrives as KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_interrupted(signum, frame):
    raise Interrupted(signum)


def ignore_signals() -> dict:
    """While saving progress after an interruption, a second signal must not cut it short.
    Returns the handlers to restore (none outside the main thread, where signals cannot be set;
    a sweep's main thread holds them there)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    return previous


def restore(previous: dict) -> None:
    """Put back the handlers ``previous`` maps signals to (None: the default)."""
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def interrupted_by_term() -> dict:
    """SIGTERM and SIGHUP raise Interrupted from now on; returns every handled signal's old handler."""
    previous = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, raise_interrupted)
    return previous
