"""A run configuration field as a command-line flag: its help, default, the type it parses, its
choices and whether it only turns on (read from the field's declaration, ``icrl.config.flag``)."""

from __future__ import annotations

import functools
from typing import Any, Optional, Union, get_args, get_origin, get_type_hints

from ..config import FIELDS


def help_of(name: str) -> str:
    return str(FIELDS[name][1].metadata["help"])


def default_of(name: str) -> Any:
    return FIELDS[name][1].default


@functools.lru_cache(maxsize=None)
def _annotations(part: type) -> dict[str, Any]:
    """A part's field annotations, resolved once (resolving takes milliseconds per call)."""
    return get_type_hints(part)


def kind_of(name: str) -> type:
    """The type a field's flag parses (its annotation, without ``Optional``)."""
    kind = _annotations(FIELDS[name][0])[name]
    if get_origin(kind) is Union:
        kind = next(a for a in get_args(kind) if a is not type(None))
    found: type = kind
    return found


def choices_of(name: str) -> Optional[list[Any]]:
    """The values a field's flag takes (None: any value of its type)."""
    choices = FIELDS[name][1].metadata.get("choices")
    return list(choices) if choices else None


def is_switch(name: str) -> bool:
    """A true/false field whose flag only turns it on (no ``--no-`` form)."""
    return bool(FIELDS[name][1].metadata.get("switch"))
