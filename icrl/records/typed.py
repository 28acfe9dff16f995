"""A JSON value checked against a Python annotation: the strict parse of every record.

``parse(annotation, value, where)`` turns a JSON value into the typed value ``annotation``
names (a record line into ``TrainLine``, config.json into ``ConfigFile``: dataclasses inside
dataclasses), checking every field; ``fits`` says whether a value fits, ``expected`` what an
annotation admits, in words; ``check_mapping`` checks the keys a JSON object has against a
TypedDict's annotations (token_counts.json). What an annotation admits:

- ``int``: a JSON integer, never ``true``/``false``; ``float``: any finite JSON number but a
  boolean (NaN and infinities are no value a record holds); ``str``, ``bool``: themselves;
- ``Optional[X]``: null or X; ``Union[X, Y]``: X or Y; ``Any``: anything;
- ``List[X]``/``list``: an array (of X); ``Dict[str, X]``/``dict``: an object (of X); in words,
  ``List[Any]`` and ``Dict[str, Any]`` are "a list" and "an object", as ``list`` and ``dict`` are;
- a TypedDict: an object with exactly its keys, each of its type;
- a dataclass: an object whose keys are its fields (a field's JSON name is its metadata's
  ``json`` where the name is a Python keyword: ``from``), those without a default present;
  ``Extra`` fields (an annotation ``Dict[str, Any]`` with metadata ``extra``) take the keys that
  are no field.

What does not fit raises ``DamagedRecords`` in one line: ``where`` (the file and its line),
the field (a dotted path inside config.json), what it holds and what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Any, TypeGuard, Union

from ..errors import DamagedRecords

_WORDS = {int: "an integer", float: "a number", str: "text", bool: "true or false", dict: "an object",
          list: "a list", type(None): "null"}


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer, never ``true``/``false``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """A finite JSON number: an integer or a float, never ``true``/``false``, NaN or infinite."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


