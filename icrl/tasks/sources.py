"""Raw rows of the four source datasets, exactly as the Hugging Face datasets hold them.

A *source* is one Hugging Face dataset (``banking77``, ``clinc_oos``, ``trec``,
``nlu_evaluation_data``). :func:`load_source` returns its splits as columns::

    {"train": {"text": (...), "label": (...)}, "test": {...}}

with integer labels in the HF ClassLabel order (``hf_label_names.json``). The rows come
either from the raw files the HF loading scripts read (a ``data_dir`` laid out like
``/work/shared/datasets``), rebuilt with the same parsing and in the same order, or from
the Hub with ``datasets.load_dataset`` (``data_dir=None``). ``nlu_evaluation_data`` has
only a train split on the Hub; both paths split it the way the paper does
(``train_test_split(test_size=0.2, seed=0)``), so every source has ``train`` and ``test``.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from icrl.errors import UsageError

Columns = Dict[str, Tuple[Union[str, int], ...]]  # column -> its values (text, label ids), one per row
Splits = Dict[str, Columns]

_HERE = Path(__file__).resolve().parent
#: The raw files' folder beside a checkout (``<checkout>/../shared/datasets``), as the Makefile finds it.
BESIDE_CHECKOUT = _HERE.parents[2] / "shared" / "datasets"


def data_dir_of(data_dir: Union[str, os.PathLike[str], None] = None) -> Optional[str]:
    """The folder the raw files are read from, as an absolute path, or None for the Hugging Face Hub:
    ``data_dir`` (--data_dir) when given, else ``$ICRL_DATA_DIR``, else ``../shared/datasets``
    beside the checkout when that folder exists. The Makefile looks in the same places in the
    same order, so a script run by hand reads what ``make demo`` read (README: Data)."""
    if data_dir is None:
        data_dir = os.environ.get("ICRL_DATA_DIR") or None
    if data_dir is None and BESIDE_CHECKOUT.is_dir():
        data_dir = BESIDE_CHECKOUT
    return None if data_dir is None else os.path.abspath(os.fspath(data_dir))

#: ``[entity : words]`` spans in NLU annotations; the text keeps ``words``.
_NLU_ANNOTATION = re.compile(r"\[(.+?)\s+\:+\s(.+?)\]")
NLU_COLUMNS = ("userid", "answerid", "scenario", "intent", "status", "answer_annotation",
               "notes", "suggested_entities", "answer_normalised", "answer", "question")


@functools.lru_cache(maxsize=None)
def _hf_tables() -> Dict[str, Dict[str, List[str]]]:
    with open(_HERE / "hf_label_names.json", encoding="utf-8") as f:
        return json.load(f)


def hf_label_names(source: str, column: str) -> Tuple[str, ...]:
    """The HF ClassLabel names of ``source``'s ``column``; a name's position is its id."""
    return tuple(_hf_tables()[source][column])


# ------------------------------------------------------------------ file parsers --
def _require(path: Path, source: str) -> Path:
    if path.is_dir():
        raise UsageError(f"dataset file {path} is a folder; put the file {path.name} from "
                         f"{SOURCES[source].origin} there instead")
    if not path.is_file():
        raise UsageError(
            f"dataset file not found: {path} (get it from {SOURCES[source].origin} and place it there, or "
            f"point --data_dir or ICRL_DATA_DIR at a folder that has it; README: Data)")
    return path


def _label_id(names: Tuple[str, ...], raw: str, path: Path) -> int:
    try:
        return names.index(raw)
    except ValueError:
        raise UsageError(f"unknown label {raw!r} in {path}; expected one of the HF names "
                         f"in icrl/tasks/hf_label_names.json") from None


def _read_csv(path: Path, delimiter: str) -> Iterator[List[str]]:
    """Rows after the header, read with the HF scripts' csv settings."""
    with open(path, encoding="utf-8") as f:
        reader = csv.reader(f, quotechar='"', delimiter=delimiter, quoting=csv.QUOTE_ALL,
                            skipinitialspace=True)
        next(reader, None)
        yield from reader


def _parse_banking77(data_dir: Path) -> Splits:
    names = hf_label_names("banking77", "label")
    out: Splits = {}
    for split in ("train", "test"):
        path = _require(data_dir / "banking77" / f"{split}.csv", "banking77")
        rows = [(text, _label_id(names, label, path)) for text, label in _read_csv(path, ",")]
        out[split] = {"text": tuple(r[0] for r in rows), "label": tuple(r[1] for r in rows)}
    return out


def _parse_clinc_oos(data_dir: Path) -> Splits:
    """Config ``plus``: each split is its in-scope rows, then its ``oos_`` rows."""
    names = hf_label_names("clinc_oos", "intent")
    path = _require(data_dir / "clinc_oos" / "data_oos_plus.json", "clinc_oos")
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    out: Splits = {}
    for split, key in (("train", "train"), ("validation", "val"), ("test", "test")):
        rows = raw[key] + raw["oos_" + key]
        out[split] = {"text": tuple(text for text, _ in rows),
                      "intent": tuple(_label_id(names, intent, path) for _, intent in rows)}
    return out


