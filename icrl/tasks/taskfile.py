"""Task files: a classification task described in TOML (docs/tasks.md).

:func:`read_task_file` parses and checks a file without reading its data, so a bad file is
a one-line :class:`~icrl.errors.UsageError` before anything heavy loads. The rows are read
by :mod:`icrl.tasks.rows`. The built-in tasks are task files too (``builtin/*.toml``).
"""

from __future__ import annotations

import os
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from icrl.errors import UsageError

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}

_TOP_KEYS = {"name", "description", "prompt_template", "prediction_prefix", "data", "labels", "hierarchy"}
_DATA_KEYS = {"source", "train", "test", "hub", "config", "train_split", "test_split", "test_ratio",
              "split_seed", "text_column", "label_column"}
_LABEL_KEYS = {"names", "mapping", "classlabel", "drop"}


@dataclass(frozen=True)
class TaskSpec:
    """A parsed task file (nothing of its data read yet)."""

    path: Path                               # the file, resolved
    name: str
    prompt_template: str
    prediction_prefix: str
    description: str
    text_column: str
    label_column: str
    source: Optional[str] = None             # a built-in source of icrl.tasks.sources
    train: Optional[Path] = None             # data files (resolved against the task file's folder)
    test: Optional[Path] = None
    hub: Optional[str] = None                # a Hub dataset id (or a local dataset folder)
    config: Optional[str] = None
    train_split: str = "train"
    test_split: Optional[str] = None
    test_ratio: Optional[float] = None
    split_seed: int = 0
    names: Optional[Tuple[str, ...]] = None  # label names, as the column holds them
    mapping: Optional[Dict[str, str]] = None  # column value (or ClassLabel name) -> label name
    classlabel: bool = False
    drop: Tuple[str, ...] = ()
    hierarchy: Dict[str, str] = field(default_factory=dict)
    builtin: bool = False

    def label_names(self) -> Optional[Tuple[str, ...]]:
        """The task's labels in id order, or None when they come from the data's ClassLabel."""
        if self.mapping is not None:
            return tuple(self.mapping.values())
        return self.names

    def fail(self, why: str) -> UsageError:
        return UsageError(f"task file {self.path}: {why}")


def _fail(path: Path, why: str) -> UsageError:
    return UsageError(f"task file {path}: {why} (see docs/tasks.md)")


def _string(path: Path, table: dict[str, Any], key: str, where: str, default: Optional[str] = None,
            required: bool = False) -> Optional[str]:
    value = table.get(key, default)
    if value is None:
        if required:
            raise _fail(path, f"{where}{key} is missing")
        return None
    if not isinstance(value, str):
        raise _fail(path, f"{where}{key} must be a string, got {value!r}")
    return value


def _text(path: Path, table: dict[str, Any], key: str, default: Optional[str] = None) -> str:
    """A top-level string that always has a value: ``default`` when absent, else required."""
    value = _string(path, table, key, "", default=default, required=True)
    assert value is not None  # _string refused a missing required key
    return value


def _check_template(path: Path, template: str) -> None:
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise _fail(path, f"prompt_template is not a valid template ({exc}); write {{text}} where the "
                          f"text goes and double other braces") from None
    if "text" not in fields:
        raise _fail(path, f"prompt_template {template!r} has no {{text}} field; write {{text}} where the text goes")
    other = sorted(fields - {"text"})
    if other:
        raise _fail(path, f"prompt_template has fields other than {{text}}: {other}; double literal braces")


def _label_list(path: Path, values: object, what: str) -> Tuple[str, ...]:
    if not isinstance(values, list) or not values:
        raise _fail(path, f"{what} must be a non-empty list of strings")
    seen: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            raise _fail(path, f"{what}: {value!r} is not a string")
        if not value.strip():
            raise _fail(path, f"{what}: empty label name {value!r}")
        if value in seen:
            raise _fail(path, f"{what}: duplicate label name {value!r}")
        seen.add(value)
    return tuple(values)


def _data_file(path: Path, value: object, key: str) -> Path:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"[data] {key} must be a file path (string)")
    file = (path.parent / value).resolve()
    if file.suffix.lower() not in FORMATS:
        raise _fail(path, f"[data] {key} {value!r}: unknown format {file.suffix!r}; use "
                          f"{', '.join(FORMATS)}")
    if not file.is_file():
        raise _fail(path, f"[data] {key}: data file not found: {file}")
    return file


def _load_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(f"task file not found: {path}")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(path, f"not a valid TOML file ({exc})") from None
    except UnicodeDecodeError:
        raise _fail(path, "not a valid TOML file (not UTF-8 text)") from None
    except OSError as exc:
        raise UsageError(f"cannot read task file {path}: {exc.strerror or exc}") from None


