"""A JSON value checked against a Python annotation: the strict parse of every record line.

``parse_dataclass(cls, record, where)`` turns a record (a JSON object) into the dataclass ``cls``
(``TrainLine``, ``TestLine``), checking every field against its annotation; ``check_mapping``
checks the keys a JSON object has against a TypedDict's or a dataclass's annotations (the
parts of config.json the readers use). What an annotation admits:

- ``int``: a JSON integer, never ``true``/``false``; ``float``: any JSON number but a boolean;
  ``str``, ``bool``: themselves;
- ``Optional[X]``: null or X; ``Union[X, Y]``: X or Y; ``Any``: anything;
- ``List[X]``/``list``: an array (of X); ``Dict[str, X]``/``dict``: an object (of X);
- a TypedDict: an object with exactly its keys, each of its type.

What does not fit raises ``DamagedRecords`` in one line: ``where`` (the file and its line),
the field, what it holds and what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Union

from .check import DamagedRecords
from .lines import is_int, is_number

_WORDS = {int: "an integer", float: "a number", str: "text", bool: "true or false", dict: "an object",
          list: "a list", type(None): "null"}


def fits(value, annotation) -> bool:
    """Whether the JSON ``value`` is of type ``annotation`` (see the module docstring)."""
    if annotation is Any:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return any(fits(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and (not args or all(fits(x, args[0]) for x in value))
    if origin is dict:
        return isinstance(value, dict) and (not args or all(fits(k, args[0]) and fits(v, args[1])
                                                            for k, v in value.items()))
    if typing.is_typeddict(annotation):
        types = hints(annotation)
        return isinstance(value, dict) and set(value) == set(types) and all(fits(value[k], t) for k, t in types.items())
    if annotation is float:
        return is_number(value)
    if annotation is int:
        return is_int(value)
    if annotation is type(None):
        return value is None
    return isinstance(value, annotation)


def expected(annotation) -> str:
    """``annotation`` in words: "text or null", "a list of integers", ..."""
    if annotation is Any:
        return "any value"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return " or ".join(expected(a) for a in sorted(args, key=lambda a: a is type(None)))
    if origin is list:
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is dict:
        return f"an object of {_plural(args[1])}" if args else "an object"
    if typing.is_typeddict(annotation):
        return f"an object of exactly {', '.join(f'{k} ({expected(t)})' for k, t in hints(annotation).items())}"
    return _WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _plural(annotation) -> str:
    words = expected(annotation)
    for one, many in (("an integer", "integers"), ("a number", "numbers"), ("a list of", "lists of"),
                      ("an object", "objects")):
        if words.startswith(one):
            return many + words[len(one):]
    return "texts" if words == "text" else words


def shown(value) -> str:
    """A JSON value as a person reads it in an error: its text, cut to 40 characters."""
    text = "null" if value is None else "true" if value is True else "false" if value is False else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@functools.lru_cache(maxsize=None)
def hints(cls) -> dict:
    """The resolved annotations of a dataclass or TypedDict (once per class)."""
    return typing.get_type_hints(cls)


def check_mapping(value, types: dict, where: str, required=()) -> dict:
    """``value``, checked: a JSON object whose keys named in ``types`` (name -> annotation, e.g.
    ``hints(cls)``) fit their annotation (other keys pass) and that has every key of
    ``required``; DamagedRecords otherwise."""
    if not isinstance(value, dict):
        raise DamagedRecords(f"{where} is {shown(value)}, expected an object")
    for name in required:
        if name not in value:
            raise DamagedRecords(f"{where}: field {name!r} is missing, expected {expected(types[name])}")
    for name, item in value.items():
        if name in types and not fits(item, types[name]):
            raise DamagedRecords(f"{where}: field {name!r} is {shown(item)}, expected {expected(types[name])}")
    return value


def parse_dataclass(cls, record, where: str):
    """``record`` as the dataclass ``cls``: every field it has is one of ``cls`` and fits its
    annotation, every field without a default is there; DamagedRecords otherwise."""
    if not isinstance(record, dict):
        raise DamagedRecords(f"{where} is {shown(record)}, expected an object (a record of {cls.__name__})")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = next((name for name in record if name not in known), None)
    if unknown is not None:
        raise DamagedRecords(f"{where}: field {unknown!r} is not a field of {cls.__name__} "
                             f"({', '.join(known)})")
    required = [name for name, f in known.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    check_mapping(record, hints(cls), where, required)
    return cls(**record)