def _parse_trec(data_dir: Path) -> Splits:
    """Each line is ``COARSE:fine text``; the one 0xF0 byte in the train file becomes a space."""
    coarse_names = hf_label_names("trec", "coarse_label")
    fine_names = hf_label_names("trec", "fine_label")
    out: Splits = {}
    for split, fname in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = _require(data_dir / "trec" / fname, "trec")
        text, coarse, fine = [], [], []
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):  # the original files end every line; a cut one is truncated
                    raise UsageError(f"{path} is truncated (its last line is cut short); replace it with the "
                                     f"original file from {SOURCES['trec'].origin}")
                label, _, question = line.replace(b"\xf0", b" ").strip().decode().partition(" ")
                text.append(question)
                fine.append(_label_id(fine_names, label, path))
                coarse.append(_label_id(coarse_names, label.split(":")[0], path))
        out[split] = {"text": tuple(text), "coarse_label": tuple(coarse),
                      "fine_label": tuple(fine)}
    return out


def parse_nlu_csv(path: Path) -> Columns:
    """Rows of ``NLU-Data-Home-Domain-Annotated-All.csv`` as the HF train split.

    Rows whose ``answer_annotation`` is ``null`` are dropped; the text is the annotation with
    each ``[entity : words]`` replaced by ``words``; the label is ``scenario_intent``.
    """
    names = hf_label_names("nlu_evaluation_data", "label")
    text, label = [], []
    for line_no, row in enumerate(_read_csv(path, ";"), start=2):
        if len(row) != len(NLU_COLUMNS):
            raise UsageError(f"{path}: record {line_no} has {len(row)} fields, expected "
                             f"{len(NLU_COLUMNS)} ({';'.join(NLU_COLUMNS)})")
        fields = dict(zip(NLU_COLUMNS, row))
        if fields["answer_annotation"] == "null":
            continue
        text.append(_NLU_ANNOTATION.sub(r"\2", fields["answer_annotation"]))
        label.append(_label_id(names, f"{fields['scenario']}_{fields['intent']}", path))
    return {"text": tuple(text), "label": tuple(label)}


def split_like_paper(train: Columns, test_size: float = 0.2, seed: int = 0) -> Splits:
    """The paper's NLU split: ``Dataset.train_test_split(test_size=0.2, seed=0)`` (task files
    with a ``test_ratio`` use the same call with their ratio and seed)."""
    from datasets import Dataset

    parts = Dataset.from_dict({k: list(v) for k, v in train.items()}).train_test_split(
        test_size=test_size, seed=seed)
    return {split: {k: tuple(parts[split][k]) for k in train} for split in ("train", "test")}


def _parse_nlu(data_dir: Path) -> Splits:
    path = data_dir / "nlu_evaluation_data" / "NLU-Data-Home-Domain-Annotated-All.csv"
    return split_like_paper(parse_nlu_csv(_require(path, "nlu_evaluation_data")))


# ----------------------------------------------------------------------- registry --
@dataclass(frozen=True)
class Source:
    """Where one HF dataset lives on the Hub and in raw files, and how to parse the files."""

    hub_id: str
    hub_config: Optional[str]
    label_columns: Tuple[str, ...]
    origin: str  # where the raw files come from (shown when one is missing)
    parse: Callable[[Path], Splits]
    hub_splits: Tuple[str, ...] = ("train", "test")  # splits on the Hub


SOURCES: Dict[str, Source] = {
    "banking77": Source("PolyAI/banking77", None, ("label",),
                        "github.com/PolyAI-LDN/task-specific-datasets (banking_data/)",
                        _parse_banking77),
    "clinc_oos": Source("clinc/clinc_oos", "plus", ("intent",),
                        "github.com/clinc/oos-eval (data/)", _parse_clinc_oos, ("train", "validation", "test")),
    "trec": Source("CogComp/trec", None, ("coarse_label", "fine_label"),
                   "cogcomp.seas.upenn.edu/Data/QA/QC/ (the files of the HF CogComp/trec script)",
                   _parse_trec),
    "nlu_evaluation_data": Source("xingkunliuxtracta/nlu_evaluation_data", None, ("label",),
                                  "github.com/xliuhw/NLU-Evaluation-Data (AnnotatedData/)",
                                  _parse_nlu, ("train",)),
}


def parquet_export(hub_id: str) -> str:
    """Where the Hub keeps its parquet conversion of a dataset (the ``refs/convert/parquet``
    revision), as a URL the ``parquet`` builder reads: ``<config>/<split>/NNNN.parquet`` below it."""
    return f"hf://datasets/{hub_id}@refs%2Fconvert%2Fparquet"


