"""Reading and writing record files on the one atomic writer (``icrl.infra.atomic.write_atomic``:
readers see the old file or the new one, never half of one): JSON, JSON lines and CSV written
whole, durable appends of JSON lines, and readers that survive a write cut short."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO, Union

from ..errors import CannotWrite
from ..infra.atomic import write_atomic


def write_json_atomic(path: Path, data: object) -> None:
    """A JSON document (indented), atomically."""
    write_atomic(path, lambda f: json.dump(data, f, indent=2, ensure_ascii=False))


def write_jsonl_atomic(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """JSON lines, one record each, atomically (a repaired records file)."""
    def write(f: TextIO) -> None:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    write_atomic(path, write)


def write_csv_atomic(path: Path, fieldnames: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """A CSV table with a header row, atomically."""
    def write(f: TextIO) -> None:
        writer = csv.DictWriter(f, fieldnames=list(fieldnames))
        writer.writeheader()
        writer.writerows(rows)

    write_atomic(path, write, newline="")


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line, flushed and fsynced (a killed run loses at most the line in flight)."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:  # said of the file (a write's error names none)
        raise CannotWrite(exc.errno, exc.strerror or str(exc), str(path)) from exc


MAX_DEPTH = 64  # arrays and objects nested deeper than this are no record of ours


class NotJSON(ValueError):
    """A text that is not one JSON value of a record: not JSON, a key given twice in one object,
    or nested deeper than ``MAX_DEPTH``. (NaN and Infinity, which Python writes, are read as
    numbers: the record's types refuse them where a number must be finite, naming the field.)"""


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise NotJSON(f"the key {key!r} is given twice in one object")
        seen[key] = value
    return seen


def _depth_within(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` arrays and objects (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return False
            stack.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict) else item))
    return True


def loads(text: Union[str, bytes]) -> Any:
    """One JSON value as records hold it (``NotJSON`` otherwise: see the class)."""
    try:
        value = json.loads(text, object_pairs_hook=_no_repeats)
    except RecursionError:
        raise NotJSON(f"nested deeper than {MAX_DEPTH} levels") from None
    except NotJSON:
        raise
    except ValueError as exc:
        raise NotJSON(str(exc)) from None
    if not _depth_within(value):
        raise NotJSON(f"nested deeper than {MAX_DEPTH} levels")
    return value


def read_json(path: Path) -> Any:
    """A JSON file as records hold it: ``NotJSON`` (a ValueError) when it is not (see ``loads``)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return loads(data)
    except NotJSON as exc:
        raise NotJSON(f"not JSON ({exc})") from None


def remove_leftovers(directory: Path, names: Iterable[str], older_than_s: float = 0.0) -> list[Path]:
    """Delete the temporary files a kill during an atomic write left next to ``names``.

    Call it only where no other process may be writing (under the run's lock), or with
    ``older_than_s`` large enough that a live writer's file is not touched.
    """
    removed: list[Path] = []
    directory = Path(directory)
    if not directory.is_dir():
        return removed
    now = time.time()
    for name in names:
        for path in list(directory.glob(f".{name}.*")) + [directory / f"{name}.tmp"]:
            try:
                if path.is_file() and now - path.stat().st_mtime >= older_than_s:
                    path.unlink()
                    removed.append(path)
            except OSError:
                pass
    return removed


def parse_jsonl(path: Path) -> tuple[list[tuple[int, object]], list[int], bool]:
    """(records as (line number, value), numbers of lines that do not parse, cut_tail).

    Every line is parsed on its own, so a bad line never hides the good ones after it.
    ``cut_tail``: the last line has no newline (a write cut short by a kill); it is not
    returned among the records nor the bad lines.
    """
    if not path.exists():
        return [], [], False
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    cut_tail = bool(lines) and not lines[-1].endswith(b"\n")
    if cut_tail:
        lines = lines[:-1]
    records, bad = [], []
    for number, line in enumerate(lines, start=1):
        try:
            records.append((number, loads(line)))
        except ValueError:
            bad.append(number)
    return records, bad, cut_tail


def read_jsonl(path: Path, repair: bool = False) -> list[Any]:
    """Every complete line of a JSON-lines file.

    Reading stops at the first line without its newline or that does not parse (a write cut
    short by a kill is the last line); with ``repair`` the file is cut there so appends
    continue cleanly. Lines after it, if any, belong to steps that are then recomputed.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    records, good_end = [], 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            records.append(json.loads(line))
        except ValueError:
            break
        good_end += len(line)
    if repair and good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return records
