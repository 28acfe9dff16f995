"""Classification tasks of the ICRL paper (Monea et al. 2024), with its sampling protocol.

    from icrl.tasks import load_task
    task = load_task("banking77_top10_unsemantic", data_dir="/path/to/datasets")
    train = task.training_examples(size=-1, seed=100)     # the paper's order for seed 100
    prompt, answer = task.prompt(train[0]), task.answer(train[0])

Task names are a base name followed, in any order, by optional suffixes: ``_top<K>`` keeps
the K most frequent training labels (and only their rows), ``_unsemantic`` renames every
label to ``label_<1000+id>``. A base name is a built-in task (:data:`TASK_NAMES`) or the path
of a task file ending in ``.toml`` (``my/task.toml_top5``; docs/tasks.md). The built-in tasks
are task files too, shipped in ``icrl/tasks/builtin/``.

A built-in task's data comes from ``data_dir``, else the ``ICRL_DATA_DIR`` environment
variable, else ``../shared/datasets`` beside the checkout when it exists, else the Hugging Face
Hub (:func:`icrl.tasks.sources.data_dir_of`); a task file names its own.
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
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from icrl.errors import UsageError
from icrl.tasks import sources
from icrl.tasks.rows import load_rows
from icrl.tasks.taskfile import BUILTIN_DIR, TaskSpec, read_task_file

__all__ = ["TASK_NAMES", "Example", "Task", "load_task", "parse_task_name", "prediction_prefix", "prompt_parts",
           "task_folder"]


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
    model's answer), ``description`` (empty for all paper tasks), ``train``/``test`` rows,
    ``hierarchy`` (label -> parent group, for graded rewards; may be empty).
    ``strict_exemplars``: :meth:`exemplars` refuses a label with fewer training rows than
    asked (task files); the built-in tasks take what there is, as published.

    Sampling follows the published protocol and uses the global ``random`` module:
    ``random.seed(seed)`` then ``random.shuffle`` of a copy of the rows.
    """

    def __init__(self, name: str, labels: Sequence[str], prompt_template: str,
                 prediction_prefix: str, train: Sequence[Example], test: Sequence[Example],
                 description: str = "", hierarchy: Optional[Dict[str, str]] = None,
                 strict_exemplars: bool = False):
        self.name = name
        self.hierarchy: Dict[str, str] = dict(hierarchy or {})
        self.strict_exemplars = strict_exemplars
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
        if self.strict_exemplars:
            counts = Counter(ex.label for ex in self.train)
            short = [i for i in range(len(self.labels)) if counts[i] < per_label]
            if short:
                label = self.labels[short[0]]
                raise UsageError(f"task {self.name}: label {label!r} has {counts[short[0]]} training rows, "
                                 f"fewer than --exemplars_per_label {per_label}"
                                 f"{f' ({len(short)} labels are short)' if len(short) > 1 else ''}; "
                                 f"lower --exemplars_per_label or add rows")
        random.seed(seed)
        walk = list(self.train)
        random.shuffle(walk)
        taken = [0] * len(self.labels)
        chosen, rest = [], []
        for ex in walk:
            if taken[ex.label] < per_label:
                taken[ex.label] += 1
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
#: The built-in tasks, each a task file ``builtin/<name>.toml`` shipped with the package.
TASK_NAMES: Tuple[str, ...] = ("banking77", "clinic150", "clinic150_oos", "trec_coarse", "trec_fine", "nlu")
TASK_FILE_SUFFIX = ".toml"

_SUFFIX_HELP = ("suffixes, in any order: _top<K> (K most frequent training labels, "
                "1 <= K <= number of labels), _unsemantic")


@functools.lru_cache(maxsize=None)
def _builtin_spec(base: str) -> TaskSpec:
    return read_task_file(BUILTIN_DIR / f"{base}{TASK_FILE_SUFFIX}", builtin=True)


def _bad_name(name: str, why: str) -> UsageError:
    return UsageError(f"unknown task {name!r} ({why}); base names: {', '.join(TASK_NAMES)}, or a task file "
                      f"path ending in {TASK_FILE_SUFFIX} (docs/tasks.md); {_SUFFIX_HELP}")


def _split_name(name: str) -> Tuple[str, str, bool]:
    """``(base, suffix text, is a task file)``: ``a/b.toml_top5`` -> ``("a/b.toml", "top5", True)``."""
    end = name.rfind(TASK_FILE_SUFFIX) + len(TASK_FILE_SUFFIX)
    if end >= len(TASK_FILE_SUFFIX) and (end == len(name) or name[end] == "_"):
        return name[:end], name[end + 1:], True
    base = next((b for b in sorted(TASK_NAMES, key=len, reverse=True)
                 if name == b or name.startswith(b + "_")), None)
    if base is None:
        raise _bad_name(name, "no such base task")
    return base, name[len(base) + 1:], False


def _spec(base: str, is_file: bool) -> TaskSpec:
    return read_task_file(base) if is_file else _builtin_spec(base)


