"""What config.json alone can tell of a run's records (no data, no model).

``records.lines`` sorts the lines out and ``records.inspect_run`` checks their shape (steps,
example ids, planned test steps); a run whose data loads has its content checked, and repaired,
line by line against the lines the run rebuilds (``icrl.run.rebuild``). This module is what is
left to check without the data: ``problems`` says why a finished run whose data cannot be loaded
is not reported from its records (nothing is repaired here: a resume, with the data, repairs):

- a training line's answer is not a label of the task, or (an ICRL run) its prediction is not,
  or its accuracy does not follow from the two;
- a test line's predictions are not one label per test answer in config.json, or its accuracy
  or per-class accuracy does not follow from them.

``check_labels``: config.json's labels are the task's (refused in one line, on resume).
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


def problems(config: dict, train: list, test: list) -> list:
    """What config.json alone shows wrong in the records (module docstring); [] when nothing."""
    try:
        labels = set(_labels(config, "the run"))
    except DamagedRecords as exc:
        return [str(exc)]
    mode = (config.get("resolved") or {}).get("mode")
    found = []
    for r in train:
        step, prediction, answer = r.get("step"), r.get("prediction"), r.get("answer")
        if answer not in labels or (mode == "icrl" and prediction not in labels):
            found.append(f"training step {step}'s answer {answer!r} or prediction {prediction!r} is not a label")
        elif mode == "icrl" and not _same_int(r.get("accuracy"), int(prediction == answer)):
            found.append(f"training step {step}'s accuracy {r.get('accuracy')!r} is not {int(prediction == answer)}")
    answers = (config.get("test_set") or {}).get("answers")
    for r in test:
        predictions = r.get("predictions")
        if not isinstance(answers, list) or not isinstance(predictions, list) or len(predictions) != len(answers) \
                or any(p not in labels for p in predictions):
            found.append(f"test step {r.get('step')}'s predictions are not one label per test example")
            continue
        correct = [int(p == g) for p, g in zip(predictions, answers)]
        accuracy, per_class = sum(correct) / len(correct), per_class_accuracy(answers, correct)
        if not _close(r.get("accuracy"), accuracy) or r.get("per_class_accuracy") != per_class:
            found.append(f"test step {r.get('step')}'s accuracy {r.get('accuracy')!r} is not {accuracy:.4f}")
    return found


def _same_int(value, expected: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == expected


def check_labels(config: dict, labels: list, where="the run") -> None:
    """config.json's labels are the task's, in order (else refused in one line)."""
    if _labels(config, where) != list(labels):
        raise DamagedRecords(f"{where}: the labels in config.json are not the task's ({len(labels)} labels "
                             f"{', '.join(labels[:4])}{', ...' if len(labels) > 4 else ''}); restore config.json, or "
                             f"pass --overwrite to start again")
