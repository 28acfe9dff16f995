"""What a run's records say, checked against themselves and the data.

``records.inspect_run`` checks their shape (steps, example ids, planned test steps); a run
whose data loads has its content checked line by line against the lines the run rebuilds
(``icrl.run.rebuild``), which this module's checks are a part of. This module checks what
config.json alone can tell: a finished run whose data cannot be loaded is reported from its
records only when they pass it (``damaged``), and config.json's labels are checked against the
task's (``check_labels``):

- every training prediction of an ICRL run is a label of the task (else refused: the steps
  after it were computed from it, nothing can be recomputed without rerunning them);
- every training accuracy follows from prediction and gold answer (repaired);
- every test prediction is a label (else the test step is dropped and recomputed on
  resume), every test accuracy and per-class accuracy follows from the predictions and the
  test answers in config.json (repaired);
- the labels in config.json are the task's (``check_labels``, refused).

``repair(config, train, test)`` returns the corrected records and one note per repair, or
raises DamagedRecords (one line) for what cannot be recomputed.
"""

from __future__ import annotations

import math
from .check import DamagedRecords
from .summary import per_class_accuracy


def _labels(config: dict, where) -> list:
    labels = (config.get("dataset") or {}).get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise DamagedRecords(f"{where}: config.json has no list of labels; restore it, or pass --overwrite "
                             f"to start again")
    return labels


def _close(a, b) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, abs_tol=1e-12)


def repair(config: dict, train: list, test: list, where="the run") -> tuple[list, list, list]:
    """(train, test, notes): the records with recomputable content fixed (a test step whose
    predictions are not labels is left out, to be recomputed); DamagedRecords otherwise."""
    labels = set(_labels(config, where))
    mode = (config.get("resolved") or {}).get("mode")
    notes: list = []
    fixed_train = []
    for r in train:
        r = dict(r)
        if r.get("answer") not in labels:
            raise DamagedRecords(f"{where}: training step {r.get('step')}'s answer {r.get('answer')!r} is not a label "
                                 f"of the task; the records were edited: pass --overwrite to start again")
        if mode == "icrl":
            if r.get("prediction") not in labels:
                raise DamagedRecords(f"{where}: training step {r.get('step')}'s prediction {r.get('prediction')!r} is "
                                     f"not a label of the task, and later steps depend on it; pass --overwrite to "
                                     f"start again")
            right = int(r["prediction"] == r["answer"])
            if r.get("accuracy") != right or isinstance(r.get("accuracy"), bool):
                notes.append(f"training step {r['step']}'s accuracy ({r.get('accuracy')!r}, should be {right})")
                r["accuracy"] = right
        fixed_train.append(r)
    answers = (config.get("test_set") or {}).get("answers")
    fixed_test = []
    for r in test:
        r = dict(r)
        predictions = r.get("predictions")
        if not isinstance(answers, list) or not isinstance(predictions, list) or len(predictions) != len(answers) \
                or any(p not in labels for p in predictions):
            notes.append(f"test step {r.get('step')} (predictions that are not labels; recomputed)")
            continue
        correct = [int(p == g) for p, g in zip(predictions, answers)]
        accuracy, per_class = sum(correct) / len(correct), per_class_accuracy(answers, correct)
        if not _close(r.get("accuracy"), accuracy) or r.get("per_class_accuracy") != per_class:
            notes.append(f"test step {r['step']}'s accuracy ({r.get('accuracy')!r}, should be {accuracy:.4f})")
            r["accuracy"], r["per_class_accuracy"] = accuracy, per_class
        fixed_test.append(r)
    return fixed_train, fixed_test, notes


def damaged(config: dict, train: list, test: list) -> bool:
    """Whether ``repair`` would change or refuse the records (what a finished run whose data
    cannot be loaded is checked by: the data's check, icrl.run.rebuild, cannot run)."""
    try:
        return bool(repair(config, train, test)[2])
    except DamagedRecords:
        return True


def check_labels(config: dict, labels: list, where="the run") -> None:
    """config.json's labels are the task's, in order (else refused in one line)."""
    if _labels(config, where) != list(labels):
        raise DamagedRecords(f"{where}: the labels in config.json are not the task's ({len(labels)} labels "
                             f"{', '.join(labels[:4])}{', ...' if len(labels) > 4 else ''}); restore config.json, or "
                             f"pass --overwrite to start again")
