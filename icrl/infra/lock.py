"""One writer per directory: an advisory OS lock that the kernel releases when its holder dies.

    from icrl.infra.lock import DirectoryLock, Locked
    lock = DirectoryLock(run_dir)      # lock file: run_dir/.lock (created, never deleted)
    lock.acquire()                     # raises Locked (a UsageError) naming the holder
    ...
    lock.release()                     # or: with DirectoryLock(run_dir): ...

The lock is ``fcntl.flock`` on ``<directory>/.lock``: a killed process (even by SIGKILL)
holds it no longer, so a stale lock file never blocks anyone. The file holds the holder's
pid, host and command, which the error of a second process shows. One process may hold
locks on many directories at once (a sweep runner); locking the same directory twice from
one process fails like any other second writer. POSIX only (uses fcntl).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ..errors import UsageError

LOCK_FILE = ".lock"


class Locked(UsageError):
    """Another process holds the lock (the message names it)."""


class DirectoryLock:
    """Exclusive, non-blocking lock on one directory (see the module docstring)."""

    def __init__(self, directory: Union[str, os.PathLike[str]], name: str = LOCK_FILE) -> None:
        self.directory = Path(directory)
        self.path = self.directory / name
        self._fd: Optional[int] = None
        self._dir_fd: Optional[int] = None  # the directory itself, locked too (see _lock_directory)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait: bool = False) -> "DirectoryLock":
        """Take the lock, or raise Locked at once (``wait``: block until it is free).
        Creates the directory."""
        if self._fd is not None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            _flock(fd, wait, lambda: f"{self.directory} is in use by another run ({self.holder_text()}); "
                                     f"wait for it to finish or stop it")
            if _same_file(fd, self.path):
                break
            os.close(fd)  # its holder removed the file before we got it: lock the new one
        try:
            self._dir_fd = _lock_directory(self.directory, wait, self.holder_text)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command(),
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        return self

    def release(self, remove: bool = False) -> None:
        """Let go; ``remove`` also deletes the lock file (safe: a waiting process re-checks)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        try:
            if remove:
                self.path.unlink(missing_ok=True)
            else:
                os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # closing the descriptor releases the flock

    def check(self) -> None:
        """Before a write: the locked directory is still the one at its path (not removed or
        replaced while the run went on), else a UsageError."""
        if self._dir_fd is not None and not _same_file(self._dir_fd, self.directory):
            raise UsageError(f"{self.directory} was removed or replaced while this run was writing to it; "
                             f"stopped (rerun the command to start it again)")

    def holder(self) -> dict[str, Any]:
        """What the lock file says about its holder ({} when unreadable)."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def holder_text(self) -> str:
        info = self.holder()
        if not info:
            return "holder unknown"
        return f"pid {info.get('pid')} on {info.get('host')}: {info.get('command')}"

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_directory(directory: Path, wait: bool, holder_text: Callable[[], str]) -> int:
    """flock the directory itself: deleting the lock file does not let a second writer in
    (both locks are taken; a writer holding the file's lock also holds the directory's)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    _flock(fd, wait, lambda: f"{directory} is in use by another run ({holder_text()}; its lock file was "
                             f"removed); wait for it to finish or stop it")
    return fd


def _flock(fd: int, wait: bool, busy: Callable[[], str]) -> None:
    """flock ``fd`` exclusively (``wait``: block); when it is held elsewhere, close ``fd`` and
    raise Locked(``busy()``); on any other failure close ``fd`` and re-raise."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Locked(busy()) from None
    except BaseException:
        os.close(fd)
        raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)




def _command() -> str:
    """This process's command line, secrets (every spelling of ``--hf_token`` and ``--api_key``,
    URL passwords) replaced by *** (icrl.infra.masking)."""
    from ..infra.masking import mask_words

    return " ".join(mask_words(sys.argv))