def _unknown(path: Path, table: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise _fail(path, f"unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)} in {where}; "
                          f"known: {', '.join(sorted(allowed))}")


def _table(path: Path, raw: dict[str, Any], key: str, required: bool) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        if required:
            raise _fail(path, f"the [{key}] table is missing")
        return {}
    if not isinstance(value, dict):
        raise _fail(path, f"{key} must be a table ([{key}])")
    return value


def read_task_file(path: Union[str, os.PathLike[str]], builtin: bool = False) -> TaskSpec:
    """Parse and check a task file; UsageError (one line) when anything is wrong."""
    path = Path(path).expanduser().resolve()
    raw = _load_toml(path)
    _unknown(path, raw, _TOP_KEYS, "the file")
    name = _text(path, raw, "name", default=path.stem)
    template = _text(path, raw, "prompt_template")
    _check_template(path, template)
    prefix = _text(path, raw, "prediction_prefix")
    description = _text(path, raw, "description", default="")
    data = _table(path, raw, "data", required=True)
    kind, spec = _read_data(path, data)
    _read_test_set(path, data, kind, spec)
    _read_labels(path, _table(path, raw, "labels", required=True), kind, spec)
    hierarchy = _read_hierarchy(path, _table(path, raw, "hierarchy", required=False), spec)
    return TaskSpec(path=path, name=name, prompt_template=template, prediction_prefix=prefix,
                    description=description, hierarchy=hierarchy, builtin=builtin, **spec)


def _read_data(path: Path, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """[data]: where the rows come from (source, train or hub) and their columns."""
    _unknown(path, data, _DATA_KEYS, "[data]")
    kinds = [k for k in ("source", "train", "hub") if k in data]
    if len(kinds) != 1:
        raise _fail(path, "[data] needs exactly one of source (a built-in source), train (a CSV, JSONL or "
                          f"Parquet file) or hub (a Hugging Face dataset id); found {kinds or 'none'}")
    kind = kinds[0]
    spec: dict[str, Any] = {"text_column": _string(path, data, "text_column", "[data] ", default="text"),
                  "label_column": _string(path, data, "label_column", "[data] ", default="label")}
    if kind == "source":
        from icrl.tasks.sources import SOURCES

        spec["source"] = _string(path, data, "source", "[data] ")
        if spec["source"] not in SOURCES:
            raise _fail(path, f"unknown [data] source {spec['source']!r}; known: {', '.join(SOURCES)}")
    elif kind == "train":
        spec["train"] = _data_file(path, data["train"], "train")
        if "test" in data:
            spec["test"] = _data_file(path, data["test"], "test")
    else:
        spec["hub"] = _string(path, data, "hub", "[data] ")
        spec["config"] = _string(path, data, "config", "[data] ")
        spec["train_split"] = _string(path, data, "train_split", "[data] ", default="train")
        spec["test_split"] = _string(path, data, "test_split", "[data] ")
    for key, allowed_kind in (("test", "train"), ("config", "hub"), ("train_split", "hub"), ("test_split", "hub")):
        if key in data and kind != allowed_kind:
            raise _fail(path, f"[data] {key} goes with {allowed_kind} =, not with {kind} =")
    return kind, spec


def _read_test_set(path: Path, data: dict[str, Any], kind: str, spec: dict[str, Any]) -> None:
    """[data]'s test set: a file or split of its own, or test_ratio (and split_seed) of the rows."""
    if "test_ratio" in data:
        ratio = data["test_ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
            raise _fail(path, f"[data] test_ratio must be a number in (0, 1), got {ratio!r}")
        if kind == "source" or "test" in data or "test_split" in data:
            raise _fail(path, "[data] give either a test set (test = file, test_split = name) or test_ratio, not both")
        spec["test_ratio"] = float(ratio)
        seed = data.get("split_seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise _fail(path, f"[data] split_seed must be an integer >= 0, got {seed!r}")
        spec["split_seed"] = seed
    elif "split_seed" in data:
        raise _fail(path, "[data] split_seed goes with test_ratio")
    elif kind == "train" and "test" not in data:
        raise _fail(path, "[data] has no test set: give test = a file, or test_ratio = a number in (0, 1)")
    elif kind == "hub" and "test_split" not in data:
        raise _fail(path, "[data] has no test set: give test_split = a split name, or test_ratio = a number in (0, 1)")


def _read_labels(path: Path, labels: dict[str, Any], kind: str, spec: dict[str, Any]) -> None:
    """[labels]: the label strings (names, a mapping, or the dataset's ClassLabel) and rows to drop."""
    _unknown(path, labels, _LABEL_KEYS, "[labels]")
    classlabel = labels.get("classlabel", False)
    if not isinstance(classlabel, bool):
        raise _fail(path, f"[labels] classlabel must be true or false, got {classlabel!r}")
    if classlabel and kind == "train" and spec["train"].suffix.lower() != ".parquet":
        raise _fail(path, "[labels] classlabel needs a Parquet file or a Hub dataset "
                          "(CSV and JSONL have no ClassLabel)")
    if "names" in labels and "mapping" in labels:
        raise _fail(path, "[labels] give names or mapping, not both")
    if "names" in labels:
        if classlabel:
            raise _fail(path, "[labels] names with classlabel = true: use a mapping (ClassLabel name -> label name)")
        spec["names"] = _label_list(path, labels["names"], "[labels] names")
    elif "mapping" in labels:
        mapping = labels["mapping"]
        if not isinstance(mapping, dict) or not mapping:
            raise _fail(path, "[labels] mapping must be a non-empty table (column value = \"label name\")")
        _label_list(path, list(mapping.values()), "[labels] mapping")
        spec["mapping"] = dict(mapping)
    elif not classlabel:
        raise _fail(path, "[labels] needs names (the label strings of the column), a mapping, or classlabel = true")
    spec["classlabel"] = classlabel
    drop = labels.get("drop", [])
    if not isinstance(drop, list) or not all(isinstance(d, str) for d in drop):
        raise _fail(path, "[labels] drop must be a list of strings (column values whose rows are left out)")
    spec["drop"] = tuple(drop)


def _read_hierarchy(path: Path, hierarchy: dict[str, Any], spec: dict[str, Any]) -> dict[str, str]:
    """[hierarchy]: each label's parent group (optional)."""
    names = spec.get("names") or (tuple(spec["mapping"].values()) if "mapping" in spec else None)
    for label, parent in hierarchy.items():
        if not isinstance(parent, str) or not parent.strip():
            raise _fail(path, f"[hierarchy] {label!r} must name its parent group (a non-empty string)")
        if names is not None and label not in names:
            raise _fail(path, f"[hierarchy] {label!r} is not a label of the task")
    return dict(hierarchy)
