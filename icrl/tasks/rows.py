"""The rows of a task file: read its data, split it, and turn column values into label ids.

:func:`load_rows` returns the label names (id order) and the train and test rows as
``(id, text, label id)`` triples, where ``id`` is the row's index in its split as read (before
rows of dropped labels are left out). Every problem with the data is a one-line UsageError
naming the file and what to change; a bad row is named where it is in the file (its line in a
CSV or JSON-lines file, its row in a Parquet file), also when ``test_ratio`` splits the file,
whose split shuffles the rows.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from icrl.tasks import sources
from icrl.tasks.taskfile import TaskSpec

Row = Tuple[int, str, int]
ColumnSet = Mapping[str, Sequence[Any]]  # column name -> its values, one per row
Locate = Callable[[int], str]  # where row i of a split, as read, is (for messages)
POSITION = "__icrl_position__"  # a column carried through a test_ratio split: each row's index as read


def _need_columns(spec: TaskSpec, columns: ColumnSet, where: str) -> None:
    for key in ("text_column", "label_column"):
        column = getattr(spec, key)
        if column not in columns:
            raise spec.fail(f"{where} has no column {column!r} ([data] {key}); its columns: "
                            f"{', '.join(map(str, columns)) or 'none'}")


def _read_csv(spec: TaskSpec, file: Path) -> Tuple[Dict[str, List[Optional[str]]], List[int]]:
    """The columns, and the line each record ends on (a quoted field may span lines)."""
    rows, lines = [], []
    try:
        with open(file, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            for row in reader:
                rows.append(row)
                lines.append(reader.line_num)
            header = reader.fieldnames or []
    except (UnicodeDecodeError, csv.Error) as exc:
        raise spec.fail(f"cannot read {file} as UTF-8 CSV ({type(exc).__name__}: {str(exc)[:120]})") from None
    columns = {name: [row.get(name) for row in rows] for name in header}
    for column in (spec.text_column, spec.label_column):
        if column in columns and any(v is None for v in columns[column]):
            line = lines[next(i for i, v in enumerate(columns[column]) if v is None)]
            raise spec.fail(f"{file}: record on line {line} has no {column!r} field (too few fields)")
    return columns, lines


def _read_jsonl(spec: TaskSpec, file: Path) -> Tuple[Dict[str, List[Any]], List[int]]:
    """The columns, and the line of each record (blank lines are skipped)."""
    records = []
    try:
        with open(file, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise spec.fail(f"{file} line {line_no} is not a JSON object")
                records.append((line_no, record))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise spec.fail(f"cannot read {file} as UTF-8 JSON lines ({type(exc).__name__}: {str(exc)[:120]})") from None
    names = {key for _, record in records for key in record}
    for column in (spec.text_column, spec.label_column):
        missing = next((n for n, r in records if column not in r), None)
        if column in names and missing is not None:
            raise spec.fail(f"{file} line {missing} has no {column!r} key")
    return {name: [r.get(name) for _, r in records] for name in sorted(names)}, [n for n, _ in records]


def _read_parquet(spec: TaskSpec, file: Path) -> Tuple[Dict[str, List[Any]], Dict[str, List[str]]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise spec.fail(f"cannot read {file} as Parquet ({type(exc).__name__}: {str(exc)[:120]})") from None
    classnames = {}
    meta = (table.schema.metadata or {}).get(b"huggingface")
    if meta:
        try:
            features = json.loads(meta)["info"]["features"]
            classnames = {k: list(v["names"]) for k, v in features.items()
                          if isinstance(v, dict) and v.get("_type") == "ClassLabel"}
        except (ValueError, KeyError, TypeError):
            classnames = {}
    return table.to_pydict(), classnames


def _read_file(spec: TaskSpec, file: Path) -> Tuple[ColumnSet, Dict[str, List[str]], Locate]:
    """The columns, the ClassLabel names, and where row ``i`` is in the file (for messages)."""
    kind = file.suffix.lower()
    if kind in (".csv", ".jsonl"):
        columns, lines = (_read_csv if kind == ".csv" else _read_jsonl)(spec, file)
        return columns, {}, lambda i: f"{file} line {lines[i]}"
    columns, classnames = _read_parquet(spec, file)
    return columns, classnames, lambda i: f"{file} row {i}"


def _read_hub(spec: TaskSpec, dataset: str) -> Tuple[Dict[str, Dict[str, List[Any]]], Dict[str, List[str]]]:
    """The train (and test) split's text and label columns of ``spec.hub``, which is ``dataset``."""
    import datasets

    from icrl.infra import hub

    local = spec.path.parent / dataset
    target = str(local) if local.is_dir() else dataset
    if not local.is_dir() and not hub.offline():
        why = hub.unreachable()
        if why is not None:
            raise spec.fail(f"cannot load {spec.hub} from the Hugging Face Hub ({why}); go online, or set "
                            f"HF_HUB_OFFLINE=1 if it is in your datasets cache")
    try:
        loaded = datasets.load_dataset(target, spec.config)
    except Exception as exc:  # noqa: BLE001 - offline without a cache, no access, unknown config, ...
        text = str(exc).strip().splitlines()
        raise spec.fail(f"cannot load the dataset {spec.hub!r}"
                        f"{f' (config {spec.config!r})' if spec.config else ''}: "
                        f"{text[0] if text else type(exc).__name__}") from None
    wanted = [spec.train_split] + ([spec.test_split] if spec.test_split else [])
    for split in wanted:
        if split not in loaded:
            raise spec.fail(f"{spec.hub} has no split {split!r}; its splits: {', '.join(loaded)}")
    classnames = {}
    for column, feature in loaded[spec.train_split].features.items():
        if getattr(feature, "names", None) is not None:
            classnames[column] = list(feature.names)
    out = {}
    for split in wanted:
        _need_columns(spec, {c: () for c in loaded[split].column_names}, f"{spec.hub} split {split!r}")
        out[split] = {c: list(loaded[split][c]) for c in (spec.text_column, spec.label_column)}
    return out, classnames


