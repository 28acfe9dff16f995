"""The ONE atomic writer (``write_atomic``: a temporary file next to the target, fsynced, renamed
over it; readers see the old file or the new one, never half of one), and ``writable``: why a
path takes no file, asked before any work that would end in writing it."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import CannotWrite


def _temporary(path: Path) -> tuple[int, str]:
    """A new file next to ``path`` (``.<name>.<random>``), with the umask's mode like any other."""
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_atomic(path: Path, write: Callable[[Any], None], newline: Optional[str] = None,
                 binary: bool = False) -> None:
    """Write a text file through ``write(file)`` so that readers see the old file or the new one,
    never half of one (temporary file, fsync, rename); ``binary``: ``write`` gets a binary file.

    A kill between the two leaves a ``.<name>.<random>`` file; ``remove_leftovers`` clears it.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temporary(path)
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline=newline)) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # said of the user's path: the temporary file is ours
        raise CannotWrite(exc.errno, exc.strerror or str(exc), str(path)) from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def writable(path: Path) -> Optional[str]:
    """Why a file cannot be written at ``path`` (None when it can): a folder in its place, or a
    folder that takes no new file (tried with a temporary file, removed at once)."""
    path = Path(path)
    if path.is_dir():
        return "it is a folder; give a file path"
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is None or not folder.is_dir():
        return f"{folder} is not a folder"
    try:
        fd, tmp = _temporary(folder / path.name)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"{folder} takes no new file ({exc.strerror or exc})"
    return None
