"""Experiment records on disk: one directory per experiment, appended as the run goes.

Layout (the published one, so existing habits carry over)::

    <output_dir>/<model>/<task>/<max_context_examples>/<icrl>/<strategy>[_<method>_<K>][_exemplars<n>]/
        <p_keep>/<omit_feedback>/<flip>[_<prob>]/<temperature>/<training_seed>/
        seed<seed>_testseed<test_seed>_testk<k|all>_every<test_every>[_maxlen<n>][_<backend>]...

The last folder is ours: it holds every argument that changes what a run computes and that
the published path lacks (see ``run_folder``), so runs differing only in a seed, the test
set or the model window sit side by side. ``--train_k`` is not in it: a run with a larger
``--train_k`` extends the finished one (training examples are a prefix of one seeded
permutation). An omitted ``--max_context_examples`` (sized from the window) is ``auto`` in
the path, its resolved number is in config.json; zero-shot's strategy folder is ``none``.

Files in it:

- ``config.json``   every argument (never the HF token), resolved settings, package versions,
                    git commit, device, dataset fingerprint, the test set and exemplars.
- ``train.jsonl``   one JSON line per training step (written last for its step).
- ``test.jsonl``    one JSON line per test step.
- ``results.json``  summary, rewritten atomically after each test step (``finished`` flag).
- ``log.txt``       the run's log.

A step is complete once its train line is on disk (its test line, if any, is written just
before). Each append is flushed and fsynced, so a killed run loses at most the step in
flight; a truncated last line is detected and dropped on resume.

``inspect_run`` checks a run's records against its ``config.json`` (the lines sorted out by
``lines.sort_out``, the pass a resume makes too: step numbers, training example ids, planned
test steps, test-set size); the experiment trusts a finished run only when it passes. The
readers (``Results``, plots, the viewer, the report, token counts, the benchmark score) read a
run through ``read_run``: the same check, and every line parsed into
its type (a field of the wrong type: ``DamagedRecords`` naming the file, the line and the field).

Modules: ``layout`` (the run directory and file names), ``schema`` (the line dataclasses and
TypedDicts of every record), ``typed`` (a JSON value against an annotation), ``io`` (the one
atomic writer, appends, readers), ``lines`` (the record files sorted out against a plan),
``check`` (records against their config.json), ``read`` (a run read back typed), ``store``
(``RunRecords``: one run directory). Every name but those of ``typed``, ``lines`` and ``read``
is importable from ``icrl.records`` itself.
"""

from __future__ import annotations

from pathlib import Path

from .check import DamagedRecords, RunState, inspect_run, plan_of
from .io import (append_jsonl, parse_jsonl, read_json, read_jsonl, remove_leftovers, write_atomic,
                 write_csv_atomic, write_json_atomic, write_jsonl_atomic)
from .layout import (CONFIG, FORMAT_VERSION, LOG, MAX_CONTEXT_FILE, OPTIONAL_FOLDER_ARGS, RESULTS, TEST,
                     TRAIN, experiment_dir, find_runs, max_context_path, run_folder)
from .store import RunRecords

__all__ = [
    "CONFIG", "FORMAT_VERSION", "LOG", "MAX_CONTEXT_FILE", "OPTIONAL_FOLDER_ARGS", "RESULTS", "TEST", "TRAIN",
    "DamagedRecords", "Path", "RunRecords", "RunState", "append_jsonl",
    "experiment_dir", "find_runs", "inspect_run", "max_context_path", "parse_jsonl", "plan_of", "read_json",
    "read_jsonl", "remove_leftovers", "run_folder", "write_atomic", "write_csv_atomic",
    "write_json_atomic", "write_jsonl_atomic",
]