def _row_of(split: str) -> Locate:
    return lambda i: f"{split} row {i}"


def _raw_splits(spec: TaskSpec, data_dir: Optional[str]
                ) -> Tuple[Mapping[str, ColumnSet], Dict[str, List[str]], Dict[str, Locate]]:
    """``({"train": columns, "test": columns}, ClassLabel names per column, {split: where})``, where
    ``where[split](i)`` says where row ``i`` of that split, as read, is (for messages)."""
    where = {split: _row_of(split) for split in ("train", "test")}
    if spec.source is not None:
        splits = sources.load_source(spec.source, data_dir)
        names = {}
        if spec.classlabel:
            names[spec.label_column] = list(sources.hf_label_names(spec.source, spec.label_column))
        for split in ("train", "test"):
            _need_columns(spec, splits[split], f"source {spec.source} split {split!r}")
        return {"train": splits["train"], "test": splits["test"]}, names, where
    if spec.hub is not None:
        hub_splits, names = _read_hub(spec, spec.hub)
        out: Dict[str, ColumnSet] = {"train": hub_splits[spec.train_split]}
        where["train"] = lambda i: f"{spec.hub} split {spec.train_split!r} row {i}"
        if spec.test_split:
            out["test"] = hub_splits[spec.test_split]
            where["test"] = lambda i: f"{spec.hub} split {spec.test_split!r} row {i}"
        return out, names, where
    out, names = {}, {}
    for split, file in (("train", spec.train), ("test", spec.test)):
        if file is None:
            continue
        columns, classnames, where[split] = _read_file(spec, file)
        _need_columns(spec, columns, str(file))
        out[split], names = columns, names or classnames
    return out, names, where


def _split(spec: TaskSpec, splits: Mapping[str, ColumnSet]) -> Mapping[str, ColumnSet]:
    """The train and test columns; with ``test_ratio``, the test rows held out of the train file,
    each row keeping its position as read in the ``POSITION`` column."""
    if spec.test_ratio is None:
        return splits
    columns = {c: tuple(splits["train"][c]) for c in (spec.text_column, spec.label_column)}
    columns[POSITION] = tuple(range(len(columns[spec.text_column])))
    try:
        return sources.split_like_paper(columns, test_size=spec.test_ratio, seed=spec.split_seed)
    except ValueError as exc:
        raise spec.fail(f"cannot hold out test_ratio {spec.test_ratio} of {len(columns[spec.text_column])} "
                        f"rows ({exc})") from None


def _key(spec: TaskSpec, value: object, classnames: Optional[List[str]], where: str) -> str:
    """The column value as the [labels] table names it."""
    if classnames is not None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(classnames):
            raise spec.fail(f"{where}: label {value!r} is not a ClassLabel id (0..{len(classnames) - 1})")
        return classnames[value]
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise spec.fail(f"{where}: label {value!r} is not a string or an integer")


def load_rows(spec: TaskSpec, data_dir: Optional[str]) -> Tuple[List[str], List[Row], List[Row]]:
    """Label names (id order) and the train and test rows of a task file."""
    splits, all_classnames, where_read = _raw_splits(spec, data_dir)
    classnames = None
    if spec.classlabel:
        classnames = all_classnames.get(spec.label_column)
        if classnames is None:
            raise spec.fail(f"column {spec.label_column!r} is not a ClassLabel in the data; list the label "
                            f"strings in [labels] names instead")
    splits = _split(spec, splits)
    if spec.mapping is not None:
        labels, index = list(spec.mapping.values()), {k: i for i, k in enumerate(spec.mapping)}
    elif spec.names is not None:
        labels, index = list(spec.names), {k: i for i, k in enumerate(spec.names)}
    else:
        if classnames is None:  # a TaskSpec made without reading [labels], which asks for one of the three
            raise spec.fail("[labels] needs names (the label strings of the column), a mapping, or classlabel = true")
        kept = [name for name in classnames if name not in spec.drop]
        labels, index = kept, {k: i for i, k in enumerate(kept)}
        if len(set(kept)) != len(kept) or any(not k.strip() for k in kept):
            raise spec.fail(f"the ClassLabel of {spec.label_column!r} has empty or duplicate names; use a mapping")
    for label in spec.hierarchy:
        if label not in labels:
            raise spec.fail(f"[hierarchy] {label!r} is not a label of the task")
    drop = set(spec.drop)
    out = {}
    for split in ("train", "test"):
        columns = splits[split]
        # where row i is in the file: a held-out split's rows come from the train file, shuffled
        read = columns.get(POSITION)
        locate = where_read[split] if read is None else (lambda i, read=read: where_read["train"](read[i]))
        rows = []
        for i, (text, value) in enumerate(zip(columns[spec.text_column], columns[spec.label_column])):
            where = locate(i)
            key = _key(spec, value, classnames, where)
            if key in drop:
                continue
            if key not in index:
                shown = ", ".join(repr(k) for k in list(index)[:5]) + (", ..." if len(index) > 5 else "")
                raise spec.fail(f"{where}: label {key!r} is not in [labels] ({shown}); add it, or list it in "
                                f"[labels] drop to leave its rows out")
            if not isinstance(text, str):
                raise spec.fail(f"{where}: text {text!r} in column {spec.text_column!r} is not a string")
            rows.append((i, text, index[key]))
        out[split] = rows
    return labels, out["train"], out["test"]
