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

``read_log`` reads a run back (``records.log``): each file once, each line once, config.json
typed (``records.configfile.ConfigFile``), and says whether the run can be used, what a resume
continues from, what is damaged and whether it is complete: the resume and every reader
(``Results``, plots, the viewer, the report, token counts, the benchmark score) read a run
through it, so they refuse the same runs.

Modules: ``layout`` (the run directory and file names), ``schema`` (the line dataclasses and
TypedDicts of the other records), ``configfile`` (config.json's dataclasses and its own
consistency), ``plan`` (a run's steps and test steps), ``typed`` (a JSON value against an
annotation), ``io`` (the one atomic writer, appends, strict JSON readers), ``lines`` (the record
files sorted out against a plan), ``log`` (``read_log``), ``summary`` (results.json), ``store``
(``RunRecords``: one run directory).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DamagedRecords
from .log import RunLog, read_log
from .io import (append_jsonl, parse_jsonl, read_json, read_jsonl, remove_leftovers, write_atomic,
                 write_csv_atomic, write_json_atomic, write_jsonl_atomic)
from .layout import (CONFIG, FORMAT_VERSION, LOG, MAX_CONTEXT_FILE, OPTIONAL_FOLDER_ARGS, RESULTS, TEST,
                     TRAIN, experiment_dir, find_runs, max_context_path, run_folder)
from .store import RunRecords

__all__ = [
    "CONFIG", "FORMAT_VERSION", "LOG", "MAX_CONTEXT_FILE", "OPTIONAL_FOLDER_ARGS", "RESULTS", "TEST", "TRAIN",
    "DamagedRecords", "Path", "RunLog", "RunRecords", "append_jsonl",
    "experiment_dir", "find_runs", "max_context_path", "parse_jsonl", "read_json", "read_log",
    "read_jsonl", "remove_leftovers", "run_folder", "write_atomic", "write_csv_atomic",
    "write_json_atomic", "write_jsonl_atomic",
]