def _refuses_script(exc: Exception) -> bool:
    """datasets >= 4 no longer runs loading scripts (older ones want trust_remote_code)."""
    text = str(exc)
    return "scripts are no longer supported" in text or "trust_remote_code" in text


def _one_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _hub_error(spec: "Source", why: str) -> UsageError:
    return UsageError(f"could not load {spec.hub_id} from the Hugging Face Hub ({why}); set ICRL_DATA_DIR or "
                      f"--data_dir to a folder with the raw files, or go online (README: Data)")


def _load_parquet_export(spec: "Source") -> Any:
    """The dataset (a datasets.DatasetDict) from the Hub's parquet conversion, with the features (ClassLabel names)
    the conversion stores in its files."""
    import datasets

    base = parquet_export(spec.hub_id)
    files = {split: f"{base}/{spec.hub_config or 'default'}/{split}/*.parquet" for split in spec.hub_splits}
    return datasets.load_dataset("parquet", data_files=files)


def _load_hub(source: str) -> Splits:
    """Checked first: offline mode (datasets then reads its cache) or a Hub that answers (one
    quick request, not the libraries' retries). A Hub dataset whose loading script the
    installed ``datasets`` refuses is read from the Hub's parquet conversion instead."""
    import datasets

    from icrl.infra import hub

    spec = SOURCES[source]
    if not hub.offline():
        why = hub.unreachable()
        if why is not None:
            raise _hub_error(spec, f"{why}; if it is in your datasets cache, set HF_HUB_OFFLINE=1")
    try:
        dataset = datasets.load_dataset(spec.hub_id, spec.hub_config)
    except Exception as e:  # noqa: BLE001 - offline, no cache, no access, a refused loading script, ...
        if not _refuses_script(e):
            raise _hub_error(spec, _one_line(e)) from None
        try:
            dataset = _load_parquet_export(spec)
        except Exception as e2:  # noqa: BLE001 - any failure of the fallback: one line
            raise _hub_error(spec, f"its loading script is refused by datasets {datasets.__version__} and its "
                                   f"parquet conversion failed: {_one_line(e2)}") from None
    out: Splits = {}
    for split in dataset:
        ds = dataset[split]
        for column in spec.label_columns:
            names = getattr(ds.features[column], "names", None)
            if names is not None and tuple(names) != hf_label_names(source, column):
                raise UsageError(f"{spec.hub_id} column {column!r} has label names that differ "
                                 f"from icrl/tasks/hf_label_names.json")
        out[split] = {c: tuple(ds[c]) for c in ("text",) + spec.label_columns}
    if source == "nlu_evaluation_data":
        out = split_like_paper(out["train"])
    return out


#: Rows of each split of the raw files, as the Hugging Face datasets hold them (checksums in
#: /work/shared/datasets/README.md). NLU is not checked: its file is not at hand to verify.
ROWS = {"banking77": {"train": 10003, "test": 3080},
        "clinc_oos": {"train": 15250, "validation": 3100, "test": 5500},
        "trec": {"train": 5452, "test": 500}}
FILES = {("banking77", "train"): "banking77/train.csv", ("banking77", "test"): "banking77/test.csv",
         ("trec", "train"): "trec/train_5500.label", ("trec", "test"): "trec/TREC_10.label"}


def _check_rows(source: str, folder: Path, splits: Splits) -> Splits:
    """A raw file with fewer (or more) rows than the dataset has is truncated or not the original:
    refused in one line rather than run on a different dataset (an empty split is left to the
    task's own "split is empty" message)."""
    counts = {name: len(next(iter(columns.values()))) for name, columns in splits.items()}
    for split, expected in ROWS.get(source, {}).items():
        if counts.get(split) and counts[split] != expected:
            path = folder / FILES.get((source, split), "clinc_oos/data_oos_plus.json")
            raise UsageError(f"{path} gives {counts.get(split)} {split} rows, not the dataset's {expected}: it is "
                             f"truncated or not the original; replace it with the original from "
                             f"{SOURCES[source].origin}")
    return splits


@functools.lru_cache(maxsize=None)
def load_source(source: str, data_dir: Optional[str]) -> Splits:
    """All splits of ``source`` as columns, from the raw files in ``data_dir`` or, when it is
    None, from the Hub. Cached per (source, data_dir) for the life of the process.

    Raises UsageError naming the file when a raw file is missing, and a one-line UsageError
    when one is malformed (not UTF-8, bad CSV or JSON, an unknown label).
    """
    if source not in SOURCES:
        raise UsageError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    if data_dir is None:
        return _load_hub(source)
    folder = Path(os.path.abspath(data_dir))
    try:
        return _check_rows(source, folder, SOURCES[source].parse(folder))
    except (UnicodeDecodeError, csv.Error, ValueError, KeyError, IndexError, TypeError) as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"the {source} files under {folder} are malformed ({type(exc).__name__}: "
                         f"{str(exc)[:200]}); replace them with the original files") from None