@functools.lru_cache(maxsize=None)
def hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass or TypedDict (once per class)."""
    return typing.get_type_hints(cls)


def is_record_class(annotation: Any) -> TypeGuard[type]:
    """A dataclass (the class, not an instance of one)."""
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def json_name(f: "dataclasses.Field[Any]") -> str:
    return str(f.metadata.get("json", f.name))


@functools.lru_cache(maxsize=None)
def _layout(cls: type) -> tuple[dict[str, tuple[str, Any]], tuple[str, ...], str]:
    """A dataclass's fields by JSON name -> (attribute, annotation), the JSON names of the
    required ones, and the attribute of its extra keys ("" when it has none)."""
    types, by_json, required, extra = hints(cls), {}, [], ""
    for f in dataclasses.fields(cls):
        if f.metadata.get("extra"):
            extra = f.name
            continue
        by_json[json_name(f)] = (f.name, types[f.name])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(json_name(f))
    return by_json, tuple(required), extra


def _misfit(value: object, annotation: Any) -> Union[tuple[str, object, Any], None]:
    """(the path inside ``value`` that does not fit, the value there, the annotation it should
    fit) for the first misfit; None when ``value`` fits ``annotation``."""
    if annotation is Any:
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return None if any(_misfit(value, a) is None for a in args) else ("", value, annotation)
    if origin is list or annotation is list:
        if not isinstance(value, list):
            return "", value, annotation
        return None if not args or all(_misfit(x, args[0]) is None for x in value) else ("", value, annotation)
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            return "", value, annotation
        ok = not args or all(_misfit(k, args[0]) is None and _misfit(v, args[1]) is None for k, v in value.items())
        return None if ok else ("", value, annotation)
    if typing.is_typeddict(annotation):
        types = hints(annotation)
        ok = isinstance(value, dict) and set(value) == set(types) and all(
            _misfit(value[k], t) is None for k, t in types.items())
        return None if ok else ("", value, annotation)
    if is_record_class(annotation):
        return _dataclass_misfit(value, annotation)
    if annotation is float:
        return None if is_number(value) else ("", value, annotation)
    if annotation is int:
        return None if is_int(value) else ("", value, annotation)
    if annotation is type(None):
        return None if value is None else ("", value, annotation)
    return None if isinstance(value, annotation) else ("", value, annotation)


def _dataclass_misfit(value: object, cls: type) -> Union[tuple[str, object, Any], None]:
    if not isinstance(value, dict):
        return "", value, cls
    by_json, required, extra = _layout(cls)
    for name in required:
        if name not in value:
            return name, _MISSING, by_json[name][1]
    for name, item in value.items():
        if name not in by_json:
            if extra:
                continue
            return name, _UNKNOWN, cls
        found = _misfit(item, by_json[name][1])
        if found is not None:
            return (f"{name}.{found[0]}" if found[0] else name), found[1], found[2]
    return None


class _Marker:
    def __init__(self, words: str):
        self.words = words

    def __repr__(self) -> str:
        return self.words


_MISSING, _UNKNOWN = _Marker("missing"), _Marker("not a field")


def fits(value: object, annotation: Any) -> bool:
    """Whether the JSON ``value`` is of type ``annotation`` (see the module docstring)."""
    return _misfit(value, annotation) is None


def expected(annotation: Any) -> str:
    """``annotation`` in words: "text or null", "a list of integers", ..."""
    if annotation is Any:
        return "any value"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return " or ".join(expected(a) for a in sorted(args, key=lambda a: a is type(None)))
    if origin is list:
        return f"a list of {_plural(args[0])}" if args and args[0] is not Any else "a list"
    if origin is dict:
        return f"an object of {_plural(args[1])}" if args and args[1] is not Any else "an object"
    if typing.is_typeddict(annotation):
        return f"an object of exactly {', '.join(f'{k} ({expected(t)})' for k, t in hints(annotation).items())}"
    if is_record_class(annotation):
        by_json, _, _ = _layout(annotation)
        return f"an object of exactly {', '.join(f'{k} ({expected(t)})' for k, (_, t) in by_json.items())}"
    if annotation is float:
        return "a finite number"
    return _WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _plural(annotation: Any) -> str:
    words = expected(annotation)
    for one, many in (("an integer", "integers"), ("a finite number", "finite numbers"), ("a list of", "lists of"),
                      ("an object", "objects")):
        if words.startswith(one):
            return many + words[len(one):]
    return "texts" if words == "text" else words


def shown(value: object) -> str:
    """A JSON value as a person reads it in an error: its text, cut to 40 characters."""
    text = "null" if value is None else "true" if value is True else "false" if value is False else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def misfit_text(value: object, annotation: Any, where: str) -> Union[str, None]:
    """The one line that says how ``value`` does not fit ``annotation`` (None when it fits)."""
    found = _misfit(value, annotation)
    if found is None:
        return None
    path, item, kind = found
    if not path:
        what = f"an object (a record of {kind.__name__})" if is_record_class(kind) else expected(kind)
        return f"{where} is {shown(item)}, expected {what}"
    if item is _MISSING:
        return f"{where}: field {path!r} is missing, expected {expected(kind)}"
    if item is _UNKNOWN:
        by_json, _, _ = _layout(kind)
        return f"{where}: field {path!r} is not a field of {kind.__name__} ({', '.join(by_json)})"
    return f"{where}: field {path!r} is {shown(item)}, expected {expected(kind)}"


def parse(annotation: Any, value: object, where: str) -> Any:
    """``value`` as the typed value of ``annotation`` (dataclasses built, nested ones too):
    DamagedRecords in one line (``misfit_text``) when it does not fit."""
    problem = misfit_text(value, annotation, where)
    if problem is not None:
        raise DamagedRecords(problem)
    return _build(annotation, value)


def _build(annotation: Any, value: Any) -> Any:
    """A value that fits ``annotation``, with its dataclasses built."""
    if value is None or annotation is Any:
        return value
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return _build(next(a for a in args if fits(value, a)), value)
    if origin is list and args:
        return [_build(args[0], x) for x in value]
    if origin is dict and args:
        return {k: _build(args[1], v) for k, v in value.items()}
    if is_record_class(annotation):
        by_json, _, extra = _layout(annotation)
        kwargs = {by_json[k][0]: _build(by_json[k][1], v) for k, v in value.items() if k in by_json}
        if extra:
            kwargs[extra] = {k: v for k, v in value.items() if k not in by_json}
        return annotation(**kwargs)
    return value


MISSING: Any = _MISSING  # what ``wrong`` holds for a field a record lacks


def placeholder(annotation: Any) -> Any:
    """A value of ``annotation`` that stands in for a field that did not fit it (null where null
    fits; else an empty or zero value of its type)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or (origin is Union and type(None) in args):
        return None
    if origin is Union:
        return placeholder(args[0])
    found: Any = {list: [], dict: {}, int: 0, float: 0.0, str: "", bool: False}.get(origin or annotation)
    return found


def parse_leniently(cls: type, record: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``record`` (a JSON object) as the dataclass ``cls`` and what of it does not fit: every field
    that fits its annotation keeps its value; one that does not, or is missing, is in ``wrong``
    (name -> what the record holds, ``MISSING`` for nothing) and stands as its default or a
    ``placeholder``; a key that is no field is in ``wrong`` too. The records check reads what a
    damaged line holds so, field by field, and the line is trusted only where ``wrong`` is empty."""
    by_json, _, _ = _layout(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    wrong = {key: value for key, value in record.items() if key not in by_json}
    kwargs: dict[str, Any] = {}
    for name, (attribute, annotation) in by_json.items():
        f = fields[attribute]
        if name in record and fits(record[name], annotation):
            kwargs[attribute] = _build(annotation, record[name])
            continue
        if name in record or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
            wrong[name] = record.get(name, MISSING)
        if f.default is not dataclasses.MISSING:
            kwargs[attribute] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kwargs[attribute] = f.default_factory()
        else:
            kwargs[attribute] = placeholder(annotation)
    return cls(**kwargs), wrong


def as_json(value: Any) -> Any:
    """A typed value as JSON gives it back (dataclasses as objects of their JSON names, in field
    order; extra keys after them)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.metadata.get("extra"):
                out.update(item)
            elif not (f.metadata.get("optional") and item is None):
                out[json_name(f)] = as_json(item)
        return out
    if isinstance(value, list):
        return [as_json(x) for x in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


def check_mapping(value: object, types: dict[str, Any], where: str,
                  required: typing.Iterable[str] = ()) -> dict[str, Any]:
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
