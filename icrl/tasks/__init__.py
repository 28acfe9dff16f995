"""Classification tasks of the ICRL paper (Monea et al. 2024), with its sampling protocol.

    from icrl.tasks import load_task
    task = load_task("banking77_top10_unsemantic", data_dir="/path/to/datasets")
    train = task.training_examples(size=-1, seed=100)     # the paper's order for seed 100
    prompt, answer = task.prompt(train[0]), task.answer(train[0])

Task names are a base name (:data:`TASK_NAMES`) followed, in any order, by optional
suffixes: ``_top<K>`` keeps the K most frequent training labels (and only their rows),
``_unsemantic`` renames every label to ``label_<1000+id>``.

Data comes from ``data_dir``, else the ``ICRL_DATA_DIR`` environment variable, else the
Hugging Face Hub (see :mod:`icrl.tasks.sources`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from icrl.errors import UsageError
from icrl.tasks import sources

__all__ = ["TASK_NAMES", "Example", "Task", "load_task", "prediction_prefix"]


@dataclass(frozen=True)
class Example:
    """One row of a split.

    id:    the row's index in its split as loaded (HF order), before any top-K filtering,
           so it identifies the row across task variants. For nlu: the index in the split
           produced by the paper's train/test split.
    text:  the input text.
    label: index into ``task.labels``.
    """

    id: int
    text: str
    label: int


class Task:
    """A labelled train/test set plus how to prompt for it.

    Mostly data: ``name``, ``labels`` (label strings in id order), ``prompt_template``
    (``str.format`` template with ``{text}``), ``prediction_prefix`` (what precedes the
    model's answer), ``description`` (empty for all paper tasks), ``train``/``test`` rows.

    Sampling follows the published protocol and uses the global ``random`` module:
    ``random.seed(seed)`` then ``random.shuffle`` of a copy of the rows.
    """

    def __init__(self, name: str, labels: Sequence[str], prompt_template: str,
                 prediction_prefix: str, train: Sequence[Example], test: Sequence[Example],
                 description: str = ""):
        self.name = name
        self.labels: List[str] = list(labels)
        self.prompt_template = prompt_template
        self.prediction_prefix = prediction_prefix
        self.description = description
        self.train: Tuple[Example, ...] = tuple(train)
        self.test: Tuple[Example, ...] = tuple(test)
        self._index = {label: i for i, label in enumerate(self.labels)}
        if len(self._index) != len(self.labels):
            raise ValueError(f"task {name}: duplicate label strings")
        if any(not 0 <= ex.label < len(self.labels) for ex in self.train + self.test):
            raise ValueError(f"task {name}: a row's label is outside 0..{len(self.labels) - 1}")
        self._pool: List[Example] = list(self.train)
        self._fingerprint: Optional[str] = None

    def __repr__(self) -> str:
        return (f"Task({self.name!r}, {len(self.labels)} labels, "
                f"train={self.num_train}, test={self.num_test})")

    @property
    def num_train(self) -> int:
        """Rows in the training split (exemplars included)."""
        return len(self.train)

    @property
    def num_test(self) -> int:
        """Rows in the test split."""
        return len(self.test)

    def prompt(self, example: Example) -> str:
        """The example's input as shown to the model, e.g. ``Query: <text>``."""
        return self.prompt_template.format(text=example.text)

    def answer(self, example: Example) -> str:
        """The example's gold label string."""
        return self.labels[example.label]

    def label_index(self, label: str) -> int:
        """Position of ``label`` in ``labels``; ValueError when it is not a label."""
        try:
            return self._index[label]
        except KeyError:
            raise ValueError(f"{label!r} is not a label of task {self.name}") from None

    def all_prompts(self) -> List[str]:
        """Prompts of every train row, then every test row (e.g. to size a context)."""
        return [self.prompt(ex) for ex in self.train + self.test]

    def training_examples(self, size: int, seed: int) -> List[Example]:
        """``size`` rows of the training pool in the paper's order for ``seed``.

        The pool is the training split, minus the exemplars once :meth:`exemplars` ran.
        ``size == -1`` (or a size above the pool's) gives the whole pool, shuffled.
        """
        return _shuffled_prefix(self._pool, size, seed)

    def test_examples(self, size: int, seed: int) -> List[Example]:
        """``size`` test rows in the paper's order for ``seed`` (-1: all, shuffled)."""
        return _shuffled_prefix(self.test, size, seed)

    def exemplars(self, per_label: int, seed: int) -> List[Example]:
        """Up to ``per_label`` training rows per label, and remove them from the training pool.

        Walks the training split shuffled with ``seed`` and keeps each row whose label has
        fewer than ``per_label`` exemplars so far; the other rows, in walk order, become the
        pool that :meth:`training_examples` draws from. Each call starts from the full
        training split. ``per_label == 0`` returns [] and leaves the pool as it is.
        """
        if per_label < 0:
            raise UsageError(f"exemplars per label must be >= 0, got {per_label}")
        if per_label == 0:
            return []
        random.seed(seed)
        walk = list(self.train)
        random.shuffle(walk)
        counts = [0] * len(self.labels)
        chosen, rest = [], []
        for ex in walk:
            if counts[ex.label] < per_label:
                counts[ex.label] += 1
                chosen.append(ex)
            else:
                rest.append(ex)
        self._pool = rest
        return chosen

    def fingerprint(self) -> str:
        """sha256 hex over the name, the labels and every train and test row."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(json.dumps([self.name, self.labels], ensure_ascii=False).encode() + b"\n")
            for split, rows in (("train", self.train), ("test", self.test)):
                for ex in rows:
                    line = json.dumps([split, ex.id, ex.text, ex.label], ensure_ascii=False)
                    h.update(line.encode() + b"\n")
            self._fingerprint = h.hexdigest()
        return self._fingerprint


def _shuffled_prefix(rows: Sequence[Example], size: int, seed: int) -> List[Example]:
    if size < -1:
        raise UsageError(f"sample size must be -1 (all) or >= 0, got {size}")
    random.seed(seed)
    shuffled = list(rows)
    random.shuffle(shuffled)
    return shuffled if size == -1 else shuffled[:size]


# ------------------------------------------------------------------------ registry --
@dataclass(frozen=True)
class _Base:
    source: str                 # key of sources.SOURCES
    column: str                 # label column in the HF dataset
    prompt_template: str
    prediction_prefix: str
    drop: Tuple[str, ...] = ()  # HF label names (and their rows) the task leaves out


_BASES: Dict[str, _Base] = {
    "banking77": _Base("banking77", "label", "Query: {text}", "Intent:"),
    "clinic150": _Base("clinc_oos", "intent", "Query: {text}", "Intent:", drop=("oos",)),
    "clinic150_oos": _Base("clinc_oos", "intent", "Query: {text}", "Intent:"),
    "trec_coarse": _Base("trec", "coarse_label", "Question: {text}", "Type:"),
    "trec_fine": _Base("trec", "fine_label", "Question: {text}", "Type:"),
    "nlu": _Base("nlu_evaluation_data", "label", "Utterance: {text}", "Intent:"),
}

TASK_NAMES: Tuple[str, ...] = tuple(_BASES)

_SUFFIX_HELP = ("suffixes, in any order: _top<K> (K most frequent training labels, "
                "1 <= K <= number of labels), _unsemantic")


@functools.lru_cache(maxsize=None)
def _paper_labels() -> Dict[str, List[str]]:
    with open(Path(__file__).resolve().parent / "paper_label_names.json", encoding="utf-8") as f:
        return json.load(f)


def _bad_name(name: str, why: str) -> UsageError:
    return UsageError(f"unknown task {name!r} ({why}); base names: {', '.join(TASK_NAMES)}; "
                      f"{_SUFFIX_HELP}")


def parse_task_name(name: str) -> Tuple[str, Optional[int], bool]:
    """``(base, top_k or None, unsemantic)`` for a task name; UsageError when invalid."""
    base = next((b for b in sorted(TASK_NAMES, key=len, reverse=True)
                 if name == b or name.startswith(b + "_")), None)
    if base is None:
        raise _bad_name(name, "no such base task")
    top_k, unsemantic = None, False
    for part in name[len(base) + 1:].split("_") if name != base else []:
        match = re.fullmatch(r"top(\d+)", part)
        if match and top_k is None:
            top_k = int(match.group(1))
        elif part == "unsemantic" and not unsemantic:
            unsemantic = True
        else:
            raise _bad_name(name, f"bad or repeated suffix {part!r}")
    n_labels = len(_paper_labels()[base])
    if top_k is not None and not 1 <= top_k <= n_labels:
        raise _bad_name(name, f"K={top_k} but {base} has {n_labels} labels")
    return base, top_k, unsemantic


def prediction_prefix(name: str) -> str:
    """The prediction prefix of a task name (``Intent:``/``Type:``), without loading its data."""
    base, _, _ = parse_task_name(name)
    return _BASES[base].prediction_prefix


def _resolve_data_dir(data_dir) -> Optional[str]:
    if data_dir is None:
        data_dir = os.environ.get("ICRL_DATA_DIR") or None
    return None if data_dir is None else os.path.abspath(os.fspath(data_dir))


def _rows(columns: dict, column: str, hf_to_task: Dict[int, int]) -> List[Example]:
    """Examples of one split; rows whose HF label the task drops are skipped (ids keep HF
    positions)."""
    return [Example(i, text, hf_to_task[hf]) for i, (text, hf)
            in enumerate(zip(columns["text"], columns[column])) if hf in hf_to_task]


def _keep_top(k: int, labels: List[str], train: List[Example], test: List[Example]):
    """Keep the k most frequent training labels (ties as Counter.most_common breaks them),
    in their original order, re-indexed 0..k-1, and only their rows."""
    top = {label for label, _ in Counter(ex.label for ex in train).most_common(k)}
    new_id = {old: new for new, old in enumerate(sorted(top))}

    def remap(rows):
        return [Example(ex.id, ex.text, new_id[ex.label]) for ex in rows if ex.label in new_id]

    return [labels[old] for old in sorted(top)], remap(train), remap(test)


def load_task(name: str, data_dir=None) -> Task:
    """Build the task ``name`` (see module docstring) from ``data_dir``, ``$ICRL_DATA_DIR``
    or the Hugging Face Hub, in that order of preference.

    Raises UsageError for an unknown name or a missing raw file.
    """
    base_name, top_k, unsemantic = parse_task_name(name)
    base = _BASES[base_name]
    splits = sources.load_source(base.source, _resolve_data_dir(data_dir))

    hf_names = sources.hf_label_names(base.source, base.column)
    kept = [hf for hf, hf_name in enumerate(hf_names) if hf_name not in base.drop]
    labels = list(_paper_labels()[base_name])
    if len(kept) != len(labels):
        raise RuntimeError(f"{base_name}: {len(kept)} HF labels but {len(labels)} paper labels")
    hf_to_task = {hf: i for i, hf in enumerate(kept)}

    train = _rows(splits["train"], base.column, hf_to_task)
    test = _rows(splits["test"], base.column, hf_to_task)
    if top_k is not None:
        labels, train, test = _keep_top(top_k, labels, train, test)
    if unsemantic:
        labels = [f"label_{1000 + i}" for i in range(len(labels))]
    return Task(name, labels, base.prompt_template, base.prediction_prefix, train, test)
