"""Folder names from user input that always stay inside ``--output_dir``.

A run's directory is built from its arguments (``records.experiment_dir``); a model given as
a local path (``/abs/models/smol``, ``../smol``, ``~/smol``) or any name holding ``..``
would otherwise escape the output folder (``Path(out).joinpath("/abs")`` is ``/abs``).

- A Hub id (``org/name``) or a plain name (``smollm2-135m``, ``gpt-4o-mini``) that is not a
  local path keeps its layout, as published, so existing runs keep their paths.
- A local path (absolute, ``./``, ``../``, ``~``, or an existing file or folder) becomes
  ``local-<last component>-<8 hex>``: readable, and stable because the hash is of the real
  path (symlinks resolved), so every spelling of one model folder names one run directory.
- Anything else is cleaned component by component (characters other than letters, digits,
  ``.``, ``_`` and ``-`` become ``-``) with a short hash of the original added, so two names
  never share a folder by accident.

``inside(root, *parts)`` joins and checks the result is under ``root`` (a last guard).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Union

from ..errors import UsageError

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _clean(text: str) -> str:
    out = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in text).strip(".-")
    return out or "x"


def _plain(part: str) -> bool:
    return _PLAIN.fullmatch(part) is not None and ".." not in part and not part.endswith(".")


def is_local_path(name: str) -> bool:
    """Whether a model name means a local file or folder (as the backends resolve it)."""
    if name.startswith(("/", "./", "../", "~")) or name in (".", "..") or name.count("/") > 1:
        return True
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):
        return False


def model_folder(name: str) -> str:
    """The relative folder (one or two components) a run of model ``name`` is recorded under."""
    name = str(name)
    if not is_local_path(name):
        parts = name.split("/")
        if len(parts) <= 2 and all(_plain(p) for p in parts):
            return name  # a Hub id or a plain name: the published layout
        return folder_name(name)
    real = os.path.realpath(os.path.expanduser(name))
    return f"local-{_clean(os.path.basename(real.rstrip(os.sep)) or 'root')}-{_digest(real)}"


def folder_name(text: str) -> str:
    """One safe folder name for any text (a task name, a sweep name): unchanged when it is
    already plain, else cleaned with a short hash of the original."""
    text = str(text)
    if _plain(text):
        return text
    return f"{_clean(text)[:60]}-{_digest(text)}"


def inside(root: Union[str, os.PathLike[str]], *parts: Union[str, os.PathLike[str]]) -> Path:
    """``Path(root).joinpath(*parts)``, refused (UsageError) unless it lies under ``root``."""
    root = Path(root)
    path = root.joinpath(*parts)
    base = os.path.normpath(os.path.abspath(root))
    full = os.path.normpath(os.path.abspath(path))
    if full != base and not full.startswith(base.rstrip(os.sep) + os.sep):
        raise UsageError(f"{path} would lie outside {root}; use plain names (no '..', no absolute paths)")
    return path


def check_file_name(option: str, name: str) -> str:
    """A name used as one file name (e.g. a sweep's ``--name``): no folders, no ``..``."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith(".") or "\0" in name:
        raise UsageError(f"{option} {name!r} must be a plain name (letters, digits, '-', '_', '.'; no '/' and "
                         f"not starting with '.'); give a path with --summary instead")
    return name
