"""Signals: which stop a run, and how the stop is said.

SIGINT (Ctrl-C) and SIGTERM stop a run or a sweep cleanly (SIGTERM as ``Interrupted``;
finished steps saved, exit 128 + signal, a resume hint). SIGHUP does too, but only for a run
attached to a terminal: a process that ignores SIGHUP when it starts (``nohup``, or a parent
that set it ignored) keeps ignoring it, and so does one running detached (its own session
without a terminal, e.g. ``setsid``); there a closed terminal or a stray HUP is not a stop
request.

``install(handler)`` sets the handlers (main thread only) and returns what to ``restore``;
a signal that lands inside Python's import machinery (where an exception can be swallowed)
is delivered again 50 ms later, and so is one whose exception a C extension swallowed and
handed to ``sys.unraisablehook`` (a uvloop or pydantic-core callback: "Exception ignored in
..."; said nowhere, since the stop is still to come); it is raised by ``check()`` at the latest (the run checks
before each step, the server backend after each batch of requests), as is one raised where a
library swallowed it (asyncio's callbacks catch every exception); after a stop, ``ignore_signals()``
keeps a second signal from cutting the saving or the exit short; ``say(message)`` puts the message
on its own line, after any progress bar.

``arrivals()`` counts the Ctrl-Cs that reached a handler of this module, and ``count_interrupts()``
gives a script that installs none a handler that counts them and raises KeyboardInterrupt as
Python's own does: a KeyboardInterrupt raised while none arrived was raised by code itself (a
plugin's: ``icrl.infra.plugins.asked_to_stop``), not by the user.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable, Mapping, NoReturn, Optional, Union

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A Python-level signal handler, and what ``signal.getsignal`` may give back (as the stdlib's stubs say).
Handler = Callable[[int, Optional[FrameType]], Any]
AnyHandler = Union[Handler, int, signal.Handlers, None]
Previous = dict[int, AnyHandler]  # signum -> the handler to put back
# Errors of a full or read-only disk: a one-line message, not a traceback.
WRITE_ERRORS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (Ctrl-C arrives as KeyboardInterrupt). A BaseException like
    KeyboardInterrupt, so that no ``except Exception`` (in a library's import) swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_in(exc: BaseException) -> Optional[int]:
    """The number of the signal whose stop is in ``exc``'s chain of causes (Ctrl-C: SIGINT), or
    None: a signal raised inside a class's creation reaches the caller as a RuntimeError caused by
    it (``__set_name__``), one inside a C extension's import as an ImportError."""
    seen: set[int] = set()
    link: Optional[BaseException] = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, Interrupted):
            return link.signum
        if isinstance(link, KeyboardInterrupt):
            return int(signal.SIGINT)
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def raise_interrupted(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise Interrupted(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def detached() -> bool:
    """Its own session and no controlling terminal (``setsid``, a daemon): nothing can hang up."""
    try:
        if os.getsid(0) != os.getpid():
            return False
        fd = os.open("/dev/tty", os.O_RDONLY | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return True
    os.close(fd)
    return False


def hangup_stops(previous: AnyHandler) -> bool:
    """Whether SIGHUP is a stop request for this process (see the module docstring)."""
    return previous is not signal.SIG_IGN and not detached()


_pending: dict[int, Handler] = {}  # signum -> handler, for a stop that could not be raised where it arrived
_arrived: dict[int, int] = {}  # signum -> how many times it reached a handler of this module


def arrivals(signum: int = signal.SIGINT) -> int:
    """How many times ``signum`` (Ctrl-C by default) reached a handler of this module so far."""
    return _arrived.get(signum, 0)


def _count(signum: int) -> None:
    _arrived[signum] = _arrived.get(signum, 0) + 1


def _in_import(frame: Optional[FrameType]) -> bool:
    """Inside Python's import machinery (e.g. its module-lock callback), where an exception
    may be printed and swallowed ("Exception ignored in ...") instead of stopping the run."""
    return frame is not None and "importlib._bootstrap" in frame.f_code.co_filename


def _deliver_again(signum: int) -> None:
    """Send ``signum`` to this process again in 50 ms, unless ``check()`` or ``restore()`` has
    dealt with the stop by then (a default handler put back must not meet it)."""
    def again() -> None:
        if signum in _pending:
            os.kill(os.getpid(), signum)
    timer = threading.Timer(0.05, again)
    timer.daemon = True
    timer.start()


def _on_unraisable(unraisable: Any) -> None:
    """A stop raised where a C extension could only print it ("Exception ignored in ..."):
    delivered again instead of printed. Anything else goes to the hook that was there."""
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, (KeyboardInterrupt, Interrupted)) and _pending:
        _deliver_again(next(iter(_pending)))
        return
    _hook_before(unraisable)


_hook_before: Callable[[Any], Any] = sys.unraisablehook


def _stopper(handler: Handler) -> Handler:
    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        _count(signum)
        if _in_import(frame):  # deliver it again in a moment, and at the next check() at the latest
            _pending[signum] = handler
            _deliver_again(signum)
            return
        _pending.clear()
        _pending[signum] = handler  # kept: raised again by check() if a library swallows this one
        handler(signum, frame)
    return on_signal


def _keyboard_interrupt(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise KeyboardInterrupt


def _counted_interrupt(signum: int, frame: Optional[FrameType]) -> NoReturn:
    _count(signum)
    raise KeyboardInterrupt


def count_interrupts() -> None:
    """Where Ctrl-C still has Python's own handler (main thread only), one that counts it
    (``arrivals``) and raises KeyboardInterrupt just as Python's does."""
    if _main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _counted_interrupt)


def install(handler: Handler) -> Previous:
    """SIGINT -> KeyboardInterrupt, SIGTERM (and SIGHUP where it is a stop request) ->
    ``handler``; a signal that arrives inside an import is raised at the next ``check()``.
    Returns the previous handlers for ``restore`` ({} outside the main thread)."""
    if not _main_thread():
        return {}
    global _hook_before
    previous: Previous = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    _pending.clear()
    if sys.unraisablehook is not _on_unraisable:
        _hook_before, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    if previous[signal.SIGINT] is not signal.SIG_IGN:  # a background job of a shell ignores Ctrl-C
        signal.signal(signal.SIGINT, _stopper(_keyboard_interrupt))
    signal.signal(signal.SIGTERM, _stopper(handler))
    if hangup_stops(previous[signal.SIGHUP]):
        signal.signal(signal.SIGHUP, _stopper(handler))
    else:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return previous


def check() -> None:
    """Raise a stop that arrived where it could not be raised (main thread only; once)."""
    if _pending and _main_thread():
        signum, handler = _pending.popitem()
        _pending.clear()
        handler(signum, None)


def say(message: str) -> None:
    """``message`` on stderr on a line of its own: an open progress bar is closed first."""
    tqdm = sys.modules.get("tqdm")
    bars = list(getattr(getattr(tqdm, "tqdm", None), "_instances", ()) or ()) if tqdm else []
    for bar in bars:
        try:
            bar.close()
        except Exception:  # noqa: BLE001 - a bar that cannot close must not hide the message
            pass
    sys.stderr.flush()
    print(message, file=sys.stderr, flush=True)


def ignore_signals() -> Previous:
    """After a stop, a second signal must not cut the saving of progress or the exit short.
    Returns the handlers to restore ({} outside the main thread, where signals cannot be set;
    a sweep's main thread holds them there)."""
    if not _main_thread():
        return {}
    previous: Previous = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    return previous


def restore(previous: Mapping[int, AnyHandler]) -> None:
    """Put back the handlers ``previous`` maps signals to (None: the default)."""
    if not _main_thread():
        return
    _pending.clear()
    if sys.unraisablehook is _on_unraisable:
        sys.unraisablehook = _hook_before
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def interrupted_by_term() -> Previous:
    """The run's handlers: ``install(raise_interrupted)``; returns every handled signal's old handler."""
    return install(raise_interrupted)