def parse_task_name(name: str) -> Tuple[str, Optional[int], bool]:
    """``(base, top_k or None, unsemantic)`` for a task name; UsageError when invalid.

    For a task file the file is read and checked (not its data): a bad file fails here."""
    base, rest, is_file = _split_name(name)
    top_k, unsemantic = None, False
    for part in rest.split("_") if name != base else []:
        match = re.fullmatch(r"top(\d+)", part)
        if match and top_k is None:
            top_k = int(match.group(1))
        elif part == "unsemantic" and not unsemantic:
            unsemantic = True
        else:
            raise _bad_name(name, f"bad or repeated suffix {part!r}")
    labels = _spec(base, is_file).label_names()
    if top_k is not None and (top_k < 1 or (labels is not None and top_k > len(labels))):
        raise _bad_name(name, f"K={top_k} but {base} has {len(labels) if labels else 'its ClassLabel'} labels")
    return base, top_k, unsemantic


def task_folder(name: str) -> str:
    """The folder a task's runs live in under ``<output_dir>/<model>/``: a built-in name as it
    is (the published layout); for a task file, its readable stem and a hash of its resolved
    path, then the suffixes (``my/sst.toml_top2`` -> ``sst-1a2b3c4d_top2``), so the folder
    stays one path component whatever the path holds. Reads no file. A name that is neither
    (records written by code for a task of its own) stays as it is."""
    try:
        base, rest, is_file = _split_name(name)
    except UsageError:
        return name
    if not is_file:
        return name
    resolved = Path(base).expanduser().resolve()
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", resolved.stem).lstrip(".")[:40] or "task"
    digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:8]
    return f"{stem}-{digest}" + (f"_{rest}" if rest else "")


def prediction_prefix(name: str) -> str:
    """The prediction prefix of a task name (``Intent:``/``Type:``), without loading its data."""
    return prompt_parts(name)["prediction_prefix"]


def prompt_parts(name: str) -> Dict[str, str]:
    """What a prompt needs of a task beyond its rows (``prediction_prefix``, ``description``),
    without loading its data."""
    base, _, is_file = _split_name(name)
    spec = _spec(base, is_file)
    return {"prediction_prefix": spec.prediction_prefix, "description": spec.description}


def _keep_top(k: int, labels: List[str], train: List[Example],
              test: List[Example]) -> Tuple[List[str], List[Example], List[Example]]:
    """Keep the k most frequent training labels (ties as Counter.most_common breaks them),
    in their original order, re-indexed 0..k-1, and only their rows."""
    top = {label for label, _ in Counter(ex.label for ex in train).most_common(k)}
    new_id = {old: new for new, old in enumerate(sorted(top))}

    def remap(rows: Iterable[Example]) -> List[Example]:
        return [Example(ex.id, ex.text, new_id[ex.label]) for ex in rows if ex.label in new_id]

    return [labels[old] for old in sorted(top)], remap(train), remap(test)


def data_at_hand(name: str, data_dir: Union[str, os.PathLike[str], None] = None) -> bool:
    """Whether ``load_task(name, data_dir)`` reads local files only (a task file's rows, or a
    source's raw files from a known folder), never the Hugging Face Hub; False for a name that
    is not a task's."""
    try:
        spec = _spec(*_split_name(name)[::2])
    except UsageError:
        return False
    return not spec.source or sources.data_dir_of(data_dir) is not None


def load_task(name: str, data_dir: Union[str, os.PathLike[str], None] = None) -> Task:
    """Build the task ``name`` (see module docstring). A built-in task reads ``data_dir``,
    ``$ICRL_DATA_DIR``, ``../shared/datasets`` beside the checkout or the Hugging Face Hub, in that
    order of preference (:func:`icrl.tasks.sources.data_dir_of`).

    Raises UsageError (one line) for an unknown name, a bad task file, a missing raw file or
    data that does not fit its task file.
    """
    base, top_k, unsemantic = parse_task_name(name)
    spec = _spec(*_split_name(name)[::2])
    labels, train_rows, test_rows = load_rows(spec, sources.data_dir_of(data_dir) if spec.source else None)
    train = [Example(*row) for row in train_rows]
    test = [Example(*row) for row in test_rows]
    if top_k is not None:
        if top_k > len(labels):
            raise _bad_name(name, f"K={top_k} but {base} has {len(labels)} labels")
        labels, train, test = _keep_top(top_k, labels, train, test)
    hierarchy = {label: parent for label, parent in spec.hierarchy.items() if label in labels}
    if unsemantic:
        renamed = {label: f"label_{1000 + i}" for i, label in enumerate(labels)}
        labels = [renamed[label] for label in labels]
        hierarchy = {renamed[label]: parent for label, parent in hierarchy.items()}
    return Task(name, labels, spec.prompt_template, spec.prediction_prefix, train, test,
                description=spec.description, hierarchy=hierarchy, strict_exemplars=not spec.builtin)

